"""promotions and activations: gated promotion's reports (a candidate adapter evaluated against the live one on a
held-out slice) and the log of why each adapter went live (promoted, activated, forced with a reason, deactivated).

Existing adapters have no report and no activation row: the studio shows their state as "no evaluation".

Revision ID: 0007
Revises: 0006
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "promotions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("adapter", sa.String(200), nullable=False),
        sa.Column("against", sa.String(200), nullable=True),
        sa.Column("round_id", sa.Integer(), nullable=True),
        sa.Column("metric", sa.String(20), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("verdict", sa.Text(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_promotions"),
        sa.ForeignKeyConstraint(["round_id"], ["rounds.id"], name="fk_promotions_round_id_rounds",
                                ondelete="SET NULL"),
    )
    op.create_index("ix_promotions_adapter", "promotions", ["adapter"])
    op.create_table(
        "activations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("adapter", sa.String(200), nullable=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("who", sa.String(200), nullable=True),
        sa.Column("promotion_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_activations"),
        sa.ForeignKeyConstraint(["promotion_id"], ["promotions.id"], name="fk_activations_promotion_id_promotions",
                                ondelete="SET NULL"),
    )


def downgrade() -> None:
    op.drop_table("activations")
    op.drop_index("ix_promotions_adapter", table_name="promotions")
    op.drop_table("promotions")
