"""R²AG's side of an `r2ag-grpo` round: the job's `r2ag` object (`R2agGrpoConfig`); the optimiser, LoRA and KL
settings come from [train] (TrainConfig)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from evorag_core.errors import ConfigError

from training.job import nested_config

if TYPE_CHECKING:
    from training.job import RoundJob

__all__ = ["R2agGrpoConfig", "r2ag_config_from_job"]


@dataclass(frozen=True)
class R2agGrpoConfig:
    """The R²AG side of a round; optimiser, LoRA and KL settings come from [train] (TrainConfig)."""

    group_size: int = 12  # G expansions per state (the paper's)
    questions: int = 16  # questions read from the data file ...
    offset: int = 0  # ... after skipping this many
    states_per_step: int = 2  # tree states per optimiser step
    iterations: int = 5  # passes of the progressive loop (L_max-I)
    max_states: int = 16  # states kept in the next forest
    temperature: float = 1.0
    max_new_tokens: int = 160
    micro_batch: int = 2
    passage_chars: int = 300
    demo: bool = True
    max_queries: int = 6
    top_k: int = 1
    retriever: str = "rrf"
    clip_high: float = 0.28  # ε_high (ε_low is train.clip_eps)

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ConfigError(f"r2ag.group_size must be >= 2 (advantages are relative to the group), got {self.group_size}")
        for name in ("questions", "states_per_step", "iterations", "max_states", "micro_batch", "top_k",
                     "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"r2ag.{name} must be >= 1, got {getattr(self, name)}")
        if self.offset < 0 or self.temperature <= 0 or self.clip_high < 0:
            raise ConfigError("r2ag.offset must be >= 0, r2ag.temperature > 0 and r2ag.clip_high >= 0")

    @classmethod
    def from_job(cls, job: RoundJob) -> R2agGrpoConfig:
        """The job's `r2ag` object (ConfigError naming a typo or a bad value)."""
        return nested_config(job, "r2ag", cls)


def r2ag_config_from_job(job: RoundJob) -> R2agGrpoConfig:
    return R2agGrpoConfig.from_job(job)
