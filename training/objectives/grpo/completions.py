"""GRPO over sampled completions of one prompt (ARENA replies, R²AG expansions): a group's rows, micro-batches of
them, and one micro-step of the clipped objective with the KL to a frozen reference adapter (or the base model).
Both estimators, k2 and k3, are logged whichever one the loss uses."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch

from evorag_core.config import TrainConfig

from training.objectives.grpo.loss import grpo_loss
from training.kl import kl_k2, kl_k3
from training.loop import StepLog, autocast, start_policy
from training.reduce import sequence_mean
from training.seqlogp import Encoded, completion_token_logps

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from evorag_core.store import Adapter
    from evorag_core.types import Question
    from training.job import RoundJob

__all__ = ["encode_group", "rows", "reference_logps", "epoch_order", "micro_step", "start_with_reference",
           "save_round"]


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


def save_round(policy: PeftModel, job: RoundJob, *, objective: str, base_id: str, reference: Adapter | None,
               questions: Sequence[Question], train: TrainConfig, log: StepLog, samples: Sequence[Any], setup_s: float,
               out_dir: Path, extra: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Save the trained adapter with its metadata; returns (metrics, checksum). The metrics hold what every
    completion-GRPO round records (objective, KL settings, questions, reference, timings, the job's config) plus
    `extra` (the objective's own summaries and histories). Under several processes the main one saves."""
    from training.lora import save_adapter

    metrics = {
        "objective": objective, "kl_estimator": train.kl, "kl_coef": train.kl_coef, "lr": train.lr, **extra,
        "questions": len(questions), "question_ids": [q.id for q in questions], "data": job.data,
        "reference": reference.name if reference is not None else "base", "seed": train.seed, "setup_s": setup_s,
        "train_s": log.history[-1]["elapsed_s"] if log.history else 0.0, "config": job.raw,
        "processes": job.processes.count,
    }
    meta = {"round_id": job.round_id, "objective": objective, "base_model_id": base_id, "metrics": metrics,
            "samples": list(samples[-8:]), "reference": metrics["reference"], "seed": train.seed}
    return metrics, job.processes.on_main(save_adapter, policy, out_dir, meta)
