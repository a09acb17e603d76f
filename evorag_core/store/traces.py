"""The trace browser's queries: stored episodes filtered, counted and paged in the database, never all loaded.

`search_traces(TraceFilter, limit, offset)` builds one WHERE clause from the filter and runs two statements in one
read transaction: `COUNT(*)` for the total and `LIMIT/OFFSET` for the page (no steps loaded). Every filter column
is indexed (migration 0003); the text search is a case-insensitive substring of the question (or an exact question
id). `trace_facets()` lists the distinct values the filter pickers offer. `eval_runs()` summarises the stored
evaluation runs (episodes of source 'eval', grouped by run) in one GROUP BY, so a restarted studio lists them.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, or_, select

from evorag_core.store.base import StoreBase, check_choice
from evorag_core.store.records import EPISODE_SOURCES
from evorag_core.store.schema import episodes, judgments

__all__ = ["TraceFilter", "TraceRow", "TracePage", "TraceFacets", "EvalRunRow", "TraceOps", "TRACE_ORDERS", "OUTCOMES",
           "NO_ADAPTER", "parse_day"]

TRACE_ORDERS: tuple[str, ...] = ("newest", "oldest", "return-desc", "return-asc", "f1-desc", "f1-asc")
# outcome filter: correct = EM 1; wrong = graded and EM 0 (refusals of answerable questions included); refused
OUTCOMES: tuple[str, ...] = ("correct", "wrong", "refused", "answered", "ungraded")
NO_ADAPTER = "(none)"  # the adapter filter's value for episodes without an adapter (the base model)
MAX_PAGE = 500


@dataclass(frozen=True)
class TraceFilter:
    """What the Traces tab asks for; None (or "") means "any". Ranges are inclusive; `date_from` / `date_to` are
    whole UTC days (date_to included)."""

    dataset: str | None = None
    policy: str | None = None
    adapter: str | None = None  # NO_ADAPTER: episodes run without one
    stage: str | None = None
    source: str | None = None
    run: str | None = None
    outcome: str | None = None  # one of OUTCOMES
    f1_min: float | None = None
    f1_max: float | None = None
    return_min: float | None = None
    return_max: float | None = None
    annotator: str | None = None  # someone who overrode a verdict in the episode
    date_from: date | None = None
    date_to: date | None = None
    text: str | None = None  # substring of the question (any case), or a question id
    order: str = "newest"

    def __post_init__(self) -> None:
        check_choice("order", self.order, TRACE_ORDERS)
        if self.outcome:
            check_choice("outcome", self.outcome, OUTCOMES)
        if self.source:
            check_choice("source", self.source, EPISODE_SOURCES)
        for low, high, what in ((self.f1_min, self.f1_max, "F1"), (self.return_min, self.return_max, "return"),
                                (self.date_from, self.date_to, "date")):
            if low is not None and high is not None and low > high:
                raise ValueError(f"the {what} range is empty: from {low} to {high}")

    def active(self) -> dict[str, Any]:
        """The filters that are set (for a message: 'no trace matches dataset=demo, outcome=refused')."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "order" and getattr(self, f.name) not in (None, "")}


@dataclass(frozen=True)
class TraceRow:
    """One row of the trace list (an episode without its steps)."""

    id: int
    created_at: datetime
    source: str | None
    dataset: str
    data_path: str | None
    question_id: str
    question: str
    policy: str
    adapter: str | None
    stage: str
    run: str | None
    status: str
    n_steps: int | None
    answer: str | None
    em: float | None
    f1: float | None
    refused: bool | None
    total_return: float | None


@dataclass(frozen=True)
class TracePage:
    rows: tuple[TraceRow, ...]
    total: int  # rows matching the filter, over all pages
    limit: int
    offset: int

    @property
    def page(self) -> int:
        """1-based number of this page."""
        return self.offset // self.limit + 1

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.limit))


@dataclass(frozen=True)
class TraceFacets:
    """Distinct values for the filter pickers."""

    datasets: tuple[str, ...]
    policies: tuple[str, ...]
    adapters: tuple[str, ...]
    stages: tuple[str, ...]
    runs: tuple[str, ...]
    annotators: tuple[str, ...]


_ROW_COLUMNS = [episodes.c[f.name] for f in fields(TraceRow)]


@dataclass(frozen=True)
class EvalRunRow:
    """A stored evaluation run: its episodes (source 'eval') of one `run`, summarised. Means skip episodes without
    the value (an ungraded one has no EM); `avg_steps` counts the method's steps where the episode recorded them
    (config "steps"), else its stored steps; `seconds` is the sum of the questions' times."""

    run: str
    policy: str  # the method's label
    dataset: str
    n: int
    em: float | None
    f1: float | None
    avg_steps: float | None
    support_recall: float | None
    refusal_rate: float | None
    seconds: float | None
    started_at: datetime
    last_id: int  # the newest episode's id (runs are ordered by it)


