"""Step-level GRPO: group-normalised advantages over sibling candidates and the clipped objective with a KL penalty.

At one state the policy proposes G sibling actions; their scalarised step rewards r̃^(i) become advantages
A_i = (r̃_i − μ) / (σ + ε) (SPEC §5). σ is the *population* standard deviation (divide by G, not G − 1):
for G = 2 the advantages are exactly ±1/(1 + ε), and a group of identical rewards gives all-zero advantages.
(TRL's GRPOTrainer uses the sample std, which makes advantages √(G/(G−1)) times smaller.)

The loss is PPO's clipped surrogate with asymmetric clipping (ε_low, ε_high; R²AG uses 0.2 / 0.28) plus
kl_coef · KL(π_θ ‖ π_ref) estimated per token with k3 or k2. Inputs are per-candidate log-probs `[B]` (summed over
the action's tokens) or per-token `[B, T]` with a 0/1 mask; per-token terms are averaged over each sequence's
tokens first, then over sequences.
"""
from __future__ import annotations

import torch
from torch import Tensor

from training.kl import kl_estimator
from training.reduce import sequence_mean

__all__ = ["group_advantages", "grpo_loss"]


def group_advantages(rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """(r − μ) / (σ + ε) along the last dim (the group); σ is the population std (unbiased=False).

    A group whose rewards are all equal (σ = 0) gets zero advantages, also with eps = 0.
    """
    if rewards.dim() == 0 or rewards.shape[-1] == 0:
        raise ValueError("rewards must have a non-empty group dimension (the last one)")
    rewards = rewards.to(torch.float32) if not rewards.is_floating_point() else rewards
    mean = rewards.mean(dim=-1, keepdim=True)
    std = rewards.std(dim=-1, unbiased=False, keepdim=True)
    centred = rewards - mean
    return torch.where(std > 0, centred / (std + eps), torch.zeros_like(centred))


def grpo_loss(
    logp_new: Tensor,
    logp_old: Tensor,
    logp_ref: Tensor,
    advantages: Tensor,
    *,
    mask: Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    kl_coef: float = 0.0,
    kl: str = "k3",
) -> tuple[Tensor, dict[str, float]]:
    """Clipped-ratio GRPO loss (to minimise) and stats {kl, clip_frac, ratio_mean, policy_loss}.

    per token: −min(ρ A, clip(ρ, 1 − clip_low, 1 + clip_high) A) + kl_coef · KL, with ρ = exp(logp_new − logp_old);
    advantages are per sequence `[B]` and broadcast over tokens. `clip_frac` is the share of tokens where the
    clipped term is the smaller one (the gradient is cut there).
    """
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low and clip_high must be >= 0, got {clip_low}, {clip_high}")
    if logp_new.shape != logp_old.shape or logp_new.shape != logp_ref.shape:
        raise ValueError(
            f"log-prob shapes differ: new {tuple(logp_new.shape)}, old {tuple(logp_old.shape)}, ref {tuple(logp_ref.shape)}"
        )
    if advantages.shape != logp_new.shape[:1]:
        raise ValueError(f"advantages must have shape [B]={tuple(logp_new.shape[:1])}, got {tuple(advantages.shape)}")
    estimate = kl_estimator(kl)
    adv = advantages.detach().reshape(-1, *([1] * (logp_new.dim() - 1)))
    ratio = torch.exp(logp_new - logp_old.detach())
    surrogate = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    policy_term = -torch.minimum(surrogate, clipped)
    kl_term = estimate(logp_new, logp_ref.detach())
    loss = sequence_mean(policy_term + kl_coef * kl_term, mask)
    with torch.no_grad():
        stats = {
            "policy_loss": float(sequence_mean(policy_term, mask)),
            "kl": float(sequence_mean(kl_term, mask)),
            "clip_frac": float(sequence_mean((clipped < surrogate).to(ratio.dtype), mask)),
            "ratio_mean": float(sequence_mean(ratio, mask)),
        }
    return loss, stats
