"""The database schema as SQLAlchemy Core tables (the hand-written migrations 0001-0006 create exactly these).

Timestamps are stored as naive UTC and come back timezone-aware (`UTCDateTime`). JSON columns use the
portable `JSON` type (TEXT on SQLite, json on PostgreSQL). Constraint names follow `NAMING` so that later
migrations (batch mode on SQLite) can refer to them.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    true,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = [
    "NAMING",
    "metadata",
    "UTCDateTime",
    "datasets",
    "questions",
    "episodes",
    "steps",
    "siblings",
    "judgments",
    "rounds",
    "round_logs",
    "pairs",
    "adapters",
    "users",
    "annotation_items",
    "annotation_labels",
    "annotation_leases",
    "promotions",
    "activations",
]

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC; naive inputs are taken as UTC; results are aware (UTC)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is None:
            return value
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _created() -> Column[datetime]:
    return Column("created_at", UTCDateTime(), nullable=False)


datasets = Table(
    "datasets",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("path", Text, nullable=False),
    Column("n_questions", Integer, nullable=False),
    _created(),
)

questions = Table(
    "questions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("dataset_id", Integer, ForeignKey("datasets.id", ondelete="CASCADE"), nullable=False),
    Column("qid", String(200), nullable=False),
    Column("question", Text, nullable=False),
    Column("answers", JSON, nullable=False),
    Column("type", String(50)),
    Column("hops", Integer),
    Column("passages", JSON, nullable=False),
    Column("gold_pids", JSON, nullable=False),
    UniqueConstraint("dataset_id", "qid", name="uq_questions_dataset_id_qid"),
)

episodes = Table(
    "episodes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("question_id", String(200), nullable=False),
    Column("dataset", String(200), nullable=False),
    Column("question", Text, nullable=False),
    Column("policy", String(200), nullable=False),
    Column("stage", String(20), nullable=False),
    Column("schedule", String(40), nullable=False),
    Column("config", JSON, nullable=False),
    Column("status", String(20), nullable=False),
    Column("total_return", Float),
    _created(),
    Column("finished_at", UTCDateTime()),
    # migration 0003: where the episode came from and its outcome, as columns the Traces tab filters on
    Column("source", String(20)),  # studio | eval | rollout (NULL: stored before 0003 and not recognised)
    Column("adapter", String(200)),  # the LoRA adapter the policy ran with (NULL: the base model, or none)
    Column("data_path", Text),  # the data file the question came from
    Column("run", String(200)),  # the evaluation / rollout run it belongs to
    Column("answer", Text),
    Column("em", Float),
    Column("f1", Float),
    Column("refused", Boolean),
    Column("n_steps", Integer),
    Index("ix_episodes_dataset_question_id", "dataset", "question_id"),
    Index("ix_episodes_policy", "policy"),
    Index("ix_episodes_stage", "stage"),
    Index("ix_episodes_created_at", "created_at"),
    Index("ix_episodes_source", "source"),
    Index("ix_episodes_adapter", "adapter"),
    Index("ix_episodes_run", "run"),
    Index("ix_episodes_em", "em"),
    Index("ix_episodes_f1", "f1"),
    Index("ix_episodes_total_return", "total_return"),
)

steps = Table(
    "steps",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("episode_id", Integer, ForeignKey("episodes.id", ondelete="CASCADE"), nullable=False),
    Column("t", Integer, nullable=False),
    Column("action", String(20), nullable=False),
    Column("argument", Text),
    Column("passages", JSON, nullable=False),
    Column("signals", JSON, nullable=False),
    Column("weights", JSON, nullable=False),
    Column("reward", Float, nullable=False),
    Column("judge_verdict", String(40)),
    Column("actor", String(20), nullable=False, server_default="policy"),  # migration 0004: policy | human
    Column("annotator", String(200)),  # migration 0004: who acted, for a human step
    UniqueConstraint("episode_id", "t", name="uq_steps_episode_id_t"),
)

siblings = Table(
    "siblings",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("step_id", Integer, ForeignKey("steps.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("action", String(20), nullable=False),
    Column("argument", Text),
    Column("logprob", Float),
    Column("branch_return", Float),
)

judgments = Table(
    "judgments",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("episode_id", Integer, ForeignKey("episodes.id", ondelete="CASCADE"), nullable=False),
    Column("t", Integer, nullable=False),
    Column("judge", String(40), nullable=False),
    Column("verdict", String(40), nullable=False),
    Column("is_override", Boolean, nullable=False),
    Column("who", String(200)),
    _created(),
    Index("ix_judgments_episode_id_t", "episode_id", "t"),
    Index("ix_judgments_who", "who"),  # migration 0003: the Traces tab's annotator filter
)

rounds = Table(
    "rounds",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("objective", String(40), nullable=False),
    Column("config", JSON, nullable=False),
    Column("status", String(20), nullable=False, index=True),
    Column("lease_owner", String(200)),
    Column("lease_expires_at", UTCDateTime()),
    Column("lease_seconds", Float),
    Column("heartbeat_at", UTCDateTime()),
    Column("progress", JSON),
    Column("metrics", JSON),
    Column("error", Text),
    _created(),
    Column("started_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("cancel_requested_at", UTCDateTime()),  # migration 0002
)

# migration 0005: a round's log lines (its worker's INFO+ records), numbered per round from 1 across its attempts;
# bounded by the store (evorag_core/store/round_logs.py), so `seq` may have one gap where lines were left out
round_logs = Table(
    "round_logs",
    metadata,
    Column("round_id", Integer, ForeignKey("rounds.id", ondelete="CASCADE"), primary_key=True, autoincrement=False),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    _created(),
    Column("level", String(10), nullable=False),
    Column("message", Text, nullable=False),
)

pairs = Table(
    "pairs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("prompt", Text, nullable=False),
    Column("chosen", Text, nullable=False),
    Column("rejected", Text, nullable=False),
    Column("source", String(20), nullable=False),
    Column("annotator", String(200)),
    Column("margin", Float),
    Column("stage", String(20)),
    Column("status", String(20), nullable=False),
    Column("round_id", Integer, ForeignKey("rounds.id"), index=True),
    _created(),
    Column("updated_at", UTCDateTime(), nullable=False),
    Column("metadata", JSON, nullable=False),
    Index("ix_pairs_status_id", "status", "id"),
)

adapters = Table(
    "adapters",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("path", Text, nullable=False),
    Column("base_model", Text, nullable=False),
    Column("round_id", Integer, ForeignKey("rounds.id")),
    Column("objective", String(40)),
    Column("checksum", String(128)),
    Column("metrics", JSON, nullable=False),
    Column("active", Boolean, nullable=False),
    _created(),
    Column("role", String(20), nullable=False, server_default="policy"),  # migration 0008: adapters/role.py
)
# At most one active adapter, enforced by the database itself (partial unique index).
Index(
    "uq_adapters_one_active",
    adapters.c.active,
    unique=True,
    sqlite_where=adapters.c.active == true(),
    postgresql_where=adapters.c.active == true(),
)

users = Table(
    "users",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("password_hash", Text, nullable=False),
    Column("role", String(20), nullable=False),
    _created(),
)

# migration 0006: the annotation queue (evorag_core/store/annotations.py). An item is an agent state with K candidate
# actions (kind "preference") or an evidence set (kind "refusal"), its content in `payload`; `key` names where it came
# from (e.g. "rollout:12:3") so that making items twice does not repeat them; a reviewer's `resolution` is the label
# used for export where annotators disagreed.
annotation_items = Table(
    "annotation_items",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("kind", String(20), nullable=False),
    Column("source", String(20), nullable=False),
    Column("key", String(200), unique=True),
    Column("payload", JSON, nullable=False),
    _created(),
    Column("resolution", JSON),
    Column("resolved_by", String(200)),
    Column("resolved_at", UTCDateTime()),
)

# one label per annotator and item: decision rank | tie | skip | answerable | unanswerable; `ranking` the tiers of
# candidate indices, best first (decision "rank" only)
annotation_labels = Table(
    "annotation_labels",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("item_id", Integer, ForeignKey("annotation_items.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("annotator", String(200), nullable=False, index=True),
    Column("decision", String(20), nullable=False),
    Column("ranking", JSON),
    _created(),
    UniqueConstraint("item_id", "annotator", name="uq_annotation_labels_item_id_annotator"),
)

# who is shown an item now, until when (a lease like a round's: an abandoned one expires and the item is offered again)
annotation_leases = Table(
    "annotation_leases",
    metadata,
    Column("item_id", Integer, ForeignKey("annotation_items.id", ondelete="CASCADE"), primary_key=True,
           autoincrement=False),
    Column("annotator", String(200), primary_key=True),
    Column("expires_at", UTCDateTime(), nullable=False, index=True),
)

# migration 0007: gated promotion (evorag_core/promotion/). A promotion report: one evaluation of adapter `adapter`
# against `against` (NULL: the base model) on the held-out slice, by the evaluation job `round_id` (NULL: the CLI);
# `passed` NULL = no verdict (too few questions). The report JSON holds both sides' summaries, the paired
# differences and the questions whose answers changed (evorag_core/promotion/report.py).
promotions = Table(
    "promotions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("adapter", String(200), nullable=False, index=True),
    Column("against", String(200)),
    Column("round_id", Integer, ForeignKey("rounds.id", ondelete="SET NULL")),
    Column("metric", String(20), nullable=False),
    Column("passed", Boolean),
    Column("verdict", Text, nullable=False),
    Column("report", JSON, nullable=False),
    _created(),
)

# migration 0007: why each adapter went live, or stopped being live (kind promoted | activated | forced | deactivated),
# written in the transaction that flips the active row; the newest row says why the live adapter is live
activations = Table(
    "activations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("adapter", String(200)),  # NULL: the base model went live (a deactivation)
    Column("kind", String(20), nullable=False),
    Column("reason", Text),
    Column("who", String(200)),
    Column("promotion_id", Integer, ForeignKey("promotions.id", ondelete="SET NULL")),
    _created(),
)
