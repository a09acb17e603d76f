"""The worker's evaluation job (objective "evaluate"): gated promotion of one adapter.

Queued by the worker after a round registers an adapter (when `promotion.evaluate`), by `evorag adapters evaluate
--queue` and by the studio's Evaluate button. It runs `evorag_core.promotion.gate.evaluate_candidate` with the
round's progress callback, so its progress shows in the Training tab like a round's and a cancel request stops it
at the next question (the finished questions stay cached for the next attempt). Job keys: adapter, against,
base_model.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from evorag_core.errors import ConfigError

from training.job import ProgressFn, ReportRef, RoundJob, phase

if TYPE_CHECKING:
    from evorag_core.store import Store

__all__ = ["run"]


def run(job: RoundJob, store: Store, on_progress: ProgressFn | None = None) -> ReportRef:
    from evorag_core.promotion.gate import evaluate_candidate

    name = job.raw.get("adapter")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"round {job.round_id}: an evaluate job names the adapter to evaluate (job key 'adapter')")
    assert job.config is not None, "RoundJob.from_config always merges the config"
    phase(on_progress, "load")
    before = store.active_adapter()
    row = evaluate_candidate(store, job.config, job.home, name, against=job.raw.get("against") or None,
                             round_id=job.round_id, on_progress=on_progress)
    live = store.active_adapter()
    activated = live is not None and live.name == name and (before is None or before.name != name)
    metrics = {"promotion_id": row.id, "evaluated": name, "against": row.against or "base", "passed": row.passed,
               "verdict": row.verdict, "activated": activated,
               "f1": row.report["candidate"]["summary"]["f1"], "f1_against": row.report["against"]["summary"]["f1"]}
    return ReportRef(row.id, name, row.against, row.passed, row.verdict, activated, metrics)
