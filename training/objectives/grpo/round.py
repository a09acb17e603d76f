"""A step-level GRPO round: sibling groups from stored rollouts -> LoRA update -> saved, registered adapter.

Data: every stored state with K >= 2 sibling candidates whose branches were scored; candidate i's r̃ is its branch
return, its advantage A_i = (r̃_i − μ) / (σ + ε) over the group (`training.objectives.grpo.loss.group_advantages`). Groups whose
returns are all equal give zero advantages and are left out (they carry no policy gradient).

Objective (`training.objectives.grpo.loss.grpo_loss`, per completion token): −min(ρ A, clip(ρ, 1 − ε_low, 1 + ε_high) A)
+ kl_coef · KL, with ρ = π_θ / π_old and KL estimated by k3 or k2 (train.kl) against the reference. The round
starts from the reference adapter (the previous round's, or the base model), so π_old = π_ref = the starting policy:
their log-probs are computed once, without gradients, before the first update. `train.epochs` passes over the
candidates in seeded minibatches of `train.batch_size`, `train.grad_accum` minibatches per optimiser step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from evorag_core.config import TrainConfig
from evorag_core.errors import TrainingError

from training.objectives.grpo.loss import group_advantages, grpo_loss
from training.job import AdapterRef, ProgressFn, RoundJob, phase
from training.lora import save_adapter
from training.processes import SINGLE, Processes
from training.loop import StepLog, autocast, minibatches, pad_rows, start_policy, train_minibatches, train_mode
from training.rollout_data import CandidateGroup, candidate_groups
from training.lora_round import LoraSetup, Rollouts, Trained, rollout_meta, run_rollout_round
from training.seqlogp import completion_token_logps, encode

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedTokenizerBase

    from evorag_core.store import Store

__all__ = ["GrpoSample", "grpo_samples", "train_grpo", "evaluate_grpo", "run"]


@dataclass(frozen=True)
class GrpoSample:
    prompt: str
    completion: str
    advantage: float
    group: int


def grpo_samples(groups: Sequence[CandidateGroup], eps: float = 1e-6) -> list[GrpoSample]:
    """One sample per candidate of every group whose returns differ, with its group-normalised advantage."""
    out: list[GrpoSample] = []
    for g, group in enumerate(groups):
        advantages = group_advantages(torch.tensor(group.returns, dtype=torch.float32), eps=eps)
        if not bool(advantages.abs().gt(0).any()):
            continue
        out += [GrpoSample(group.prompt, c, float(a), g) for c, a in zip(group.completions, advantages.tolist())]
    return out


def _reference_logps(policy: PeftModel, tokenizer: PreTrainedTokenizerBase, samples: Sequence[GrpoSample],
                     cfg: TrainConfig) -> list[torch.Tensor]:
    """Per-token log-probs of each sample's completion under the starting policy (= π_old = π_ref)."""
    out: list[torch.Tensor] = []
    device = next(policy.parameters()).device
    with torch.no_grad(), autocast(cfg, device):
        for i in range(0, len(samples), cfg.batch_size):
            chunk = samples[i : i + cfg.batch_size]
            batch = encode(tokenizer, [s.prompt for s in chunk], [s.completion for s in chunk], cfg.max_length)
            logps, _ = completion_token_logps(policy, batch)
            out += [logps[b, :n].detach().cpu() for b, n in enumerate(batch.lengths)]
    return out


@torch.no_grad()
def evaluate_grpo(policy: PeftModel, tokenizer: PreTrainedTokenizerBase, samples: Sequence[GrpoSample],
                  old: Sequence[torch.Tensor], cfg: TrainConfig, processes: Processes = SINGLE) -> dict[str, float]:
    """The GRPO terms over `samples` under the current policy (no update): policy_loss (the clipped surrogate,
    −mean A at the start: 0 when every group is whole) and kl to the reference. Under several processes each
    scores its shard of the samples and the weighted terms are summed."""
    device = next(policy.parameters()).device
    policy.eval()
    totals = {"policy_loss": 0.0, "kl": 0.0}
    rows = processes.shard(range(len(samples)))
    with autocast(cfg, device):
        for i in range(0, len(rows), cfg.batch_size):
            chunk = [samples[j] for j in rows[i : i + cfg.batch_size]]
            batch = encode(tokenizer, [s.prompt for s in chunk], [s.completion for s in chunk], cfg.max_length)
            logp_new, _ = completion_token_logps(policy, batch)
            width = batch.completion_mask.shape[1]
            logp_old = pad_rows([old[j] for j in rows[i : i + cfg.batch_size]], width).to(device)
            advantages = torch.tensor([s.advantage for s in chunk], dtype=torch.float32, device=device)
            _, stats = grpo_loss(logp_new, logp_old, logp_old, advantages, mask=batch.completion_mask.to(device),
                                 clip_low=cfg.clip_eps, clip_high=cfg.clip_eps_high, kl=cfg.kl)
            for key in totals:
                totals[key] += stats[key] * len(chunk) / len(samples)
    return processes.sum_values(totals)


