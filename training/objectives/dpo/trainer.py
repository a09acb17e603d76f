"""DPO on preference pairs through TRL's `DPOTrainer`, with LoRA and our own held-out accuracy.

L = −log σ(β [(log π(c) − log π_ref(c)) − (log π(r) − log π_ref(r))]), β = cfg.beta (SPEC §5).

Reference policy. The trained model is always a `PeftModel` whose adapter "default" is trained; TRL (1.16) copies
that adapter into a frozen adapter "ref" and computes the reference log-probs with "ref" active. So:
- no previous adapter: "default" is a fresh LoRA (B = 0), "ref" equals the base model;
- `ref_adapter` given (the previous round): it is verified and loaded as "default", training continues from it,
  and the reference is that previous round's policy — iterative DPO.

`model` is the *base* causal LM; it is modified in place (LoRA layers injected), so load a fresh one per job.
TRL disables every dropout layer (DPOConfig.disable_dropout), so train.lora_dropout has no effect here: policy
and reference log-probs stay comparable. Prompts are cut in the middle to fit max_length (`data.fit_pairs`).
Same pairs, model and seed give a byte-identical adapter on CPU (tested on the tiny model).
"""
from __future__ import annotations

import contextlib
import logging
import math
import resource
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import torch
from peft import PeftModel
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from trl import DPOConfig, DPOTrainer

from evorag_core.config import TrainConfig
from evorag_core.errors import AdapterError, ConfigError

from training.objectives.dpo.data import PairExample, fit_pairs, pairs_to_dataset
from training.lora import attach_lora, save_adapter
from evorag_core.adapters.files import load_adapter
from training.precision import resolve_train_dtype
from training.processes import SINGLE, Processes

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["DpoResult", "dpo_config", "train_dpo", "pair_margins", "heldout_accuracy", "completion_logps"]

ProgressFn = Callable[[dict[str, Any]], None]

log = logging.getLogger("evorag.train")


def log_phase(name: str) -> None:
    """One `dpo phase NAME` log line per phase (load, reference, train, heldout, save, done): bench/memory.py reads
    them from the worker's log to attribute its memory samples to phases."""
    log.info("dpo phase %s", name)


@dataclass(frozen=True)
class DpoResult:
    adapter_dir: Path
    checksum: str  # sha256 of adapter_model.safetensors
    metrics: dict[str, float]  # last logged step (loss, rewards/*, logps/*) + train_loss, first_loss
    heldout_accuracy: float | None  # share of held-out pairs with implicit reward margin > 0
    heldout_margin: float | None  # mean implicit reward margin on held-out pairs
    steps: int
    n_train: int
    n_heldout: int
    truncated: int  # prompts shortened to fit max_length (train + held-out)
    dropped: int  # pairs that could not fit at all
    wall_seconds: float  # trainer.train() only
    seconds_per_step: float
    peak_rss_mb: float  # peak resident memory of this process so far
    history: tuple[dict[str, float], ...] = field(repr=False, default=())


# Pairs per forward/backward pass on the CPU. The autograd graph of one pass holds every layer's activations for its
# 2 x pairs sequences (chosen and rejected) of up to max_length tokens: measured on SmolLM2-135M at 8 x 506 tokens
# (batch 4), 4.3 GB of saved tensors (MLP 2.1 GB, attention q/k/v/out 1.1 GB, ...), and the worker peaked at 8.2 GB
# RSS. An optimiser step over batch_size x grad_accum pairs is the same whether its pairs go through in one pass or
# in several accumulated ones (the mean loss, the same pairs per step in the same order, equal within float
# rounding; tested), so on the CPU a round runs one pair per pass. None: batch_size pairs per pass (as configured).
CPU_MICRO_BATCH: int | None = 1


