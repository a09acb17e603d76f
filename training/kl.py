"""Per-token KL estimators between the policy and the reference policy.

With log r = log π_ref(a) − log π_θ(a) for actions sampled from π_θ:
- k3 (Schulman, "Approximating KL divergence"): r − log r − 1 — unbiased, always ≥ 0;
- k2 (ARENA's stable choice): ½ (log r)² — biased but low variance, always ≥ 0.
Both are elementwise; reduce them with `training.reduce.sequence_mean`.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

__all__ = ["kl_k3", "kl_k2", "KL_ESTIMATORS", "kl_estimator"]


def kl_k3(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """r − log r − 1 with r = exp(logp_ref − logp); computed as expm1(log r) − log r for accuracy near r = 1."""
    log_r = logp_ref - logp
    return torch.expm1(log_r) - log_r


def kl_k2(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """½ (log r)² with log r = logp_ref − logp."""
    return 0.5 * (logp_ref - logp).pow(2)


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"k3": kl_k3, "k2": kl_k2}


def kl_estimator(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    """The estimator called `name` ("k3" or "k2"); anything else raises ValueError."""
    try:
        return KL_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown KL estimator {name!r}; expected one of {sorted(KL_ESTIMATORS)}") from None
