"""Evaluate a candidate adapter against the live one, record the report, and let only a passing adapter go live.

`evaluate_candidate` is what the worker's evaluation job, `evorag adapters evaluate` and the studio run: both sides
on the `[promotion]` slice (`evaluate.evaluate_side`, cached), the paired bootstrap (`compare_results`), the rule
(`rule.decide`), a stored report (`Store.add_promotion`), then, with `promotion.auto` and a pass, activation
(kind "promoted") if the adapter it was compared with is still the live one. `promote` is the admin's path: a
passing adapter is activated; one that failed or got no verdict only with a reason (kind "forced", the reason stored).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from evorag_core.config import Config
from evorag_core.errors import AdapterError, ConfigError

if TYPE_CHECKING:
    from evorag_core.store import Adapter, Promotion, Store

__all__ = ["AGAINST_HELP", "resolve_against", "evaluate_candidate", "promote"]

log = logging.getLogger(__name__)

AGAINST_HELP = "live (the live adapter; the base model when none is live or the candidate is live), base, or a name"
ProgressFn = Callable[[dict[str, Any]], None]


def resolve_against(store: Store, candidate: str, against: str) -> Adapter | None:
    """The adapter row a candidate is compared with (None: the base model)."""
    if against == "base":
        return None
    if against == "live":
        live = store.active_adapter()
        return live if live is not None and live.name != candidate else None
    if against == candidate:
        raise ConfigError(f"cannot evaluate adapter {candidate!r} against itself")
    try:
        return store.get_adapter(against)
    except KeyError:
        raise ConfigError(f"--against {against!r}: no such adapter ({AGAINST_HELP})") from None


def evaluate_candidate(store: Store, cfg: Config, home: Path, name: str, *, against: str | None = None,
                       round_id: int | None = None, on_progress: ProgressFn | None = None,
                       workers: int | None = None) -> Promotion:
    """Evaluate adapter `name` against `against` (default `promotion.against`), store the report and, with
    `promotion.auto`, activate the adapter if it passed; returns the report's row. `on_progress` gets
    {phase, step, total, elapsed_s} after every question (raise there to stop; finished questions stay cached)."""
    from evorag_core.evaluation.runner import compare_results
    from evorag_core.lm.loading import base_model_id
    from evorag_core.promotion.evaluate import Side, evaluate_side, promotion_data
    from evorag_core.promotion.report import build_report
    from evorag_core.promotion.rule import decide

    try:
        candidate = store.get_adapter(name)
    except KeyError:
        raise ConfigError(f"no adapter named {name!r}; see `evorag adapters list`") from None
    base_id = base_model_id(cfg.policy.model, home)
    if candidate.base_model != base_id:
        raise AdapterError(f"adapter {name!r} fits base model {candidate.base_model}, not {base_id}")
    other = resolve_against(store, name, against or cfg.promotion.against)
    data = promotion_data(cfg)
    sides = (Side(candidate, base_id), Side(other, base_id))
    started, done = time.perf_counter(), [0]

    from evorag_core.data.datasets import load_dataset
    from evorag_core.promotion.evaluate import slice_questions

    n = len(slice_questions(cfg, load_dataset(data)))  # questions per side
    total = 2 * n

    def progress(label: str) -> None:
        if on_progress is not None:
            on_progress({"phase": f"evaluate {label}", "step": done[0], "total": total,
                         "elapsed_s": round(time.perf_counter() - started, 1)})

    def each(label: str) -> Callable[[Any, list[Any]], None]:
        def report(_result: Any, _results: list[Any]) -> None:
            done[0] += 1
            progress(label)
        return report

    results = []
    for i, side in enumerate(sides):
        results.append(evaluate_side(store, cfg, home, side, on_result=each(side.label), workers=workers))
        if done[0] < (i + 1) * n:  # questions read from the cache report no result: they are done too
            done[0] = (i + 1) * n
            progress(side.label)
    comparison = compare_results(results[0].results, results[1].results, resamples=cfg.promotion.resamples)
    decision = decide(comparison, cfg.promotion)
    report = build_report(cfg, str(data), results[0], results[1], comparison, decision)
    row = store.add_promotion(name, against=other.name if other is not None else None, metric=cfg.promotion.metric,
                              passed=decision.passed, verdict=decision.verdict, report=report, round_id=round_id)
    log.info("promotion report %d: %s vs %s: %s", row.id, name, sides[1].label, decision.verdict)
    if decision.passed and cfg.promotion.auto:
        _auto_activate(store, row, other, base_id)
    return row


def _auto_activate(store: Store, row: Promotion, against: Adapter | None, base_id: str) -> None:
    from evorag_core.adapters.registry import activate

    live = store.active_adapter()
    if (live.name if live is not None else None) != (against.name if against is not None else None):
        log.info("promotion: %s passed, but the live model changed during its evaluation (now %s): not activated",
                 row.adapter, live.name if live is not None else "base")
        return
    activate(store, row.adapter, base_id, kind="promoted", who="promotion", promotion_id=row.id)
    log.info("promotion: %s is live (passed report %d)", row.adapter, row.id)


def promote(store: Store, name: str, base_model_id: str, *, reason: str | None = None,
            who: str | None = None) -> Adapter:
    """Activate adapter `name` on its newest report: a passing report activates it (kind "promoted"); a failing
    one, no verdict or no report at all needs `reason` (kind "forced"). AdapterError (what stays live) otherwise."""
    from evorag_core.adapters.registry import activate

    reports = store.list_promotions(name)
    latest = reports[-1] if reports else None
    if latest is not None and latest.passed:
        return activate(store, name, base_model_id, kind="promoted", who=who, reason=reason, promotion_id=latest.id)
    if not (reason or "").strip():
        why = latest.verdict if latest is not None else "it has no promotion report"
        raise AdapterError(f"adapter {name!r} did not pass its evaluation ({why}); promoting it anyway needs a "
                           "reason (--force --reason TEXT)")
    return activate(store, name, base_model_id, kind="forced", who=who, reason=reason,
                    promotion_id=latest.id if latest is not None else None)