def micro_batching(cfg: TrainConfig, *, use_cpu: bool, processes: int = 1) -> tuple[int, int]:
    """(pairs per forward pass, passes accumulated per optimiser step) on each of `processes` processes, for
    batch_size x grad_accum pairs per optimiser step in all: the configured batch is the global one, so a round on N
    processes takes the same optimiser steps over the same pairs as on one (each process takes 1/N of them)."""
    micro = CPU_MICRO_BATCH if use_cpu else None
    if micro is None or cfg.batch_size <= micro or cfg.batch_size % micro:
        per_pass, passes = cfg.batch_size, cfg.grad_accum
    else:
        per_pass, passes = micro, cfg.grad_accum * (cfg.batch_size // micro)
    if processes <= 1:
        return per_pass, passes
    if passes % processes == 0:
        return per_pass, passes // processes
    if per_pass % processes == 0:
        return per_pass // processes, passes
    if (per_pass * passes) % processes == 0:
        return 1, per_pass * passes // processes
    raise ConfigError(f"train.batch_size x train.grad_accum = {per_pass * passes} pairs per step cannot be split "
                      f"evenly over {processes} processes")


def dpo_config(cfg: TrainConfig, output_dir: Path, *, use_cpu: bool, processes: int = 1) -> DPOConfig:
    """TRL's DPOConfig from the [train] section (logging every step, no checkpoints, no reporting); on the CPU the
    pairs of a step go through in micro-batches, and under N processes each takes 1/N of them (`micro_batching`)."""
    per_pass, passes = micro_batching(cfg, use_cpu=use_cpu, processes=processes)
    return DPOConfig(
        output_dir=str(output_dir),
        beta=cfg.beta,
        learning_rate=cfg.lr,
        num_train_epochs=cfg.epochs,
        per_device_train_batch_size=per_pass,
        gradient_accumulation_steps=passes,
        max_length=cfg.max_length,
        bf16=resolve_train_dtype(cfg.dtype, "cpu" if use_cpu else "cuda") == "bfloat16",
        fp16=False,
        gradient_checkpointing=cfg.gradient_checkpointing,
        seed=cfg.seed,
        data_seed=cfg.seed,
        use_cpu=use_cpu,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


# TRL 1.16's fused LM head scores only the completion positions where Triton runs (CUDA/XPU) and *every* position
# elsewhere, so on CPU a 512-token batch pushed all 4096 positions through the 49k-word head in 4096 x 32768 tiles
# (0.5 GB temporaries, ~1 TFLOP per step) although prompt positions are masked out afterwards. During training we
# flip that module-level switch so CPU takes the same compact path; the torch tile code and the maths are unchanged.
COMPACT_LM_HEAD = True


@contextlib.contextmanager
def _compact_lm_head() -> Iterator[None]:
    import trl.trainer.utils as trl_utils

    original = getattr(trl_utils, "_use_triton", None)
    if not COMPACT_LM_HEAD or original is None:  # another TRL layout: leave it alone
        yield
        return
    trl_utils._use_triton = lambda device: True
    try:
        yield
    finally:
        trl_utils._use_triton = original


class _Progress(TrainerCallback):
    """Forwards every log line (with step, wall time and seconds per step) to `on_progress` and keeps a history."""

    def __init__(self, on_progress: ProgressFn | None):
        self.on_progress = on_progress
        self.history: list[dict[str, float]] = []
        self.started = time.perf_counter()
        self.cpu_started = time.process_time()

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()
        self.cpu_started = time.process_time()
        if self.on_progress is not None:  # the page says "training" from here, not the setup phase, until step 1
            self.on_progress({"phase": "train"})

    def on_log(self, args, state, control, logs=None, **kwargs):
        elapsed = time.perf_counter() - self.started
        entry = {k: float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
        entry.update(step=state.global_step, max_steps=state.max_steps, elapsed_s=elapsed,
                     sec_per_step=elapsed / max(state.global_step, 1),
                     cpu_s=time.process_time() - self.cpu_started)  # CPU seconds of this process, all threads
        self.history.append(entry)
        if self.on_progress is not None:
            self.on_progress(dict(entry))


def train_dpo(
    pairs: Sequence[PairExample],
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    cfg: TrainConfig,
    out_dir: Path,
    ref_adapter: Path | None = None,
    on_progress: ProgressFn | None = None,
    *,
    heldout: Sequence[PairExample] = (),
    base_model_id: str | None = None,
    meta: Mapping[str, Any] | None = None,
    processes: Processes = SINGLE,
) -> DpoResult:
    """Train one DPO round on `pairs`, save the adapter to `out_dir` and score `heldout` pairs.

    base_model_id defaults to model.config.name_or_path; it is checked against `ref_adapter` and recorded in the
    adapter's metadata together with `meta` (e.g. round_id) and the final metrics. Under several processes (an
    `accelerate launch`) every process calls this with the same pairs: TRL's Trainer shards them and averages the
    gradients; the main process alone scores the held-out pairs and saves the adapter (the others get its checksum).
    """
    if isinstance(model, PeftModel):
        raise ValueError("train_dpo expects the base model; pass the previous round's adapter as ref_adapter")
    out_dir = Path(out_dir)
    if processes.main and out_dir.exists() and any(out_dir.iterdir()):
        raise AdapterError(f"{out_dir} already exists and is not empty; each round needs a new adapter folder")
    base_id = base_model_id or str(model.config.name_or_path)
    train_fit = fit_pairs(pairs, tokenizer, cfg.max_length)
    held_fit = fit_pairs(heldout, tokenizer, cfg.max_length)
    if not train_fit.pairs:
        raise ValueError(f"no training pairs: {len(pairs)} given, {train_fit.dropped} dropped as too long")
    use_cpu = next(model.parameters()).device.type == "cpu"
    if ref_adapter is not None:
        policy = load_adapter(model, Path(ref_adapter), base_id, trainable=True)
    else:
        policy = attach_lora(model, cfg)
    progress = _Progress(on_progress)
    log_phase("reference")  # the trainer's setup: TRL's frozen "ref" adapter, the tokenized dataset
    with tempfile.TemporaryDirectory(prefix="evorag-dpo-") as scratch:
        trainer = DPOTrainer(
            model=policy,
            ref_model=None,
            args=dpo_config(cfg, Path(scratch), use_cpu=use_cpu, processes=processes.count),
            train_dataset=pairs_to_dataset(train_fit.pairs),
            processing_class=tokenizer,
            callbacks=[progress],
        )
        trainer.remove_callback(PrinterCallback)  # progress goes through on_progress, not stdout
        started = time.perf_counter()
        log_phase("train")
        with _compact_lm_head():
            output = trainer.train()
        wall = time.perf_counter() - started
    steps = int(output.global_step)
    step_logs = [h for h in progress.history if "loss" in h]
    metrics = dict(step_logs[-1]) if step_logs else {}
    metrics.update(train_loss=float(output.training_loss), first_loss=step_logs[0]["loss"] if step_logs else math.nan)
    accuracy = margin = None
    log_phase("heldout")
    if held_fit.pairs and processes.main:
        margins = pair_margins(policy, tokenizer, held_fit.pairs, beta=cfg.beta, max_length=cfg.max_length,
                               batch_size=cfg.batch_size)
        accuracy = sum(m > 0 for m in margins) / len(margins)
        margin = sum(margins) / len(margins)
        metrics.update(heldout_accuracy=accuracy, heldout_margin=margin)
    record = {"round_id": None, "objective": "dpo", **dict(meta or {}), "base_model_id": base_id,
              "metrics": metrics, "beta": cfg.beta, "seed": cfg.seed, "n_train": len(train_fit.pairs),
              "n_heldout": len(held_fit.pairs), "reference": str(ref_adapter) if ref_adapter else "base"}
    log_phase("save")
    if on_progress is not None:
        on_progress({"phase": "save"})
    checksum = processes.on_main(save_adapter, policy, out_dir, record)
    return DpoResult(
        adapter_dir=out_dir,
        checksum=checksum,
        metrics=metrics,
        heldout_accuracy=accuracy,
        heldout_margin=margin,
        steps=steps,
        n_train=len(train_fit.pairs),
        n_heldout=len(held_fit.pairs),
        truncated=train_fit.truncated + held_fit.truncated,
        dropped=train_fit.dropped + held_fit.dropped,
        wall_seconds=wall,
        seconds_per_step=wall / max(steps, 1),
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        history=tuple(progress.history),
    )


@contextlib.contextmanager
def _reference(model: PeftModel, ref_adapter_name: str | None) -> Iterator[None]:
    """Run the block with the reference policy: adapter `ref_adapter_name` active, or all adapters disabled."""
    if ref_adapter_name is None:
        with model.disable_adapter():
            yield
        return
    previous = model.active_adapter
    model.set_adapter(ref_adapter_name)
    try:
        yield
    finally:
        model.set_adapter(previous)


def _tokenize_pair_side(tokenizer: PreTrainedTokenizerBase, prompt: str, completion: str,
                        max_length: int) -> tuple[list[int], int]:
    """(ids, completion start) as TRL builds them: EOS appended, split at the common prefix, keep_start."""
    eos = tokenizer.eos_token
    completion = completion if completion.endswith(eos) else completion + eos
    prompt_ids = tokenizer(text=prompt)["input_ids"]
    full_ids = tokenizer(text=prompt + completion)["input_ids"]
    start = 0
    while start < min(len(prompt_ids), len(full_ids)) and prompt_ids[start] == full_ids[start]:
        start += 1
    return full_ids[:max_length], start


@torch.no_grad()
def completion_logps(
    model: PreTrainedModel | PeftModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
    completions: Sequence[str], *, max_length: int
) -> torch.Tensor:
    """Σ log π(completion token | prefix) per row, float32 `[B]`, under the model's active adapter.

    Only the completion positions go through the LM head, so the `[B, T, vocab]` logits are never built.
    """
    rows = [_tokenize_pair_side(tokenizer, p, c, max_length) for p, c in zip(prompts, completions, strict=True)]
    device = next(model.parameters()).device
    length = max(len(ids) for ids, _ in rows)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), length), dtype=torch.long)
    completion = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, (ids, start) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        attention[i, : len(ids)] = 1
        completion[i, start : len(ids)] = True
    lm = model.get_base_model() if isinstance(model, PeftModel) else model
    hidden = lm.base_model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).last_hidden_state
    predicts = completion[:, 1:].to(device)  # position t predicts token t + 1
    logits = lm.get_output_embeddings()(hidden[:, :-1][predicts]).float()
    targets = input_ids[:, 1:].to(device)[predicts]
    token_logps = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    row_of = torch.arange(len(rows), device=device)[:, None].expand_as(predicts)[predicts]
    return torch.zeros(len(rows), device=device).index_add_(0, row_of, token_logps).cpu()


