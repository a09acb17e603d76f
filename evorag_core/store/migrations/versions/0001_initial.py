"""Initial schema: datasets, questions, episodes, steps, siblings, judgments, rounds, pairs, adapters, users.

Hand-written to match evorag_core/store/schema.py (tests/store/test_store.py compares the two).

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _created() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("n_questions", sa.Integer(), nullable=False),
        _created(),
        sa.PrimaryKeyConstraint("id", name="pk_datasets"),
        sa.UniqueConstraint("name", name="uq_datasets_name"),
    )
    op.create_table(
        "questions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("qid", sa.String(200), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("answers", sa.JSON(), nullable=False),
        sa.Column("type", sa.String(50)),
        sa.Column("hops", sa.Integer()),
        sa.Column("passages", sa.JSON(), nullable=False),
        sa.Column("gold_pids", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_questions"),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name="fk_questions_dataset_id_datasets", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("dataset_id", "qid", name="uq_questions_dataset_id_qid"),
    )
    op.create_table(
        "episodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("question_id", sa.String(200), nullable=False),
        sa.Column("dataset", sa.String(200), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("policy", sa.String(200), nullable=False),
        sa.Column("stage", sa.String(20), nullable=False),
        sa.Column("schedule", sa.String(40), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("total_return", sa.Float()),
        _created(),
        sa.Column("finished_at", sa.DateTime()),
        sa.PrimaryKeyConstraint("id", name="pk_episodes"),
    )
    op.create_index("ix_episodes_dataset_question_id", "episodes", ["dataset", "question_id"])
    op.create_table(
        "steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=False),
        sa.Column("t", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("argument", sa.Text()),
        sa.Column("passages", sa.JSON(), nullable=False),
        sa.Column("signals", sa.JSON(), nullable=False),
        sa.Column("weights", sa.JSON(), nullable=False),
        sa.Column("reward", sa.Float(), nullable=False),
        sa.Column("judge_verdict", sa.String(40)),
        sa.PrimaryKeyConstraint("id", name="pk_steps"),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name="fk_steps_episode_id_episodes", ondelete="CASCADE"
        ),
        sa.UniqueConstraint("episode_id", "t", name="uq_steps_episode_id_t"),
    )
    op.create_table(
        "siblings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("argument", sa.Text()),
        sa.Column("logprob", sa.Float()),
        sa.Column("branch_return", sa.Float()),
        sa.PrimaryKeyConstraint("id", name="pk_siblings"),
        sa.ForeignKeyConstraint(["step_id"], ["steps.id"], name="fk_siblings_step_id_steps", ondelete="CASCADE"),
    )
    op.create_index("ix_siblings_step_id", "siblings", ["step_id"])
    op.create_table(
        "judgments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("episode_id", sa.Integer(), nullable=False),
        sa.Column("t", sa.Integer(), nullable=False),
        sa.Column("judge", sa.String(40), nullable=False),
        sa.Column("verdict", sa.String(40), nullable=False),
        sa.Column("is_override", sa.Boolean(), nullable=False),
        sa.Column("who", sa.String(200)),
        _created(),
        sa.PrimaryKeyConstraint("id", name="pk_judgments"),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name="fk_judgments_episode_id_episodes", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_judgments_episode_id_t", "judgments", ["episode_id", "t"])
    op.create_table(
        "rounds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("objective", sa.String(40), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("lease_owner", sa.String(200)),
        sa.Column("lease_expires_at", sa.DateTime()),
        sa.Column("lease_seconds", sa.Float()),
        sa.Column("heartbeat_at", sa.DateTime()),
        sa.Column("progress", sa.JSON()),
        sa.Column("metrics", sa.JSON()),
        sa.Column("error", sa.Text()),
        _created(),
        sa.Column("started_at", sa.DateTime()),
        sa.Column("finished_at", sa.DateTime()),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_rounds"),
    )
    op.create_index("ix_rounds_status", "rounds", ["status"])
    op.create_table(
        "pairs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("chosen", sa.Text(), nullable=False),
        sa.Column("rejected", sa.Text(), nullable=False),
        sa.Column("source", sa.String(20), nullable=False),
        sa.Column("annotator", sa.String(200)),
        sa.Column("margin", sa.Float()),
        sa.Column("stage", sa.String(20)),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("round_id", sa.Integer()),
        _created(),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_pairs"),
        sa.ForeignKeyConstraint(["round_id"], ["rounds.id"], name="fk_pairs_round_id_rounds"),
    )
    op.create_index("ix_pairs_round_id", "pairs", ["round_id"])
    op.create_index("ix_pairs_status_id", "pairs", ["status", "id"])
    op.create_table(
        "adapters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("base_model", sa.Text(), nullable=False),
        sa.Column("round_id", sa.Integer()),
        sa.Column("objective", sa.String(40)),
        sa.Column("checksum", sa.String(128)),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        _created(),
        sa.PrimaryKeyConstraint("id", name="pk_adapters"),
        sa.ForeignKeyConstraint(["round_id"], ["rounds.id"], name="fk_adapters_round_id_rounds"),
        sa.UniqueConstraint("name", name="uq_adapters_name"),
    )
    active = sa.column("active", sa.Boolean()) == sa.true()
    op.create_index(
        "uq_adapters_one_active", "adapters", ["active"], unique=True, sqlite_where=active, postgresql_where=active
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        _created(),
        sa.PrimaryKeyConstraint("id", name="pk_users"),
        sa.UniqueConstraint("name", name="uq_users_name"),
    )


def downgrade() -> None:
    op.drop_table("users")
    op.drop_index("uq_adapters_one_active", table_name="adapters")
    op.drop_table("adapters")
    op.drop_index("ix_pairs_status_id", table_name="pairs")
    op.drop_index("ix_pairs_round_id", table_name="pairs")
    op.drop_table("pairs")
    op.drop_index("ix_rounds_status", table_name="rounds")
    op.drop_table("rounds")
    op.drop_index("ix_judgments_episode_id_t", table_name="judgments")
    op.drop_table("judgments")
    op.drop_index("ix_siblings_step_id", table_name="siblings")
    op.drop_table("siblings")
    op.drop_table("steps")
    op.drop_index("ix_episodes_dataset_question_id", table_name="episodes")
    op.drop_table("episodes")
    op.drop_table("questions")
    op.drop_table("datasets")
