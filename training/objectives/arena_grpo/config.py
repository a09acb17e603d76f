"""ARENA's side of an `arena-grpo` round: the job's `arena` object (`ArenaGrpoConfig`); the optimiser, LoRA and KL
settings come from [train] (TrainConfig), with ARENA's own KL estimator, k2, unless the job names one."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evorag_core.errors import ConfigError
from evorag_core.reader.arena.prompt import ArenaConfig

from training.job import nested_config

if TYPE_CHECKING:
    from evorag_core.config import TrainConfig
    from training.job import RoundJob

__all__ = ["ArenaGrpoConfig", "arena_config_from_job"]


@dataclass(frozen=True)
class ArenaGrpoConfig:
    """The ARENA side of a round; optimiser, LoRA and KL settings come from [train] (TrainConfig)."""

    group_size: int = 4  # G replies per question (the paper: 7)
    questions: int = 16  # questions read from the data file ...
    offset: int = 0  # ... after skipping this many (keep them apart from the evaluation questions)
    questions_per_step: int = 2
    temperature: float = 0.9  # rollout temperature (the paper's)
    max_new_tokens: int = 160
    micro_batch: int = 1  # replies per forward/backward pass (activation memory ~ micro_batch x sequence length)
    passage_chars: int = 300  # references cut to this many characters (0: full text)
    demo: bool = False
    accuracy: str = "em"  # em | f1 (ablation)
    bonus: float = 10.0  # 0: the no-bonus ablation

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ConfigError(f"arena.group_size must be >= 2 (advantages are relative to the group), got {self.group_size}")
        if self.questions < 1 or self.questions_per_step < 1 or self.offset < 0:
            raise ConfigError("arena.questions and arena.questions_per_step must be >= 1, arena.offset >= 0")
        if self.temperature <= 0:
            raise ConfigError(f"arena.temperature must be > 0 (replies are sampled), got {self.temperature}")
        if self.micro_batch < 1:
            raise ConfigError(f"arena.micro_batch must be >= 1, got {self.micro_batch}")

    @classmethod
    def from_job(cls, job: RoundJob) -> ArenaGrpoConfig:
        """The job's `arena` object (ConfigError naming a typo or a bad value)."""
        return nested_config(job, "arena", cls)

    def arena(self) -> ArenaConfig:
        return ArenaConfig(max_new_tokens=self.max_new_tokens, passage_chars=self.passage_chars, demo=self.demo,
                           temperature=self.temperature, accuracy=self.accuracy, bonus=self.bonus)


def arena_config_from_job(job: RoundJob) -> tuple[ArenaGrpoConfig, TrainConfig]:
    """The job's `arena` object as an ArenaGrpoConfig, and its [train] section with kl = k2 unless the job names
    one (k2 is ARENA's estimator; [train] kl's own default, k3, is the ablation here)."""
    cfg = ArenaGrpoConfig.from_job(job)
    named_kl = job.raw.get("kl") is not None or "kl" in (job.raw.get("train") or {})
    return cfg, job.train if named_kl else dataclasses.replace(job.train, kl="k2")
