"""A stored trace opened by id (from a Traces row, a typed id, the page URL or an evaluation's drill-down): the
episode, its judgments, its data file's passages and gold, drawn read-only by `trace_view.render_trace`."""
from __future__ import annotations

import logging
from typing import Any, Mapping

from evorag_core.errors import DataAccessError, DatasetFormatError
from evorag_core.store import Episode
from evorag_core.types import Dataset, Passage

from app.common.services import Services
from app.common.trace_view import TraceView, render_trace

__all__ = ["parse_trace_id", "open_trace"]

log = logging.getLogger(__name__)


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
