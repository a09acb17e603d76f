"""In-episode weight scheduler, two-stage endpoints, ablation variants and the stage-switch controller (SPEC §3)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from evorag_core.config import WeightsConfig
from evorag_core.errors import ConfigError
from evorag_core.signal_table import SIGNAL_TABLE, WEIGHT_COLUMNS
from evorag_core.env.signals import SIGNAL_NAMES, progress

__all__ = [
    "WEIGHT_NAMES",
    "SIGNAL_WEIGHT",
    "STAGES",
    "SCHEDULES",
    "PRESETS",
    "WeightTable",
    "PAPER_TABLE",
    "weights_at",
    "step_reward",
    "StageSwitchController",
]

WEIGHT_NAMES: tuple[str, ...] = tuple(row.weight for row in SIGNAL_TABLE)  # beta, lambda, ..., kappa
# Which weight multiplies which signal (SPEC §2 table; evorag_core/signal_table.py).
SIGNAL_WEIGHT: Mapping[str, str] = MappingProxyType({row.name: row.weight for row in SIGNAL_TABLE})
STAGES: tuple[str, ...] = ("discovery", "refinement")
SCHEDULES: tuple[str, ...] = ("time-dynamic", "two-stage", "no-reward")
# Reward-combination presets (paper Table 6): which signals keep their weight. The outcome reward `ans` is kept in
# every preset (the paper keeps the outcome reward on the final ANSWER and ablates the process signals).
PRESETS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "full": frozenset(SIGNAL_NAMES),
        "best2": frozenset({"bt", "ans"}),
        "best3": frozenset({"bt", "dup", "ans"}),
        "exploration-heavy": frozenset({"ret", "dup", "ans"}),
        "efficiency-heavy": frozenset({"bt", "step", "ans"}),
    }
)


def _frozen(d: dict[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class WeightTable:
    """Start / Mid / End weight columns (SPEC Table 2)."""

    start: Mapping[str, float]
    mid: Mapping[str, float]
    end: Mapping[str, float]

    def endpoints(self, stage: str) -> tuple[Mapping[str, float], Mapping[str, float]]:
        """Discovery interpolates Start -> Mid, Refinement Mid -> End."""
        if stage == "discovery":
            return self.start, self.mid
        if stage == "refinement":
            return self.mid, self.end
        raise ConfigError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")

    @classmethod
    def from_config(cls, cfg: WeightsConfig) -> "WeightTable":
        """The table a config's [weights] section holds (`beta_start`, `beta_mid`, ... `kappa_end`)."""
        return cls(*(_frozen({w: float(getattr(cfg, f"{w}_{col}")) for w in WEIGHT_NAMES})
                     for col in WEIGHT_COLUMNS))

    def to_config(self) -> WeightsConfig:
        """The [weights] section that `from_config` turns back into this table."""
        cols = {"start": self.start, "mid": self.mid, "end": self.end}
        return WeightsConfig(**{f"{w}_{c}": float(col[w]) for c, col in cols.items() for w in WEIGHT_NAMES})


# The paper's Table 2; its numbers live in one place, the signal table's rows (the [weights] section's defaults).
PAPER_TABLE = WeightTable.from_config(WeightsConfig())


def weights_at(
    stage: str,
    t: int,
    t_max: int,
    *,
    schedule: str = "time-dynamic",
    preset: str = "full",
    table: WeightTable = PAPER_TABLE,
) -> dict[str, float]:
    """w_k(t) for step t (1-based).

    - time-dynamic: w = (1 - p) * early + p * late with p(t) = (t - 1) / (T_max - 1).
    - two-stage: weights constant inside a stage, fixed at the stage's early endpoint (early = late degenerates the
      scheduler into a fixed two-block schedule, as the paper's ablation describes).
    - no-reward: the outcome reward only: kappa = 1, every other weight 0.
    The preset then zeroes the weights of signals it leaves out.
    """
    if preset not in PRESETS:
        raise ConfigError(f"unknown reward preset {preset!r}; expected one of {', '.join(PRESETS)}")
    if t < 1:
        raise ValueError(f"step index t must be >= 1, got {t}")
    early, late = table.endpoints(stage)
    if schedule == "time-dynamic":
        p = progress(t, t_max)
        weights = {k: (1 - p) * early[k] + p * late[k] for k in WEIGHT_NAMES}
    elif schedule == "two-stage":
        weights = {k: float(early[k]) for k in WEIGHT_NAMES}
    elif schedule == "no-reward":
        weights = {k: (1.0 if k == "kappa" else 0.0) for k in WEIGHT_NAMES}
    else:
        raise ConfigError(f"unknown schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}")
    kept = PRESETS[preset]
    return {k: (v if _signal_of(k) in kept else 0.0) for k, v in weights.items()}


def _signal_of(weight: str) -> str:
    return next(s for s, w in SIGNAL_WEIGHT.items() if w == weight)


def step_reward(signals: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """R_t = sum_k w_k(t) * r_t^(k): the one step reward (the env, human overrides, every training objective).

    `signals` are keyed by signal name (ret, act, ...), `weights` by weight name (beta, lambda, ... as `weights_at`
    gives them and episodes store them). A signal with no weight, or an unknown signal, fails loudly."""
    unknown = sorted(set(signals) - set(SIGNAL_WEIGHT))
    missing = sorted(k for k in signals if k in SIGNAL_WEIGHT and SIGNAL_WEIGHT[k] not in weights)
    if unknown or missing:
        raise ValueError(f"step_reward: unknown signals {unknown}, no weight for {missing} "
                         f"(weights are keyed by weight name: {', '.join(WEIGHT_NAMES)})")
    return float(sum(weights[SIGNAL_WEIGHT[name]] * value for name, value in signals.items()))


@dataclass
class StageSwitchController:
    """Discovery -> Refinement switch: EMA J^ of the mean dev return; switch when the improvement of J^ over the best
    J^ so far stays below epsilon for `patience` consecutive checkpoints. Once switched it stays in refinement."""

    alpha: float = 0.5
    epsilon: float = 0.01
    patience: int = 2
    stage: str = "discovery"
    ema: float | None = None
    best: float | None = None
    stale: int = 0
    history: list[dict] = field(default_factory=list)

    def update(self, mean_return: float) -> str:
        """Feed one checkpoint's mean dev return; returns the stage to use next and logs the decision."""
        self.ema = mean_return if self.ema is None else self.alpha * mean_return + (1 - self.alpha) * self.ema
        improvement = None if self.best is None else self.ema - self.best
        if self.stage == "discovery":
            if improvement is not None and improvement < self.epsilon:
                self.stale += 1
            else:
                self.stale = 0
            if self.stale >= self.patience:
                self.stage = "refinement"
        if self.best is None or self.ema > self.best:
            self.best = self.ema
        self.history.append(
            {"mean_return": mean_return, "ema": self.ema, "improvement": improvement, "stale": self.stale, "stage": self.stage}
        )
        return self.stage