_STEP_KEYS = ("loss", "policy_loss", "kl", "clip_frac", "ratio_mean")


def train_grpo(
    policy: PeftModel, tokenizer: PreTrainedTokenizerBase, samples: Sequence[GrpoSample], cfg: TrainConfig,
    on_progress: ProgressFn | None = None, *, max_steps: int = 0, processes: Processes = SINGLE,
) -> tuple[StepLog, dict[str, float]]:
    """Optimise `policy` (a PeftModel, modified in place) on `samples`; returns the per-step log and the GRPO terms
    over the samples it trained on, before (surrogate_start) and after training (`evaluate_grpo`). With
    `max_steps`, only the samples of the minibatches those steps use are scored (π_old) and trained on.

    Under several processes (`training.processes`) each takes its shard of every minibatch; its loss is weighted by
    the shard's share of the minibatch and the gradients are summed once per optimiser step, so the step is the one
    a single process takes on the whole minibatch (equal up to float rounding: padding differs per shard)."""
    device = next(policy.parameters()).device
    batches = minibatches(len(samples), cfg.batch_size, cfg.epochs, cfg.seed)
    total = math.ceil(len(batches) / cfg.grad_accum)
    total = min(total, max_steps) if max_steps else total
    batches = batches[: total * cfg.grad_accum]
    used = sorted({j for index in batches for j in index})
    subset = [samples[j] for j in used]
    mine = processes.shard(used)  # π_old of each process's share of the samples, then everyone's
    old = dict(processes.gather(list(zip(mine, _reference_logps(policy, tokenizer, [samples[j] for j in mine], cfg)))))
    log = StepLog(total, on_progress)

    def loss_of(local: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        chunk = [samples[j] for j in local]
        batch = encode(tokenizer, [s.prompt for s in chunk], [s.completion for s in chunk], cfg.max_length)
        logp_old = pad_rows([old[j] for j in local], batch.completion_mask.shape[1]).to(device)
        advantages = torch.tensor([s.advantage for s in chunk], dtype=torch.float32, device=device)
        with autocast(cfg, device):
            logp_new, _ = completion_token_logps(policy, batch)
        loss, stats = grpo_loss(
            logp_new, logp_old, logp_old, advantages, mask=batch.completion_mask.to(device),
            clip_low=cfg.clip_eps, clip_high=cfg.clip_eps_high, kl_coef=cfg.kl_coef, kl=cfg.kl,
        )
        return loss, {"loss": float(loss.detach()), **stats}

    train_mode(policy, cfg)
    train_minibatches(batches, [p for p in policy.parameters() if p.requires_grad], cfg, processes, log, _STEP_KEYS,
                      loss_of)
    after = evaluate_grpo(policy, tokenizer, subset, [old[j] for j in used], cfg, processes)
    return log, {"samples_used": len(used), "surrogate_start": -sum(s.advantage for s in subset) / len(subset),
                 "surrogate_end": after["policy_loss"], "kl_end": after["kl"]}


@dataclass(frozen=True)
class _Groups:
    episode_ids: list[int]
    groups: list[CandidateGroup]
    samples: list[GrpoSample]


def _prepare(rollouts: Rollouts) -> _Groups:
    groups = candidate_groups(rollouts.replays, rollouts.render)
    samples = grpo_samples(groups)
    if not samples:
        raise TrainingError(
            f"GRPO needs states with >= 2 scored sibling candidates whose branch returns differ; "
            f"{len(rollouts.episode_ids)} episode(s) read, {len(groups)} group(s), none usable"
        )
    return _Groups(rollouts.episode_ids, groups, samples)


def _train(setup: LoraSetup[_Groups]) -> Trained:
    job, data = setup.job, setup.data
    policy = start_policy(setup.base.model, job.train, setup.reference, setup.base.model_id)
    setup_s = setup.elapsed()
    log, after = train_grpo(policy, setup.base.tokenizer, data.samples, job.train, setup.on_progress,
                            max_steps=job.max_steps, processes=job.processes)
    metrics = {
        "objective": "grpo", "kl_estimator": job.train.kl, "kl_coef": job.train.kl_coef,
        **log.summary(("loss", "policy_loss", "kl", "clip_frac", "ratio_mean")),
        "episodes": len(data.episode_ids), "episode_ids": data.episode_ids, "groups": len(data.groups),
        "usable_groups": len({s.group for s in data.samples}), "samples": len(data.samples),
        **after, **setup.round_metrics(setup_s, log.history[-1]["elapsed_s"] if log.history else 0.0),
    }
    phase(setup.on_progress, "save")
    return Trained(job.processes.on_main(save_adapter, policy, setup.out_dir, rollout_meta(setup, "grpo", metrics)),
                   metrics)


def run(job: RoundJob, store: Store, on_progress: ProgressFn | None = None) -> AdapterRef:
    """setup -> train -> save -> register (the module docstring; the steps: training.lora_round)."""
    return run_rollout_round(job, store, on_progress, prepare=_prepare, train=_train)
