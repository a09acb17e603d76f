"""Step-level PPO: scalarised step reward, GAE over one episode, clipped policy/value losses and a value head.

SPEC §5: r̃_t = Σ_k w_k(t) r_t^(k); advantages by GAE(γ, λ); PPO's clipped ratio objective (ε = 0.2);
a linear value head reads the policy LM's last hidden state at the last prompt token.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from training.reduce import sequence_mean

__all__ = ["gae", "ppo_losses", "ValueHead"]


def gae(
    rewards: Sequence[float] | Tensor,
    values: Sequence[float] | Tensor,
    gamma: float,
    lam: float,
    last_value: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation for one episode -> (advantages, returns), both float32 `[T]`.

    δ_t = r_t + γ V_{t+1} − V_t with V_{T+1} = last_value (0 when the episode terminated, V(s_{T+1}) when it was
    truncated at T_max); A_t = δ_t + γ λ A_{t+1}; returns_t = A_t + V_t (the value-function targets).
    """
    r = torch.as_tensor(rewards, dtype=torch.float32)
    v = torch.as_tensor(values, dtype=torch.float32).detach()
    if r.dim() != 1 or r.shape != v.shape:
        raise ValueError(f"rewards and values must be 1-D of the same length, got {tuple(r.shape)} and {tuple(v.shape)}")
    advantages = torch.zeros_like(r)
    running, next_value = 0.0, float(last_value)
    for t in range(r.shape[0] - 1, -1, -1):
        delta = r[t] + gamma * next_value - v[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = v[t]
    return advantages, advantages + v


def ppo_losses(
    logp_new: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    values_new: Tensor,
    values_old: Tensor,
    returns: Tensor,
    *,
    mask: Tensor | None = None,
    clip_eps: float = 0.2,
    value_clip: float = 0.2,
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """(policy_loss, value_loss, stats) for a batch of B steps.

    policy: mean of −min(ρ A, clip(ρ, 1 ± clip_eps) A), ρ = exp(logp_new − logp_old) (per token with a mask, then
    sequence mean). value: ½ mean max((V − R)², (V_old + clip(V − V_old, ± value_clip) − R)²); value_clip = 0 gives
    the plain ½ (V − R)². stats: clip_frac, ratio_mean, approx_kl (k3 of π_old vs π_new), value_clip_frac.
    """
    if clip_eps < 0 or value_clip < 0:
        raise ValueError(f"clip_eps and value_clip must be >= 0, got {clip_eps}, {value_clip}")
    if logp_new.shape != logp_old.shape:
        raise ValueError(f"logp_new {tuple(logp_new.shape)} and logp_old {tuple(logp_old.shape)} differ in shape")
    b = logp_new.shape[:1]
    for name, t in (("advantages", advantages), ("values_new", values_new), ("values_old", values_old), ("returns", returns)):
        if t.shape != b:
            raise ValueError(f"{name} must have shape [B]={tuple(b)}, got {tuple(t.shape)}")
    adv = advantages.detach().reshape(-1, *([1] * (logp_new.dim() - 1)))
    log_ratio = logp_new - logp_old.detach()
    ratio = torch.exp(log_ratio)
    surrogate = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    policy_loss = sequence_mean(-torch.minimum(surrogate, clipped), mask)

    returns, values_old = returns.detach(), values_old.detach()
    unclipped_err = (values_new - returns).pow(2)
    if value_clip > 0:
        v_clipped = values_old + torch.clamp(values_new - values_old, -value_clip, value_clip)
        clipped_err = (v_clipped - returns).pow(2)
        value_loss = 0.5 * torch.maximum(unclipped_err, clipped_err).mean()
        value_clip_frac = float((clipped_err > unclipped_err).float().mean())
    else:
        value_loss = 0.5 * unclipped_err.mean()
        value_clip_frac = 0.0
    with torch.no_grad():
        stats = {
            "clip_frac": float(sequence_mean((clipped < surrogate).to(ratio.dtype), mask)),
            "ratio_mean": float(sequence_mean(ratio, mask)),
            "approx_kl": float(sequence_mean(torch.expm1(log_ratio) - log_ratio, mask)),
            "value_clip_frac": value_clip_frac,
        }
    return policy_loss, value_loss, stats


class ValueHead(nn.Module):
    """V(s) = w·h + b, h = the LM's last hidden state at the last attended position (the last prompt token).

    Works with left or right padding: the position is the last index where attention_mask is 1. The head runs in
    float32 whatever the LM's dtype; it starts at zero (V ≡ 0) so the first advantages are the raw returns.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        if hidden_size <= 0:
            raise ValueError(f"hidden_size must be positive, got {hidden_size}")
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """hidden_states `[B, T, H]`, attention_mask `[B, T]` (None = no padding) -> values `[B]`."""
        if hidden_states.dim() != 3:
            raise ValueError(f"hidden_states must be [B, T, H], got {tuple(hidden_states.shape)}")
        batch, length, _ = hidden_states.shape
        if attention_mask is None:
            last = torch.full((batch,), length - 1, dtype=torch.long, device=hidden_states.device)
        else:
            positions = torch.arange(length, device=hidden_states.device).expand(batch, length)
            last = (positions * attention_mask.to(torch.long)).argmax(dim=-1)
        h = hidden_states[torch.arange(batch, device=hidden_states.device), last]
        return self.linear(h.to(self.linear.weight.dtype)).squeeze(-1)
