"""The steps every LoRA round shares: setup -> train -> save -> register, with the objective's own steps plugged in.

    registered?  a retried round whose adapter is already registered finishes without training again
    claim        the objective's work before the model loads (DPO claims its pairs; ARENA and R²AG read their
                 settings and questions), so a round with nothing to train on fails before the load
    load         the base model and its tokenizer (`round_io.load_base`)
    prepare      the objective's data from the loaded tokenizer (it raises when none is usable); then the reference
                 adapter (`job.reference`) and the adapter folder, cleared of a killed attempt's leftovers
    train        the objective's training, which ends by saving the adapter: its checksum and the round's metrics
    register     the adapter verified and registered (`round_io.register`), the metrics with wall time and peak RSS

A round over stored rollouts (GRPO, PPO) claims nothing and prepares from the job's episodes, read and replayed with
the policy's prompt renderer (`run_rollout_round`). The metrics every round records besides its objective's own:
`LoraSetup.round_metrics`. DynaKrag's round trains no adapter and evaluation trains nothing: they do not use this
runner.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, TypeVar

from training.job import AdapterRef, ProgressFn, RoundJob, phase
from training.rollout_data import (PassageResolver, Render, Replay, load_episodes, prompt_renderer,
                                   replay_episode)
from training.round_io import RssSampler, load_base, prepare_adapter_dir, register, registered, resolve_reference

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from evorag_core.store import Adapter, Store

__all__ = ["Base", "LoraSetup", "Trained", "run_lora_round", "Rollouts", "run_rollout_round", "rollout_meta"]

Claimed = TypeVar("Claimed")
Prepared = TypeVar("Prepared")


@dataclass(frozen=True)
class Base:
    """The loaded base model, its tokenizer and its id (what `prepare` reads)."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    model_id: str


@dataclass(frozen=True)
class LoraSetup(Generic[Prepared]):
    """What the objective's `train` gets: the job and its callback, the base model, the objective's prepared data,
    the reference adapter (None: the base model), the adapter folder to save to, and when the round started."""

    job: RoundJob
    on_progress: ProgressFn | None
    base: Base
    data: Prepared
    reference: Adapter | None
    out_dir: Path
    started: float  # time.perf_counter() at the round's start

    @property
    def reference_name(self) -> str:
        return self.reference.name if self.reference is not None else "base"

    def elapsed(self) -> float:
        """Seconds since the round started (the objective's `setup_s` once its policy is ready to train)."""
        return time.perf_counter() - self.started

    def round_metrics(self, setup_s: float, train_s: float) -> dict[str, Any]:
        """What a round trained on the job's train settings records besides its objective's own metrics: the
        reference, the seed, setup and train seconds, the job's config and train settings, the process count."""
        job = self.job
        return {"reference": self.reference_name, "seed": job.train.seed, "setup_s": setup_s, "train_s": train_s,
                "config": job.raw, "train_config": dataclasses.asdict(job.train), "processes": job.processes.count}


@dataclass(frozen=True)
class Trained:
    """What the objective's `train` returns: the saved adapter's checksum and the round's metrics."""

    checksum: str
    metrics: dict[str, Any]


def run_lora_round(
    job: RoundJob,
    store: Store,
    on_progress: ProgressFn | None,
    *,
    claim: Callable[[], Claimed],
    prepare: Callable[[Claimed, Base], Prepared] | None = None,
    train: Callable[[LoraSetup[Prepared]], Trained],
) -> AdapterRef:
    """setup -> train -> save -> register with the objective's `claim`, `prepare` and `train` (module docstring);
    without `prepare`, what `claim` returned is the objective's data (ARENA, R²AG: read before the model loads)."""
    done = registered(store, job)
    if done is not None:
        return done
    started = time.perf_counter()
    claimed = claim()
    with RssSampler() as rss:
        phase(on_progress, "load")
        model, tokenizer, base_id = load_base(job)
        phase(on_progress, "prepare")
        base = Base(model, tokenizer, base_id)
        data = prepare(claimed, base) if prepare is not None else claimed
        reference = resolve_reference(store, job, base_id)
        out_dir = prepare_adapter_dir(job.adapter_dir, job.processes)
        setup = LoraSetup(job, on_progress, base, data, reference, out_dir, started)
        trained = train(setup)
    metrics = {**trained.metrics, "wall_s": time.perf_counter() - started, "peak_rss_mb": rss.peak_mb}
    return register(store, job, out_dir, trained.checksum, base_id, metrics, on_progress)


@dataclass(frozen=True)
class Rollouts:
    """What a round over stored rollouts prepares from: the episodes read (their ids, in order), each replayed into
    the states the policy saw, and the policy's prompt renderer."""

    episode_ids: list[int]
    replays: list[Replay]
    render: Render


def run_rollout_round(
    job: RoundJob,
    store: Store,
    on_progress: ProgressFn | None,
    *,
    prepare: Callable[[Rollouts], Prepared],
    train: Callable[[LoraSetup[Prepared]], Trained],
) -> AdapterRef:
    """`run_lora_round` for GRPO and PPO: nothing to claim; once the base model is loaded, the job's episodes
    (`job.episode_ids`, else the newest `job.episodes` of `job.stage`) are read and replayed, and `prepare` makes the
    objective's data of them (raising when none is usable)."""

    def read(_: None, base: Base) -> Prepared:
        render = prompt_renderer(base.model, base.tokenizer, base.model_id, job.policy)
        episodes = load_episodes(store, ids=job.episode_ids, limit=job.episodes, stage=job.stage)
        resolve = PassageResolver(job.data, store)
        replays = [replay_episode(e, resolve, job.t_max) for e in episodes]
        return prepare(Rollouts([e.id for e in episodes], replays, render))

    return run_lora_round(job, store, on_progress, claim=lambda: None, prepare=read, train=train)


def rollout_meta(setup: LoraSetup[Any], objective: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The meta saved beside a rollout round's adapter: the round, objective and base model, the metrics without
    their loss history and episode ids, the episode ids on their own, the reference and the seed."""
    return {"round_id": setup.job.round_id, "objective": objective, "base_model_id": setup.base.model_id,
            "metrics": {k: v for k, v in metrics.items() if k not in ("loss_history", "episode_ids")},
            "episode_ids": metrics["episode_ids"], "reference": metrics["reference"], "seed": setup.job.train.seed}
