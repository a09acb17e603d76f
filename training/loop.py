"""Small pieces the hand-written step-level loops (GRPO, PPO) share: the starting policy, train mode without
dropout, bf16 autocast, seeded minibatches, per-token rows padded to a batch's width, the minibatch loop itself
(`train_minibatches`) and the per-step log forwarded to `on_progress`.

Dropout is switched off (as TRL does for DPO) so that at the first step the policy's log-probs equal the old and
reference ones exactly (ratio 1, KL 0); train mode is kept so that gradient checkpointing applies.
"""
from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from evorag_core.config import TrainConfig
from evorag_core.store.records import ROUND_KL_KEYS

from training.job import ProgressFn
from training.lora import attach_lora
from evorag_core.adapters.files import load_adapter
from training.precision import resolve_train_dtype

if TYPE_CHECKING:
    from peft import PeftModel

    from evorag_core.store import Adapter
    from training.processes import Processes

__all__ = ["MAX_GRAD_NORM", "start_policy", "train_mode", "autocast", "minibatches", "pad_rows", "accumulate",
           "optimizer_step", "train_minibatches", "StepLog"]

MAX_GRAD_NORM = 1.0  # TRL's default max_grad_norm, also used by our loops
_NOT_CHARTED = ("total", "elapsed_s")  # per-step entries left out of `step_history`


def start_policy(model: nn.Module, cfg: TrainConfig, reference: Adapter | None, base_id: str) -> PeftModel:
    """The PeftModel to train: the reference adapter loaded trainable (continue from the previous round), or a
    fresh seeded LoRA (B = 0, so it starts as the base model)."""
    if reference is None:
        return attach_lora(model, cfg)
    return load_adapter(model, Path(reference.path), base_id, trainable=True)


def train_mode(policy: nn.Module, cfg: TrainConfig) -> None:
    """Train mode with every dropout at p = 0; activation checkpointing when the config asks for it."""
    policy.train()
    for module in policy.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    if cfg.gradient_checkpointing:
        lm = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
        lm.activation_checkpointing_enable()


@contextlib.contextmanager
def autocast(cfg: TrainConfig, device: torch.device) -> Iterator[None]:
    """bf16 autocast when train.dtype resolves to bfloat16 on `device` (weights stay as loaded), else nothing."""
    if resolve_train_dtype(cfg.dtype, device.type) == "bfloat16":
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            yield
    else:
        yield


def minibatches(n: int, batch_size: int, epochs: int, seed: int) -> list[list[int]]:
    """Index lists: each epoch a fresh seeded permutation of range(n) cut into batches of `batch_size`."""
    if n < 1 or batch_size < 1 or epochs < 1:
        raise ValueError(f"need n, batch_size and epochs >= 1, got {n}, {batch_size}, {epochs}")
    generator = torch.Generator().manual_seed(seed)
    out: list[list[int]] = []
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator).tolist()
        out += [order[i : i + batch_size] for i in range(0, n, batch_size)]
    return out


def pad_rows(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """Per-token rows of different lengths (e.g. the π_old log-probs of a minibatch's completions) as one float32
    tensor of `width` columns, zero-padded on the right."""
    out = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row
    return out


def accumulate(acc: dict[str, float], values: Mapping[str, float], weight: float) -> None:
    """Add `weight` x each of `values` into the running sums `acc` (a step's terms, weighted by a micro-batch's share)."""
    for key, value in values.items():
        acc[key] = acc.get(key, 0.0) + value * weight


def optimizer_step(optimizer: torch.optim.Optimizer, params: list[nn.Parameter], processes: Processes) -> float:
    """One optimiser step: the gradients summed across `processes`, their norm clipped at MAX_GRAD_NORM, the step
    taken and the gradients cleared; returns the norm before clipping."""
    processes.sum_gradients(params)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm)


def train_minibatches(batches: Sequence[Sequence[int]], params: list[nn.Parameter], cfg: TrainConfig,
                      processes: Processes, log: StepLog, keys: tuple[str, ...],
                      loss_of: Callable[[list[int]], tuple[torch.Tensor, Mapping[str, float]]]) -> None:
    """The minibatch loop of GRPO's and PPO's rounds, over `params` with AdamW (lr train.lr, no weight decay).

    For each minibatch (a list of sample indices) this process takes its shard; `loss_of(local)` gives the shard's
    loss (the mean over its samples) and its logged terms; the loss is backpropagated weighted by the shard's share of
    the minibatch / train.grad_accum, so that summed over the processes the step is the one a single process takes on
    the whole minibatch. Every `grad_accum` minibatches (and after the last) one `optimizer_step`; its terms, summed
    over the processes, go to `log` (with the gradient norm). Stops once `log.total` steps are logged."""
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    acc = dict.fromkeys(keys, 0.0)
    for i, index in enumerate(batches):
        local = processes.shard(index)
        if local:
            share = len(local) / len(index)  # this process's part of the minibatch mean
            loss, terms = loss_of(local)
            (loss * share / cfg.grad_accum).backward()
            accumulate(acc, terms, share / cfg.grad_accum)
        if (i + 1) % cfg.grad_accum == 0 or i + 1 == len(batches):
            grad_norm = optimizer_step(optimizer, params, processes)
            log.add(**processes.sum_values(acc), grad_norm=grad_norm)
            acc = dict.fromkeys(keys, 0.0)
            if len(log.history) >= log.total:
                break


class StepLog:
    """Per-optimiser-step records ({step, total, loss, ..., elapsed_s}); each is also sent to `on_progress`."""

    def __init__(self, total: int, on_progress: ProgressFn | None):
        self.total = total
        self.on_progress = on_progress
        self.history: list[dict[str, float]] = []
        self.started = time.perf_counter()
        if on_progress is not None:  # training begins now: the page says "training", not the setup phase, until step 1
            on_progress({"phase": "train"})

    def add(self, **values: float) -> dict[str, float]:
        entry = {"step": len(self.history) + 1, "total": self.total, **{k: float(v) for k, v in values.items()},
                 "elapsed_s": time.perf_counter() - self.started}
        self.history.append(entry)
        if self.on_progress is not None:
            self.on_progress(dict(entry))
        return entry

    def summary(self, keys: tuple[str, ...]) -> dict[str, Any]:
        """first_/final_/mean_ of each key over the steps, the loss history as [step, loss] pairs, every step's
        logged values as `step_history` rows ({step, loss, ...}: the studio's metric charts) and, when the
        objective logged a KL, the KL history as {step, kl, kl_k2, kl_k3} rows (the keys it logged: `kl` is the
        optimised estimator, `kl_k2`/`kl_k3` both estimates where an objective computes both)."""
        out: dict[str, Any] = {"steps": len(self.history),
                               "loss_history": [[h["step"], h["loss"]] for h in self.history],
                               "step_history": [{k: v for k, v in h.items() if k not in _NOT_CHARTED}
                                                for h in self.history]}
        kl_rows = [{"step": h["step"], **{k: h[k] for k in ROUND_KL_KEYS if k in h}} for h in self.history]
        if any(len(row) > 1 for row in kl_rows):
            out["kl_history"] = kl_rows
        for key in keys:
            values = [h[key] for h in self.history if key in h and not math.isnan(h[key])]
            if values:
                out.update({f"first_{key}": values[0], f"final_{key}": values[-1],
                            f"mean_{key}": sum(values) / len(values)})
        return out
