"""steps.actor and steps.annotator: who took a step - the policy, or a person acting in its place (and who).

Existing steps were all taken by a policy: they get actor 'policy' (the server default) and no annotator.

Revision ID: 0004
Revises: 0003
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.add_column(sa.Column("actor", sa.String(20), nullable=False, server_default="policy"))
        batch.add_column(sa.Column("annotator", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("steps") as batch:
        batch.drop_column("annotator")
        batch.drop_column("actor")
