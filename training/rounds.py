"""One training round of any objective: `run_round(job, store, on_progress) -> AdapterRef | ControllerRef`.

Each objective is its folder under training/objectives/ whose `round.py` has `run(job, store, on_progress)`, and each
goes setup -> train -> save -> register (the LoRA objectives through `training.lora_round`). The LoRA objectives
register an adapter (`AdapterRef`); DynaKrag installs its controller folder (`ControllerRef`). The names and modules
come from the one registry, `evorag_core.objectives`.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from evorag_core.objectives import OBJECTIVES, WORKER_OBJECTIVES
from training.job import EVALUATE, ProgressFn, RoundJob, RoundResult

if TYPE_CHECKING:
    from evorag_core.store import Store

__all__ = ["ROUND_MODULES", "run_round"]

ROUND_MODULES: dict[str, str] = {
    **{n: OBJECTIVES[n].module for n in WORKER_OBJECTIVES},  # from the one registry
    EVALUATE: "training.evaluate_round",  # gated promotion's evaluation job, queued after a round registers an adapter
}


def run_round(job: RoundJob, store: Store, on_progress: ProgressFn | None = None) -> RoundResult:
    """Run `job` with its objective's module (imported on first use: TRL is heavy and only DPO needs it)."""
    module = importlib.import_module(ROUND_MODULES[job.objective])
    return module.run(job, store, on_progress)
