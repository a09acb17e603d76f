"""One training round of any objective: `run_round(job, store, on_progress) -> AdapterRef`.

Each objective is its own module (`dpo_round`, `grpo_round`, `ppo_round`) with `run(job, store, on_progress)`,
and each goes setup -> train -> save -> register. This table is the one place that maps names to them.
"""
from __future__ import annotations

import importlib
from typing import Any

from training.job import AdapterRef, ProgressFn, RoundJob

__all__ = ["ROUND_MODULES", "run_round"]

ROUND_MODULES: dict[str, str] = {"dpo": "training.dpo_round", "grpo": "training.grpo_round", "ppo": "training.ppo_round",
                                 "arena-grpo": "training.arena_grpo", "r2ag-grpo": "training.r2ag_grpo"}


def run_round(job: RoundJob, store: Any, on_progress: ProgressFn | None = None) -> AdapterRef:
    """Run `job` with its objective's module (imported on first use: TRL is heavy and only DPO needs it)."""
    module = importlib.import_module(ROUND_MODULES[job.objective])
    return module.run(job, store, on_progress)
