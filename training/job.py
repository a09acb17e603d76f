"""What a training round is asked to do (`RoundJob`) and what it produces (`AdapterRef`).

A round's job is stored as JSON in its database row (`rounds.config`); `RoundJob.from_round` merges it over the
[train] and [policy] sections of the worker's config. Keys (every one optional; an unknown key fails the round):

    objective   dpo | grpo | ppo | arena-grpo | r2ag-grpo | dynakrag, or evaluate (default: the row's objective)
    adapter     evaluate: the adapter to evaluate against `against` (gated promotion, evorag_core/promotion/)
    against     evaluate: live | base | <adapter name> (default: [promotion] against)
    pairs       DPO: how many queued pairs to claim (oldest first)          source, stage: filters for the claim
    pairs_after DPO: claim only pairs stored after the pair of this id (0: any; the curriculum: its round's own)
    episodes    GRPO/PPO: how many of the newest finished episodes to read  episode_ids: exactly these episodes
    reference   previous (the live adapter if it is of this base model, else base) | base | active | <adapter name>
    holdout     DPO: share of the claimed pairs' states held out to measure pair accuracy (0: none)
    vf_coef     PPO: weight of the value loss        max_steps: stop after this many optimiser steps (0: no cap)
    data        a data file to resolve passage ids of stored episodes that do not name one (arena-grpo: its questions)
    arena       arena-grpo: {ArenaGrpoConfig keys} (training/objectives/arena_grpo/round.py)
    r2ag        r2ag-grpo: {R2agGrpoConfig keys} (training/objectives/r2ag_grpo/round.py)
    dynakrag    dynakrag: {any [dynakrag] key, plus questions (0: all) and offset} (training/objectives/dynakrag/round.py)
    base_model  the policy model spec (default: [policy] model)
    epochs, lr, kl, beta, seed, and `train: {any [train] key}`: the [train] section's values for this round
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from evorag_core.config import Config, PolicyConfig, TrainConfig, apply_overrides
from evorag_core.errors import ConfigError
from evorag_core.objectives import EVALUATE_JOB, WORKER_OBJECTIVES

from training.processes import SINGLE, Processes

__all__ = ["OBJECTIVES", "EVALUATE", "JOB_KINDS", "JOB_KEYS", "ReportRef", "ProgressFn", "RoundJob", "AdapterRef", "ControllerRef", "RoundResult",
           "RoundLost", "RoundCancelled", "job_config", "nested_config", "phase"]

OBJECTIVES: tuple[str, ...] = WORKER_OBJECTIVES  # the objectives a queued round can run (evorag_core.objectives)
EVALUATE = EVALUATE_JOB  # the other kind of queued job: gated promotion's evaluation of an adapter (no training)
JOB_KINDS: tuple[str, ...] = (*OBJECTIVES, EVALUATE)
_TRAIN_SHORTCUTS = ("epochs", "lr", "kl", "beta", "seed")
JOB_KEYS: tuple[str, ...] = (
    "objective", "pairs", "pairs_after", "source", "stage", "episodes", "episode_ids", "reference", "holdout",
    "vf_coef", "max_steps", "data", "base_model", "train", "arena", "r2ag", "dynakrag", "adapter", "against",
    *_TRAIN_SHORTCUTS,
)

ProgressFn = Callable[[dict[str, Any]], None]


class RoundLost(Exception):
    """Raised from a progress callback when the worker no longer holds the round (reaped, or finished elsewhere)."""


class RoundCancelled(Exception):
    """Raised from a progress callback (a training step or a phase change) once someone asked to cancel the round:
    training stops there, and the worker ends the round `cancelled` with its pairs released."""


def phase(on_progress: ProgressFn | None, name: str) -> None:
    """Report that the round entered phase `name` (load, prepare, save, register); the worker shows it and checks
    for a cancel request there, as it does at every training step."""
    if on_progress is not None:
        on_progress({"phase": name})


@dataclass(frozen=True)
class RoundJob:
    round_id: int
    objective: str
    train: TrainConfig
    policy: PolicyConfig
    home: Path
    t_max: int = 20  # episodes whose config does not record T_max were run with this one
    pairs: int = 64
    pairs_after: int = 0
    source: str | None = None
    stage: str | None = None
    episodes: int = 32
    episode_ids: tuple[int, ...] = ()
    reference: str = "previous"
    holdout: float = 0.0
    vf_coef: float = 0.5
    max_steps: int = 0
    data: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # the row's config as stored
    config: Config | None = field(default=None, repr=False, compare=False)  # all sections merged (DynaKrag reads them)
    processes: Processes = field(default=SINGLE, repr=False, compare=False)  # this process's place in a launch

    def __post_init__(self) -> None:
        if self.objective not in JOB_KINDS:
            raise ConfigError(f"round {self.round_id}: objective must be one of {', '.join(JOB_KINDS)}, got {self.objective!r}")
        if self.pairs < 1 or self.episodes < 1:
            raise ConfigError(f"round {self.round_id}: pairs and episodes must be at least 1")
        if not 0.0 <= self.holdout < 1.0:
            raise ConfigError(f"round {self.round_id}: holdout must be in [0, 1), got {self.holdout}")
        if self.max_steps < 0 or self.vf_coef < 0 or self.pairs_after < 0:
            raise ConfigError(f"round {self.round_id}: max_steps, vf_coef and pairs_after must be >= 0")
        if self.train.kl not in ("k2", "k3"):
            raise ConfigError(f"round {self.round_id}: kl must be k2 or k3, got {self.train.kl!r}")

    @classmethod
    def from_config(
        cls, round_id: int, objective: str, raw: Mapping[str, Any], cfg: Config, home: Path,
        processes: Processes = SINGLE,
    ) -> "RoundJob":
        """The job of round `round_id` from its stored JSON `raw` over the config `cfg` (see the module docstring)."""
        unknown = sorted(set(raw) - set(JOB_KEYS))
        if unknown:
            raise ConfigError(f"round {round_id}: unknown job key(s) {', '.join(unknown)} (known: {', '.join(JOB_KEYS)})")
        nested = raw.get("train") or {}
        if not isinstance(nested, Mapping):
            raise ConfigError(f"round {round_id}: 'train' must be an object of [train] keys")
        overrides = {f"train.{k}": v for k, v in nested.items()}
        overrides.update({f"train.{k}": raw[k] for k in _TRAIN_SHORTCUTS if raw.get(k) is not None})
        if raw.get("base_model"):
            overrides["policy.model"] = raw["base_model"]
        merged = apply_overrides(cfg, overrides)
        objective = raw.get("objective") or objective
        options = {k: raw[k] for k in ("pairs", "pairs_after", "episodes", "holdout", "vf_coef", "max_steps")
                   if raw.get(k) is not None}
        try:
            return cls(
                round_id=round_id, objective=objective,
                train=merged.train if objective == EVALUATE else dataclasses.replace(merged.train, objective=objective),
                policy=merged.policy, home=Path(home), t_max=merged.env.t_max,
                source=raw.get("source") or None, stage=raw.get("stage") or None,
                episode_ids=tuple(int(i) for i in raw.get("episode_ids") or ()),
                reference=str(raw.get("reference") or "previous"), data=raw.get("data") or None,
                raw=dict(raw), config=merged, processes=processes, **{k: (float(v) if k in ("holdout", "vf_coef") else int(v)) for k, v in options.items()},
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"round {round_id}: bad job value ({exc})") from None

    @property
    def adapter_name(self) -> str:
        """The registry name of this round's adapter, e.g. `r12-dpo` (letters, digits and '-' only)."""
        return f"r{self.round_id}-{self.objective}"

    @property
    def adapter_dir(self) -> Path:
        return self.home / "adapters" / str(self.round_id)


