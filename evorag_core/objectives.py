"""The training objectives, one registry: the CLI (`evorag train --objective`), the settings check (`[train]
objective`), the worker (which training module runs a queued round) and the studio's Training tab all read it.

An objective either runs as a queued round (`module`: the `training` module whose `run(job, store, on_progress)` the
worker calls) or, for DynaKrag's controller fit, in the CLI's own process (`module` None). `data` is what a round
trains on; `studio` marks the objectives the Training tab launches with its fields; `logs_kl` whether a round logs a
per-step KL to its reference (the tab's KL chart)."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, Mapping

__all__ = ["Objective", "OBJECTIVES", "WORKER_OBJECTIVES", "STUDIO_OBJECTIVES"]


@dataclass(frozen=True)
class Objective:
    name: str
    module: str | None  # training module run by the worker; None: run in the CLI's process
    data: Literal["pairs", "episodes", "questions"]
    studio: bool
    logs_kl: bool
    summary: str


OBJECTIVES: Mapping[str, Objective] = MappingProxyType({o.name: o for o in (
    Objective("dpo", "training.dpo_round", "pairs", True, False, "DPO (TRL) on queued preference pairs"),
    Objective("grpo", "training.grpo_round", "episodes", True, True, "step-level GRPO on stored episodes' siblings"),
    Objective("ppo", "training.ppo_round", "episodes", True, True, "PPO with a value head and GAE on stored episodes"),
    Objective("arena-grpo", "training.arena_grpo", "questions", False, True, "ARENA's GRPO on the data file's questions"),
    Objective("r2ag-grpo", "training.r2ag_grpo", "questions", False, True, "R²AG's tree-steering GRPO on the data file"),
    Objective("dynakrag", None, "questions", False, False, "fit the DynaKrag controller on the data file, in-process"),
)})
WORKER_OBJECTIVES: tuple[str, ...] = tuple(n for n, o in OBJECTIVES.items() if o.module is not None)
STUDIO_OBJECTIVES: tuple[str, ...] = tuple(n for n, o in OBJECTIVES.items() if o.studio)