def pair_margins(
    model: PeftModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Sequence[PairExample],
    *,
    beta: float,
    max_length: int,
    ref_adapter_name: str | None = "ref",
    batch_size: int = 4,
) -> list[float]:
    """Implicit reward margins β[(log π(c) − log π_ref(c)) − (log π(r) − log π_ref(r))], one per pair.

    π is the active adapter; π_ref is the adapter `ref_adapter_name` if the model has it (TRL's frozen copy of
    the starting adapter), else the base model (adapters disabled).
    """
    if ref_adapter_name is not None and ref_adapter_name not in model.peft_config:
        ref_adapter_name = None
    was_training = model.training
    model.eval()
    margins: list[float] = []
    try:
        for i in range(0, len(pairs), batch_size):
            batch = pairs[i : i + batch_size]
            prompts = [p.prompt for p in batch] * 2
            completions = [p.chosen for p in batch] + [p.rejected for p in batch]
            policy = completion_logps(model, tokenizer, prompts, completions, max_length=max_length)
            with _reference(model, ref_adapter_name):
                reference = completion_logps(model, tokenizer, prompts, completions, max_length=max_length)
            ratio_c, ratio_r = (policy - reference).chunk(2)
            margins.extend((beta * (ratio_c - ratio_r)).tolist())
    finally:
        model.train(was_training)
    return margins


def heldout_accuracy(
    model: PeftModel, tokenizer: PreTrainedTokenizerBase, pairs: Sequence[PairExample], *, beta: float, max_length: int,
    ref_adapter_name: str | None = "ref",
) -> float:
    """Share of pairs whose implicit reward margin is > 0 (a tie, e.g. an untrained adapter, counts as wrong)."""
    if not pairs:
        raise ValueError("heldout_accuracy needs at least one pair")
    margins = pair_margins(model, tokenizer, pairs, beta=beta, max_length=max_length, ref_adapter_name=ref_adapter_name)
    return sum(m > 0 for m in margins) / len(margins)