def parse_day(text: str | None, what: str = "date") -> date | None:
    """'2026-11-25' -> date; '' or None -> None; anything else -> ValueError naming the expected form."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"the {what} {text[:40]!r} is not a date; write it as YYYY-MM-DD, e.g. 2026-11-25") from None


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=timezone.utc)


def _outcome_clause(outcome: str) -> ColumnElement[bool]:
    c = episodes.c
    return {
        "correct": c.em >= 1.0,
        "wrong": and_(c.em.is_not(None), c.em < 1.0),
        "refused": c.refused.is_(True),
        "answered": c.answer.is_not(None),
        "ungraded": c.em.is_(None),
    }[outcome]


def _where(f: TraceFilter) -> list[ColumnElement[bool]]:
    c = episodes.c
    out: list[ColumnElement[bool]] = []
    for name in ("dataset", "policy", "stage", "source", "run"):
        value = getattr(f, name)
        if value:
            out.append(c[name] == value)
    if f.adapter:
        out.append(c.adapter.is_(None) if f.adapter == NO_ADAPTER else c.adapter == f.adapter)
    if f.outcome:
        out.append(_outcome_clause(f.outcome))
    for column, low, high in ((c.f1, f.f1_min, f.f1_max), (c.total_return, f.return_min, f.return_max)):
        if low is not None:
            out.append(column >= low)
        if high is not None:
            out.append(column <= high)
    if f.date_from is not None:
        out.append(c.created_at >= _day_start(f.date_from))
    if f.date_to is not None:
        out.append(c.created_at < _day_start(f.date_to + timedelta(days=1)))
    if f.annotator:  # an IN over the indexed judgments.who, not a correlated EXISTS probed for every episode
        out.append(c.id.in_(select(judgments.c.episode_id).where(judgments.c.who == f.annotator,
                                                                 judgments.c.is_override.is_(True))))
    text = (f.text or "").strip()
    if text:
        out.append(or_(c.question.icontains(text, autoescape=True), c.question_id == text))
    return out


def _order(order: str) -> list[Any]:
    c = episodes.c
    by = {
        "newest": [c.id.desc()],
        "oldest": [c.id.asc()],
        "return-desc": [c.total_return.desc().nulls_last(), c.id.desc()],
        "return-asc": [c.total_return.asc().nulls_last(), c.id.desc()],
        "f1-desc": [c.f1.desc().nulls_last(), c.id.desc()],
        "f1-asc": [c.f1.asc().nulls_last(), c.id.desc()],
    }
    return by[order]


class TraceOps(StoreBase):
    def search_traces(self, trace_filter: TraceFilter | None = None, *, limit: int = 25, offset: int = 0) -> TracePage:
        """One page of the episodes matching the filter (no steps) and how many match in all."""
        f = trace_filter or TraceFilter()
        if not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"a page holds 1 to {MAX_PAGE} traces, not {limit}")
        if offset < 0:
            raise ValueError(f"the offset must be >= 0, not {offset}")
        where = _where(f)
        count = select(func.count()).select_from(episodes).where(*where)
        page = select(*_ROW_COLUMNS).where(*where).order_by(*_order(f.order)).limit(limit).offset(offset)
        with self._read() as conn:
            total = int(conn.scalar(count) or 0)
            rows = tuple(TraceRow(**row) for row in conn.execute(page).mappings())
        return TracePage(rows, total, limit, offset)

    def eval_runs(self, limit: int = 50) -> tuple[EvalRunRow, ...]:
        """The `limit` newest evaluation runs (by their newest episode), oldest first, each summarised in SQL."""
        c = episodes.c
        refused = case((c.refused.is_(True), 1.0), (c.refused.is_(False), 0.0), else_=None)
        steps = func.coalesce(c.config["steps"].as_float(), c.n_steps)
        query = (select(c.run, func.max(c.policy).label("policy"), func.max(c.dataset).label("dataset"),
                        func.count().label("n"), func.avg(c.em).label("em"), func.avg(c.f1).label("f1"),
                        func.avg(steps).label("avg_steps"),
                        func.avg(c.config["support_recall"].as_float()).label("support_recall"),
                        func.avg(refused).label("refusal_rate"),
                        func.sum(c.config["seconds"].as_float()).label("seconds"),
                        func.min(c.created_at).label("started_at"), func.max(c.id).label("last_id"))
                 .where(c.source == "eval", c.run.is_not(None)).group_by(c.run)
                 .order_by(func.max(c.id).desc()).limit(limit))
        with self._read() as conn:
            rows = [EvalRunRow(**row) for row in conn.execute(query).mappings()]
        return tuple(reversed(rows))

    def trace_facets(self, limit: int = 200) -> TraceFacets:
        """Distinct datasets, policies, adapters, stages, runs and override annotators (each at most `limit`)."""

        def distinct(column: Any) -> tuple[str, ...]:
            query = select(column).where(column.is_not(None)).group_by(column).order_by(column).limit(limit)
            return tuple(str(v) for v in conn.execute(query).scalars())

        with self._read() as conn:
            return TraceFacets(
                datasets=distinct(episodes.c.dataset), policies=distinct(episodes.c.policy),
                adapters=distinct(episodes.c.adapter), stages=distinct(episodes.c.stage),
                runs=distinct(episodes.c.run),
                annotators=tuple(str(v) for v in conn.execute(
                    select(judgments.c.who).where(judgments.c.is_override.is_(True), judgments.c.who.is_not(None))
                    .group_by(judgments.c.who).order_by(judgments.c.who).limit(limit)).scalars()),
            )
