"""Evaluation results as stored episodes, so that every `evorag eval` run (and the studio's Evaluate tab) shows up in
the trace browser next to studio sessions and rollouts.

An environment method's result carries its whole episode (`extras["episode"]`): its steps are stored with their
signals, weights, rewards and judge verdicts. Any other method (pipeline baselines, DynaKrag, R²AG, ARENA) is stored
as one step per entry of its trace (the action name and its argument, no signals), with the raw trace and the
method's extras kept in the episode's config JSON for the trace view. The outcome (answer, EM, F1, refused) and the
run's name go into their own columns, which the Traces tab filters on.

`load_run(store, run)` reads a stored run back as results (`stored_result` per episode, without the episode's steps),
so a restarted studio's Evaluate tab can list, compare and open the runs it made before.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping

from evorag_core.env.episode import EpisodeRecord
from evorag_core.env.rows import store_steps
from evorag_core.methods.base import QuestionResult

if TYPE_CHECKING:
    from evorag_core.store import Store

__all__ = ["EvalRecorder", "StoredRun", "run_name", "result_steps", "record_result", "stored_result", "load_run"]

log = logging.getLogger(__name__)
_ARGUMENT_KEYS = ("query", "answer", "argument", "node", "text")


def run_name(method: str, dataset: str, when: datetime | None = None) -> str:
    """'oracle on demo · 2026-11-25 19:40:03' (UTC): the run column of its episodes."""
    when = when or datetime.now(timezone.utc)
    return f"{method} on {dataset} · {when.strftime('%Y-%m-%d %H:%M:%S')}"


def _trace_argument(item: Mapping[str, Any]) -> str | None:
    for key in _ARGUMENT_KEYS:
        value = item.get(key)
        if isinstance(value, str) and value:
            return value
    queries = item.get("queries")
    if isinstance(queries, (list, tuple)) and queries:
        return "; ".join(str(q) for q in queries)
    return None


def _trace_steps(trace: tuple[Mapping[str, Any], ...]) -> list:
    from evorag_core.store import Step

    out = []
    for i, item in enumerate(trace, 1):
        item = item if isinstance(item, Mapping) else {"action": str(item)}
        name = str(item.get("action") or item.get("type") or "STEP").upper()[:20]
        pids = item.get("passages")
        passages = tuple(p for p in pids if isinstance(p, str)) if isinstance(pids, (list, tuple)) else ()
        out.append(Step(t=i, action=name, argument=_trace_argument(item), passages=passages))
    return out


def result_steps(result: QuestionResult) -> tuple[list, EpisodeRecord | None]:
    """The store steps of a result and, for an environment method, its episode record."""
    raw = result.extras.get("episode") if isinstance(result.extras, Mapping) else None
    if raw:
        record = EpisodeRecord.from_dict(raw)
        return store_steps(record), record
    return _trace_steps(tuple(result.trace)), None


def record_result(store: Store, result: QuestionResult, *, method: str, label: str, run: str, data_path: str | None,
                  stage: str, schedule: str, adapter: str | None = None) -> int:
    """Store one evaluated question as an episode (source 'eval'); returns its id."""
    from evorag_core.store import Outcome

    steps, record = result_steps(result)
    extras = {k: v for k, v in dict(result.extras).items() if k != "episode"}
    config: dict[str, Any] = {"method": method, "label": label, "gold": list(result.gold), "steps": result.steps,
                              "retrieved": list(result.passages), "support_recall": result.support_recall,
                              "seconds": result.seconds, "format_valid": result.format_valid,
                              "fallback": result.fallback, "extras": extras}
    if record is not None:
        stage, schedule = record.stage, record.schedule
        config.update(preset=record.preset, t_max=record.t_max, top_k=record.top_k, episode_key=record.episode_id,
                      gold_pids=list(record.gold_pids), truncated=record.truncated)
    else:
        config["trace"] = [dict(t) if isinstance(t, Mapping) else t for t in result.trace]
    return store.add_episode(
        question_id=result.question_id, dataset=result.dataset, question=result.question, policy=label,
        stage=stage, schedule=schedule, config=config, steps=steps,
        status="truncated" if record is not None and record.truncated else "finished",
        total_return=result.total_return, source="eval", adapter=adapter, data_path=data_path, run=run,
        outcome=Outcome(result.prediction, result.em, result.f1, result.refused),
    )


def stored_result(episode: Any) -> QuestionResult:
    """A stored evaluation episode (a store `Episode`, steps not needed) as the result it was recorded from: outcome,
    gold, retrieved passages, times and extras; an environment episode's own record is not rebuilt (its trace is
    the stored episode, opened by id), another method's raw trace is. `steps` is the method's count when it was
    recorded (config "steps"), else the stored steps."""
    config = dict(episode.config or {})
    steps = config.get("steps")
    return QuestionResult(
        question_id=episode.question_id, dataset=episode.dataset, question=episode.question, prediction=episode.answer,
        gold=tuple(config.get("gold") or ()), em=float(episode.em or 0.0), f1=float(episode.f1 or 0.0),
        steps=int(steps if steps is not None else episode.n_steps or 0), passages=tuple(config.get("retrieved") or ()),
        support_recall=config.get("support_recall"), refused=bool(episode.refused),
        trace=tuple(t for t in config.get("trace") or () if isinstance(t, Mapping)), total_return=episode.total_return,
        format_valid=bool(config.get("format_valid", True)), fallback=int(config.get("fallback") or 0),
        seconds=float(config.get("seconds") or 0.0), extras=dict(config.get("extras") or {}),
    )


@dataclass(frozen=True)
class StoredRun:
    """An evaluation run read back from the store: its results in question order and their episodes' ids."""

    run: str
    label: str  # the method as the run's episodes name it
    dataset: str
    data_path: str | None
    results: tuple[QuestionResult, ...]
    episode_ids: dict[str, int]  # question id -> stored episode id


def load_run(store: Store, run: str) -> StoredRun:
    """The episodes (source 'eval') of `run` as results, oldest first; a question evaluated twice in the run keeps
    its last result. KeyError when the store has no such evaluation run."""
    episodes = [e for e in reversed(store.list_episodes(run=run, limit=None)) if e.source == "eval"]
    if not episodes:
        raise KeyError(f"there is no stored evaluation run {run!r}")
    latest = {e.question_id: e for e in episodes}
    kept = [e for e in episodes if latest[e.question_id] is e]
    first = kept[0]
    return StoredRun(run, first.policy, first.dataset, first.data_path, tuple(stored_result(e) for e in kept),
                     {e.question_id: e.id for e in kept})


@dataclass
class EvalRecorder:
    """`evaluate(..., on_result=recorder)`: stores each result as soon as it is done. A store failure is logged
    and counted (`failed`, `last_error`), never stops the evaluation: the JSON lines stay the primary record."""

    store: Store
    method: str
    label: str
    run: str
    data_path: str | None
    stage: str
    schedule: str
    adapter: str | None = None
    episode_ids: dict[str, int] = field(default_factory=dict)  # question id -> stored episode id
    failed: int = 0
    last_error: str = ""

    def __call__(self, result: QuestionResult, _done: list[QuestionResult] | None = None) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        from evorag_core.errors import StoreError

        try:
            self.episode_ids[result.question_id] = record_result(
                self.store, result, method=self.method, label=self.label, run=self.run, data_path=self.data_path,
                stage=self.stage, schedule=self.schedule, adapter=self.adapter)
        except (StoreError, SQLAlchemyError, OSError) as exc:
            self.failed += 1
            self.last_error = str(exc)
            log.warning("episode of %s not stored: %s", result.question_id, exc)
