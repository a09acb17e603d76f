"""GRPO over sampled completions of one prompt (ARENA replies, R²AG expansions): what such a trainer samples and
updates with (`sampling_setup`), a group's rows, micro-batches of them, one micro-step of the clipped objective with
the KL to a frozen reference adapter (or the base model), and the round's train step around the objective's trainer
(`train_completion_round`: the policy and its reference, then the adapter saved with the round's metrics). Both
estimators, k2 and k3, are logged whichever one the loss uses."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from evorag_core.config import TrainConfig

from training.objectives.grpo.loss import grpo_loss
from training.job import phase
from training.kl import kl_k2, kl_k3
from training.loop import StepLog, autocast, start_policy
from training.lora_round import LoraSetup, Trained
from training.reduce import sequence_mean
from training.seqlogp import Encoded, base_lm, completion_token_logps

if TYPE_CHECKING:
    from peft import PeftModel
    from torch import nn
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.store import Adapter
    from evorag_core.types import Question

__all__ = ["encode_group", "rows", "reference_logps", "epoch_order", "micro_step", "start_with_reference",
           "sampling_setup", "train_completion_round"]


def start_with_reference(model: PreTrainedModel, train: TrainConfig, reference: Adapter | None, base_id: str,
                         ref_name: str) -> tuple[PeftModel, str | None]:
    """(policy, reference adapter name): the policy to train (`loop.start_policy`) and, when the round starts from
    an adapter, a frozen copy of it loaded as `ref_name` for the KL term (None: the base model is the reference)."""
    policy = start_policy(model, train, reference, base_id)
    if reference is None:
        return policy, None
    policy.load_adapter(str(Path(reference.path)), adapter_name=ref_name, is_trainable=False)
    policy.set_adapter("default")
    return policy, ref_name


def sampling_setup(policy: PeftModel, tokenizer: PreTrainedTokenizerBase, lr: float, model_id: str
                   ) -> tuple[TransformersBackend, list[nn.Parameter], torch.optim.Optimizer]:
    """What a completion-GRPO trainer samples and updates with: a backend over the policy's own weights (reset its
    cache after every update), the trainable parameters of its "default" adapter, and their AdamW (`lr`, no weight
    decay)."""
    from evorag_core.lm.hf_backend import TransformersBackend

    backend = TransformersBackend.from_model(base_lm(policy), tokenizer, model_id=model_id)
    params = [p for n, p in policy.named_parameters() if p.requires_grad and ".default." in n]
    return backend, params, torch.optim.AdamW(params, lr=lr, weight_decay=0.0)


def encode_group(tokenizer: PreTrainedTokenizerBase, group: Any) -> Encoded:
    """`group.outputs`: generations of ONE prompt (`.prompt`, `.token_ids`, `.finish_reason`). Right-padded [prompt ids + sampled ids (+ end-of-turn)] rows; completion mask over the sampled part."""
    prompt_ids = tokenizer(group.outputs[0].prompt, add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    completions = [list(o.token_ids) + ([eos] if o.finish_reason == "stop" and eos is not None else [])
                   for o in group.outputs]
    completions = [c if c else [eos] for c in completions]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    length = len(prompt_ids) + max(len(c) for c in completions)
    width = max(len(c) for c in completions)
    ids = torch.full((len(completions), length), int(pad), dtype=torch.long)
    attention = torch.zeros_like(ids)
    cmask = torch.zeros((len(completions), width), dtype=torch.float32)
    for i, c in enumerate(completions):
        ids[i, : len(prompt_ids) + len(c)] = torch.tensor(prompt_ids + c)
        attention[i, : len(prompt_ids) + len(c)] = 1
        cmask[i, : len(c)] = 1.0
    n = len(completions)
    return Encoded(ids, attention, cmask, (len(prompt_ids),) * n, tuple(len(c) for c in completions), 0)


def rows(batch: Encoded, start: int, stop: int) -> Encoded:
    """Rows start..stop-1 of `batch`, with the padding they do not need cut off."""
    starts, lengths = batch.starts[start:stop], batch.lengths[start:stop]
    length = max(s + n for s, n in zip(starts, lengths))
    return Encoded(batch.input_ids[start:stop, :length], batch.attention_mask[start:stop, :length],
                   batch.completion_mask[start:stop, : max(lengths)], starts, lengths, 0)


def reference_logps(policy: PeftModel, batch: Encoded, ref_adapter: str | None) -> torch.Tensor:
    with torch.no_grad():
        if ref_adapter is None:
            with policy.disable_adapter():
                return completion_token_logps(policy, batch)[0]
        policy.set_adapter(ref_adapter, inference_mode=True)
        try:
            return completion_token_logps(policy, batch)[0]
        finally:
            policy.set_adapter("default")


def epoch_order(n: int, epochs: int, seed: int) -> list[int]:
    """`epochs` seeded permutations of range(n), one after the other."""
    generator = torch.Generator().manual_seed(seed)
    return [i for _ in range(epochs) for i in torch.randperm(n, generator=generator).tolist()]


def micro_step(policy: PeftModel, batch: Encoded, advantages: Sequence[float], train: TrainConfig,
               ref_adapter: str | None, share: float) -> dict[str, float]:
    """Backpropagate `share` x the GRPO loss of these replies; returns their loss terms and both KL estimates."""
    device = next(policy.parameters()).device
    mask = batch.completion_mask.to(device)
    logp_ref = reference_logps(policy, batch, ref_adapter)
    with autocast(train, device):
        logp = completion_token_logps(policy, batch)[0]
    adv = torch.tensor(list(advantages), dtype=torch.float32, device=device)
    loss, stats = grpo_loss(logp, logp.detach(), logp_ref, adv, mask=mask, clip_low=train.clip_eps,
                            clip_high=train.clip_eps_high, kl_coef=train.kl_coef, kl=train.kl)
    (loss * share).backward()
    with torch.no_grad():
        stats.update(kl_k2=float(sequence_mean(kl_k2(logp, logp_ref), mask)),
                     kl_k3=float(sequence_mean(kl_k3(logp, logp_ref), mask)), loss=float(loss.detach()))
    return stats


def train_completion_round(setup: LoraSetup[Any], *, objective: str, ref_name: str, train: TrainConfig,
                           questions: Sequence[Question],
                           fit: Callable[[PeftModel, str | None], tuple[StepLog, Sequence[Any]]],
                           extra: Callable[[StepLog], dict[str, Any]]) -> Trained:
    """The train step of a completion-GRPO round: the policy and its frozen reference (`start_with_reference`, the
    copy named `ref_name`), the objective's trainer `fit(policy, ref_adapter)` -> (log, sample replies), then the
    adapter saved with its metadata. The metrics hold what every such round records (objective, KL settings,
    questions, reference, timings, the job's config) plus `extra(log)` (the objective's own summaries and
    histories). Under several processes the main one saves."""
    from training.lora import save_adapter

    job, base_id = setup.job, setup.base.model_id
    policy, ref_adapter = start_with_reference(setup.base.model, train, setup.reference, base_id, ref_name)
    setup_s = setup.elapsed()
    log, samples = fit(policy, ref_adapter)
    phase(setup.on_progress, "save")
    metrics = {
        "objective": objective, "kl_estimator": train.kl, "kl_coef": train.kl_coef, "lr": train.lr, **extra(log),
        "questions": len(questions), "question_ids": [q.id for q in questions], "data": job.data,
        "reference": setup.reference_name, "seed": train.seed, "setup_s": setup_s,
        "train_s": log.history[-1]["elapsed_s"] if log.history else 0.0, "config": job.raw,
        "processes": job.processes.count,
    }
    meta = {"round_id": job.round_id, "objective": objective, "base_model_id": base_id, "metrics": metrics,
            "samples": list(samples[-8:]), "reference": metrics["reference"], "seed": train.seed}
    return Trained(job.processes.on_main(save_adapter, policy, setup.out_dir, meta), metrics)
