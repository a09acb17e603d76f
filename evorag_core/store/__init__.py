"""The database: one schema versioned by Alembic, and the `Store` service layer over it.

`open_store(url)` migrates the database (SQLite file by default, any SQLAlchemy URL works) and returns a
`Store`; see `store.py` for the error conventions, `pairs.py` / `rounds.py` for the queue lifecycles and
`round_logs.py` for the rounds' log lines.
"""
from __future__ import annotations

from evorag_core.store.migrate import MIGRATIONS_DIR, current_revisions, head_revisions
from evorag_core.store.records import (
    ANNOTATION_KINDS,
    ANNOTATION_SOURCES,
    DECISIONS,
    AnnotationItem,
    AnnotationLabel,
    AnnotationProgress,
    NewAnnotationItem,
    EPISODE_SOURCES,
    PAIR_SOURCES,
    PAIR_STATUSES,
    STEP_ACTORS,
    ROUND_STATUSES,
    USER_ROLES,
    Adapter,
    DatasetInfo,
    Episode,
    ExpiryReport,
    Judgment,
    NewLogLine,
    NewPair,
    Outcome,
    Pair,
    Round,
    RoundLogLine,
    Sibling,
    Step,
    User,
)
from evorag_core.store.store import Store, open_store
from evorag_core.store.traces import NO_ADAPTER, OUTCOMES, TRACE_ORDERS, TraceFacets, TraceFilter, TracePage, TraceRow, parse_day

__all__ = [
    "ANNOTATION_KINDS",
    "ANNOTATION_SOURCES",
    "DECISIONS",
    "AnnotationItem",
    "AnnotationLabel",
    "AnnotationProgress",
    "NewAnnotationItem",
    "open_store",
    "Store",
    "MIGRATIONS_DIR",
    "current_revisions",
    "head_revisions",
    "EPISODE_SOURCES",
    "PAIR_SOURCES",
    "PAIR_STATUSES",
    "STEP_ACTORS",
    "ROUND_STATUSES",
    "USER_ROLES",
    "Adapter",
    "DatasetInfo",
    "Episode",
    "ExpiryReport",
    "Judgment",
    "NewPair",
    "NewLogLine",
    "Pair",
    "Round",
    "RoundLogLine",
    "Sibling",
    "Step",
    "User",
    "Outcome",
    "TraceFilter",
    "TraceRow",
    "TracePage",
    "TraceFacets",
    "TRACE_ORDERS",
    "OUTCOMES",
    "NO_ADAPTER",
    "parse_day",
]
