"""The steps every LoRA round shares: setup -> train -> save -> register, with the objective's own steps plugged in.

    registered?  a retried round whose adapter is already registered finishes without training again
    claim        the objective's work before the model loads (DPO claims its pairs; ARENA and R²AG read their
                 settings and questions), so a round with nothing to train on fails before the load
    load         the base model and its tokenizer (`round_io.load_base`)
    prepare      the objective's data from the loaded tokenizer (it raises when none is usable); then the reference
                 adapter (`job.reference`) and the adapter folder, cleared of a killed attempt's leftovers
    train        the objective's training, which ends by saving the adapter: its checksum and the round's metrics
    register     the adapter verified and registered (`round_io.register`), the metrics with wall time and peak RSS

DynaKrag's round trains no adapter and evaluation trains nothing: they do not use this runner.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

from training.job import AdapterRef, ProgressFn, RoundJob, phase
from training.round_io import RssSampler, load_base, prepare_adapter_dir, register, registered, resolve_reference

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from evorag_core.store import Adapter, Store

__all__ = ["Base", "LoraSetup", "Trained", "run_lora_round"]

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
    prepare: Callable[[Claimed, Base], Prepared],
    train: Callable[[LoraSetup[Prepared]], Trained],
) -> AdapterRef:
    """setup -> train -> save -> register with the objective's `claim`, `prepare` and `train` (module docstring)."""
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
        data = prepare(claimed, base)
        reference = resolve_reference(store, job, base_id)
        out_dir = prepare_adapter_dir(job.adapter_dir, job.processes)
        setup = LoraSetup(job, on_progress, base, data, reference, out_dir, started)
        trained = train(setup)
    metrics = {**trained.metrics, "wall_s": time.perf_counter() - started, "peak_rss_mb": rss.peak_mb}
    return register(store, job, out_dir, trained.checksum, base_id, metrics, on_progress)
