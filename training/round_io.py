"""What every round does around its training step: load the base model, pick the reference adapter, clear a
killed attempt's leftovers, measure memory, register the saved adapter.

A round registers only a usable adapter: a non-finite loss fails it (TrainingError), and the saved folder is verified
before its row is written (`evorag_core.adapters.registry.register_verified`: checksum, shapes, finite tensors), so a
diverged round fails with an AdapterError and registers nothing.

Adapter folders live at `<home>/adapters/<round id>/` and are written atomically by `training.lora.save_adapter`.
A killed attempt can leave a temporary `.N.tmp-*` folder, or (killed between saving and registering) a complete
but unregistered folder; `prepare_adapter_dir` removes both before the next attempt trains again.
"""
from __future__ import annotations

import math
import resource
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from evorag_core.adapters.registry import register_verified
from evorag_core.adapters.role import role_for_source
from evorag_core.lm.loading import base_model_id
from evorag_core.errors import AdapterError, ConfigError, TrainingError

from training.job import AdapterRef, ProgressFn, RoundJob, phase
from training.processes import SINGLE, Processes

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from evorag_core.store import Adapter, Store

__all__ = [
    "load_base",
    "resolve_reference",
    "registered",
    "prepare_adapter_dir",
    "register",
    "refuse_nonfinite_loss",
    "RssSampler",
    "process_peak_rss_mb",
    "scalar_metrics",
]


def load_base(job: RoundJob) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """(fresh base model, tokenizer, base model id) for the job's policy model; a new copy per round."""
    from evorag_core.lm.loading import load_model

    model, tokenizer, _ = load_model(job.policy.model, job.home, device=job.policy.device, dtype=job.policy.dtype)
    return model, tokenizer, base_model_id(job.policy.model, job.home)


def resolve_reference(store: Store, job: RoundJob, base_id: str) -> Adapter | None:
    """The store's Adapter row the round starts from and is regularised towards, or None for the base model.

    previous: the live (active) adapter when it belongs to this base model and has the role this round trains
    (adapters/role.py: a round on answer pairs trains the reader), else None (the base model): what is running in
    that role, not merely the newest registered one - a live reader adapter leaves the policy on the base model;
    active: the active one; base: None; anything else: the adapter of that name, which must belong to this base model.
    """
    if job.reference == "base":
        return None
    if job.reference == "previous":
        live = store.active_adapter()
        return live if (live is not None and live.base_model == base_id and live.round_id != job.round_id
                        and live.role == role_for_source(job.source)) else None
    if job.reference == "active":
        found = store.active_adapter()
    else:
        try:
            found = store.get_adapter(job.reference)
        except KeyError:
            raise ConfigError(f"round {job.round_id}: reference adapter {job.reference!r} is not registered") from None
    if found is not None and found.base_model != base_id:
        raise AdapterError(f"reference adapter {found.name!r} was trained on {found.base_model!r}, not {base_id!r}")
    return found


def registered(store: Store, job: RoundJob) -> AdapterRef | None:
    """This round's adapter if an earlier attempt already registered it (the attempt died before finishing)."""
    try:
        row = store.get_adapter(job.adapter_name)
    except KeyError:
        return None
    metrics = {**row.metrics, "recovered": True}
    return AdapterRef(row.name, Path(row.path), job.round_id, job.objective, row.base_model, row.checksum or "", metrics)


def prepare_adapter_dir(path: Path, processes: Processes = SINGLE) -> Path:
    """Remove leftovers of a killed attempt at `path` (temporary folders, an unregistered folder); returns `path`.
    Under several processes only the main one touches the folder (it alone writes the adapter)."""
    path = Path(path)
    if not processes.main:
        return path
    if path.parent.is_dir():
        for pattern in (f".{path.name}.tmp-*", f".{path.name}.old-*"):
            for leftover in path.parent.glob(pattern):
                shutil.rmtree(leftover, ignore_errors=True)
    if path.exists():
        shutil.rmtree(path)
    return path


def scalar_metrics(metrics: Mapping[str, Any]) -> dict[str, float | int | str | bool]:
    """The scalar entries of `metrics` (what the adapter registry keeps; lists and histories stay on the round)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}


def register(store: Store, job: RoundJob, path: Path, checksum: str, base_id: str, metrics: Mapping[str, Any],
             on_progress: ProgressFn | None = None) -> AdapterRef:
    """Record the saved adapter in the store under `job.adapter_name`, after the phase report "register" (where the
    worker checks a last time for a cancel request: a cancelled round registers nothing). A non-finite loss raises
    TrainingError and a folder that fails verification (non-finite tensors included) AdapterError: nothing is
    registered. Under several processes the main one records it; every process returns the same AdapterRef."""
    phase(on_progress, "register")
    refuse_nonfinite_loss(job.round_id, metrics)
    job.processes.on_main(
        register_verified, store, job.adapter_name, path, base_model_id=base_id, checksum=checksum,
        round_id=job.round_id, objective=job.objective, metrics=scalar_metrics(metrics),
        role=role_for_source(job.source),
    )
    return AdapterRef(job.adapter_name, Path(path), job.round_id, job.objective, base_id, checksum, dict(metrics))


def refuse_nonfinite_loss(round_id: int, metrics: Mapping[str, Any]) -> None:
    """TrainingError if a loss the round reports (a `*loss` scalar or a `loss_history` entry) is NaN or ±inf."""
    losses = [(k, v) for k, v in metrics.items() if k.endswith("loss")]
    losses += [(f"loss at step {step}", v) for step, v in metrics.get("loss_history") or ()]
    bad = [(k, v) for k, v in losses if isinstance(v, (int, float)) and not math.isfinite(v)]
    if bad:
        key, value = bad[0]
        raise TrainingError(f"round {round_id}: the loss is not finite ({key} = {value}); the training diverged, "
                            "no adapter is registered")


def process_peak_rss_mb() -> float:
    """Peak resident memory of this process since it started (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RssSampler:
    """Peak resident memory while the block runs, sampled every `interval` seconds (a worker process runs many
    rounds, so the process-wide peak alone would mix them up)."""

    def __init__(self, interval: float = 0.25):
        import psutil

        self._process = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evorag-rss", daemon=True)
        self.peak_mb = self._sample()

    def _sample(self) -> float:
        return self._process.memory_info().rss / (1 << 20)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak_mb = max(self.peak_mb, self._sample())

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, self._sample())