@dataclass(frozen=True)
class AdapterRef:
    """A registered adapter: its registry name, folder, checksum, and the round's metrics."""

    name: str
    path: Path
    round_id: int
    objective: str
    base_model: str
    checksum: str
    metrics: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class ControllerRef:
    """What a round that trains no adapter produces: DynaKrag's fitted controller, a folder installed where
    `evorag eval --method dynakrag` loads it (not an adapter: nothing is registered or activated)."""

    path: Path
    round_id: int
    objective: str
    metrics: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class ReportRef:
    """What an evaluation job produces: a stored promotion report (and whether it made the adapter live)."""

    promotion_id: int
    adapter: str
    against: str | None
    passed: bool | None
    verdict: str
    activated: bool
    metrics: dict[str, Any] = field(repr=False, default_factory=dict)


RoundResult = AdapterRef | ControllerRef | ReportRef  # what a round's run(job, store, on_progress) returns


def job_config(objective: str, **values: Any) -> dict[str, Any]:
    """A round config for `Store.enqueue_round` with the None values left out (checked against JOB_KEYS)."""
    raw = {"objective": objective, **{k: v for k, v in values.items() if v is not None}}
    unknown = sorted(set(raw) - set(JOB_KEYS))
    if unknown:
        raise ConfigError(f"unknown job key(s) {', '.join(unknown)} (known: {', '.join(JOB_KEYS)})")
    return raw


C = TypeVar("C")


def nested_config(job: RoundJob, section: str, cls: type[C]) -> C:
    """The job's `section` object (e.g. `arena`) as an objective's config dataclass `cls`; a typo or a bad value is
    a ConfigError that names it (the config's own checks run in its `__post_init__`)."""
    raw = job.raw.get(section) or {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"round {job.round_id}: '{section}' must be an object of {cls.__name__} keys")
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"round {job.round_id}: unknown {section} key(s) {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(known))})")
    try:
        return cls(**raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"round {job.round_id}: bad {section} value ({exc})") from None
