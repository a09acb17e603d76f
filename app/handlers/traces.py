"""Traces handlers: the filter form turned into a `TraceFilter`, one page of stored episodes, a trace opened by id
(from a row, a typed id or the page URL), and the Episode tab's question link. Plain values in and out."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from evorag_core.errors import DataAccessError, DatasetFormatError
from evorag_core.store import NO_ADAPTER, Episode, TraceFacets, TraceFilter, TraceRow, parse_day
from evorag_core.types import Dataset, Passage

from app import views
from app.services import Services
from app.trace_view import TraceView, render_trace
from app.handlers.common import none_if_all, short

if TYPE_CHECKING:
    import gradio as gr

__all__ = ["TRACE_COLUMNS", "PAGE_SIZE", "TracesView", "trace_filter", "list_traces", "trace_facets", "open_trace",
           "parse_trace_id", "link_base", "url_params"]

log = logging.getLogger(__name__)

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


def parse_trace_id(value: Any) -> int:
    """A trace id from a URL parameter, a typed number or a row; ValueError for anything else."""
    text = str(value if value is not None else "").strip().lstrip("#")
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a trace id: a trace id is a whole number such as 42") from None
    if number != int(number) or number < 1:
        raise ValueError(f"{text[:40]!r} is not a trace id: a trace id is a whole number such as 42")
    return int(number)


def _passages(svc: Services, data_path: str | None) -> tuple[Mapping[str, Passage] | None, Dataset | None]:
    """{pid: Passage} of the episode's data file and the data set, or (None, None) when the studio may not or
    cannot read it (the trace then shows passage ids)."""
    if not data_path:
        return None, None
    try:
        ds = svc.runtime(data_path).dataset
    except (DataAccessError, DatasetFormatError, OSError, KeyError, ValueError) as exc:
        log.info("trace passages not loaded from %s: %s", data_path, exc)
        return None, None
    return {p.pid: p for q in ds.questions for p in q.passages}, ds


def _gold(episode: Episode, dataset: Dataset | None) -> list[str]:
    stored = (episode.config or {}).get("gold")
    if stored is not None:
        return [str(g) for g in stored]
    if dataset is None:
        return []
    try:
        q = dataset.get(episode.question_id)
    except KeyError:
        return []
    return ["unanswerable"] if q.type == "unanswerable" else list(q.answers or ())


def open_trace(svc: Services, episode_id: Any, base: str = "") -> TraceView:
    """The read-only view of trace `episode_id`; KeyError with a readable message when there is none."""
    tid = parse_trace_id(episode_id)
    store = svc.store()
    try:
        episode = store.get_episode(tid)
    except KeyError:
        raise KeyError(f"there is no trace #{tid} in this studio's database ({store.url})") from None
    by_pid, dataset = _passages(svc, episode.data_path)
    return render_trace(episode, store.judgments(tid), by_pid=by_pid, gold=_gold(episode, dataset), base=base,
                        weights=svc.cfg.weights)


def url_params(request: gr.Request | None) -> dict[str, str]:
    """The page URL's query parameters of a Gradio request ({} without one)."""
    params = getattr(request, "query_params", None) if request is not None else None
    return {str(k): str(v) for k, v in dict(params or {}).items()}


def link_base(request: gr.Request | None) -> str:
    """The page's address without its query (from the Referer header), for links to copy; '' when unknown."""
    headers = dict(getattr(request, "headers", None) or {}) if request is not None else {}
    ref = headers.get("referer") or headers.get("Referer") or ""
    if ref.startswith(("http://", "https://")):
        return ref.split("?", 1)[0].split("#", 1)[0]
    host = headers.get("host")
    return f"http://{host}/" if host else ""


def data_path_for_link(svc: Services, data: str) -> str:
    """A `?data=` value as a path the studio may read (a path, or a label of the data pickers)."""
    for label, path in svc.data_files():
        if data in (label, path, Path(path).name):
            return path
    return str(svc.allowed_data_path(data))


def question_link(svc: Services, data: str | None, question_id: str | None) -> tuple[Any, str | None]:
    """`?data=FILE&question=ID`: the data file loaded (a DataInfo) and the question id to select (None: the
    file's first). ValueError / DataAccessError / KeyError with a readable message for a bad link."""
    from app.handlers.episodes import load_data

    if not data:
        raise ValueError("the link names a question but no data file; links look like ?data=FILE&question=ID")
    info = load_data(svc, data_path_for_link(svc, data))
    if question_id and question_id not in {qid for _, qid in info.questions}:
        raise KeyError(f"the link's question {question_id!r} is not in {Path(info.path).name}")
    return info, question_id or (info.questions[0][1] if info.questions else None)
