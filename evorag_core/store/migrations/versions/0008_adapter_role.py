"""adapters.role: what an adapter is applied to when it is live or evaluated.

"policy" (every LM call of the agent: its SEARCH / ANSWER decisions, its queries and its answers) or "reader" (only
the answer read; the policy runs the base model): a round trained on answer pairs (source "answer") registers a
reader adapter (`evorag_core/adapters/role.py`). Existing adapters of such rounds become readers (their round's
config says `"source": "answer"`); every other existing adapter stays a policy adapter.

Revision ID: 0008
Revises: 0007
"""
import json

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("adapters") as batch:
        batch.add_column(sa.Column("role", sa.String(20), nullable=False, server_default="policy"))
    conn = op.get_bind()
    rounds = sa.table("rounds", sa.column("id", sa.Integer()), sa.column("config", sa.JSON()))
    adapters = sa.table("adapters", sa.column("round_id", sa.Integer()), sa.column("role", sa.String(20)))
    readers = []
    for round_id, config in conn.execute(sa.select(rounds.c.id, rounds.c.config)):
        config = json.loads(config) if isinstance(config, str) else (config or {})
        if isinstance(config, dict) and config.get("source") == "answer":
            readers.append(round_id)
    if readers:
        conn.execute(adapters.update().where(adapters.c.round_id.in_(readers)).values(role="reader"))


def downgrade() -> None:
    with op.batch_alter_table("adapters") as batch:
        batch.drop_column("role")
