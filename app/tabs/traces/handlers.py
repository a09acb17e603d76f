"""Traces handlers: the filter form turned into a `TraceFilter`, one page of stored episodes, a trace opened by id
(from a row, a typed id or the page URL: `app.common.stored_traces`, `app.common.links`). Plain values in and out."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evorag_core.store import NO_ADAPTER, TraceFacets, TraceFilter, TraceRow, parse_day

from app.common import views
from app.common.handlers import none_if_all, short
from app.common.links import link_base, url_params
from app.common.services import Services
from app.common.stored_traces import open_trace, parse_trace_id

__all__ = ["TRACE_COLUMNS", "PAGE_SIZE", "TracesView", "trace_filter", "list_traces", "trace_facets", "open_trace",
           "parse_trace_id", "link_base", "url_params"]

PAGE_SIZE = 25
TRACE_COLUMNS = ["#", "when (UTC)", "source", "data", "question id", "question", "policy", "adapter", "stage",
                 "steps", "answer", "EM", "F1", "refused", "return"]


@dataclass(frozen=True)
class TracesView:
    rows: list[list[Any]]  # one per trace, TRACE_COLUMNS
    ids: list[int]  # episode id of each row
    summary: str  # HTML: "traces 1-25 of 10,000 · page 1 of 400" (or why none matches)
    page: int  # 1-based
    pages: int


def _float(value: Any, what: str) -> float | None:
    if value is None or str(value).strip() == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"the {what} {str(value)[:40]!r} is not a number") from None


def trace_filter(dataset: str | None = None, policy: str | None = None, adapter: str | None = None,
                 stage: str | None = None, source: str | None = None, run: str | None = None,
                 outcome: str | None = None, f1_min: Any = None, f1_max: Any = None, return_min: Any = None,
                 return_max: Any = None, annotator: str | None = None, date_from: str | None = None,
                 date_to: str | None = None, text: str | None = None, order: str | None = "newest") -> TraceFilter:
    """The filter form's values ("all" / empty = any) as a TraceFilter; ValueError naming the bad field."""
    lo, hi = _float(f1_min, "lowest F1"), _float(f1_max, "highest F1")
    for v, what in ((lo, "lowest F1"), (hi, "highest F1")):
        if v is not None and not 0.0 <= v <= 1.0:
            raise ValueError(f"the {what} must be between 0 and 1, not {v:g}")
    return TraceFilter(
        dataset=none_if_all(dataset), policy=none_if_all(policy), adapter=none_if_all(adapter),
        stage=none_if_all(stage), source=none_if_all(source), run=none_if_all(run), outcome=none_if_all(outcome),
        f1_min=lo, f1_max=hi, return_min=_float(return_min, "lowest return"),
        return_max=_float(return_max, "highest return"), annotator=none_if_all((annotator or "").strip()),
        date_from=parse_day(date_from, "'from' date"), date_to=parse_day(date_to, "'to' date"),
        text=(text or "").strip() or None, order=order or "newest",
    )


def _num(value: float | None) -> Any:
    return "" if value is None else round(float(value), 3)


def _row(r: TraceRow) -> list[Any]:
    return [r.id, r.created_at.strftime("%Y-%m-%d %H:%M"), r.source or "", r.dataset, r.question_id,
            short(r.question, 80), r.policy, r.adapter or "", r.stage, r.n_steps if r.n_steps is not None else "",
            short(r.answer, 40) if r.answer is not None else "", _num(r.em), _num(r.f1),
            "" if r.refused is None else ("yes" if r.refused else "no"), _num(r.total_return)]


def list_traces(svc: Services, flt: TraceFilter, page: int = 1, page_size: int = PAGE_SIZE) -> TracesView:
    """Page `page` (1-based; past the last page gives the last) of the traces matching `flt`, newest first."""
    store = svc.store()
    page = max(1, int(page or 1))
    result = store.search_traces(flt, limit=page_size, offset=(page - 1) * page_size)
    if not result.rows and result.total and page > result.pages:
        page = result.pages
        result = store.search_traces(flt, limit=page_size, offset=(page - 1) * page_size)
    if result.total == 0:
        active = ", ".join(f"{k}={v}" for k, v in flt.active().items())
        summary = views.message_html(f"No trace matches {active}." if active else
                                     "No traces stored yet: run an episode, `evorag eval` or `evorag rollout`.", "info")
    else:
        first = result.offset + 1
        summary = (f'<div class="evo-h" id="evo-traces-count">traces {first:,}–{result.offset + len(result.rows):,} '
                   f"of {result.total:,} · page {result.page:,} of {result.pages:,}</div>")
    return TracesView([_row(r) for r in result.rows], [r.id for r in result.rows], summary, result.page, result.pages)


def trace_facets(svc: Services) -> TraceFacets:
    return svc.store().trace_facets()


def adapter_choices(facets: TraceFacets) -> list[tuple[str, str]]:
    return [("all", "all"), ("none (base model)", NO_ADAPTER), *((a, a) for a in facets.adapters)]
