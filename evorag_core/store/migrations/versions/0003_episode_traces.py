"""episodes: source, adapter, data_path, run and the outcome (answer, em, f1, refused, n_steps) as columns, with
indexes on what the Traces tab filters by; judgments.who indexed for the annotator filter.

Existing rows are backfilled where the stored data says it: n_steps from their steps, source 'rollout' for
episodes whose config holds the rollout settings (what `save_rollout` writes), 'studio' for the others, the adapter
and data file from the studio's config JSON; their outcome stays NULL (it was not stored).

Revision ID: 0003
Revises: 0002
"""
import json

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("source", sa.String(20)),
    ("adapter", sa.String(200)),
    ("data_path", sa.Text()),
    ("run", sa.String(200)),
    ("answer", sa.Text()),
    ("em", sa.Float()),
    ("f1", sa.Float()),
    ("refused", sa.Boolean()),
    ("n_steps", sa.Integer()),
)
_INDEXES = ("policy", "stage", "created_at", "source", "adapter", "run", "em", "f1", "total_return")


def upgrade() -> None:
    with op.batch_alter_table("episodes") as batch:
        for name, type_ in _COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    for column in _INDEXES:
        op.create_index(f"ix_episodes_{column}", "episodes", [column])
    op.create_index("ix_judgments_who", "judgments", ["who"])
    _backfill()


def _backfill() -> None:
    conn = op.get_bind()
    conn.execute(sa.text("UPDATE episodes SET n_steps = (SELECT COUNT(*) FROM steps WHERE steps.episode_id = episodes.id)"))
    rows = conn.execute(sa.text("SELECT id, config FROM episodes")).all()
    for episode_id, config in rows:
        config = json.loads(config) if isinstance(config, str) else (config or {})
        source = "rollout" if "rollout" in config else "studio"
        adapter = config.get("adapter") if isinstance(config.get("adapter"), str) else None
        data = config.get("data") if isinstance(config.get("data"), str) else None
        conn.execute(sa.text("UPDATE episodes SET source = :s, adapter = :a, data_path = :d WHERE id = :i"),
                     {"s": source, "a": adapter, "d": data, "i": episode_id})


def downgrade() -> None:
    op.drop_index("ix_judgments_who", table_name="judgments")
    for column in _INDEXES:
        op.drop_index(f"ix_episodes_{column}", table_name="episodes")
    with op.batch_alter_table("episodes") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
