"""round_logs: a training round's log lines (its worker's INFO+ records while it ran the round), so that the studio
and `evorag rounds log` read them also when the worker runs in another process or on another machine.

One row per record: (round_id, seq) is the key, seq numbering the round's lines from 1 across its attempts; the rows
go with their round (ON DELETE CASCADE). Existing rounds have no lines (their logs were only in the worker's log file).

Revision ID: 0005
Revises: 0004
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "round_logs",
        sa.Column("round_id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("level", sa.String(10), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("round_id", "seq", name="pk_round_logs"),
        sa.ForeignKeyConstraint(["round_id"], ["rounds.id"], name="fk_round_logs_round_id_rounds", ondelete="CASCADE"),
    )


def downgrade() -> None:
    op.drop_table("round_logs")
