"""Reduce per-token values to one number per sequence (masked mean), then to a batch mean.

Losses in this package accept either per-sequence tensors `[B]` or per-token tensors `[B, T]` with a 0/1
mask `[B, T]`; `sequence_mean` is the one place that knows the difference.
"""
from __future__ import annotations

from torch import Tensor

__all__ = ["per_sequence", "sequence_mean"]


def per_sequence(x: Tensor, mask: Tensor | None) -> Tensor:
    """`[B]` -> `[B]` unchanged; `[B, T]` with mask -> masked mean over T per row (a row with no token gives 0)."""
    if mask is None:
        if x.dim() != 1:
            raise ValueError(f"per-token values of shape {tuple(x.shape)} need a mask; pass mask=[B, T]")
        return x
    if mask.shape != x.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match values shape {tuple(x.shape)}")
    m = mask.to(x.dtype)
    return (x * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)


def sequence_mean(x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Mean over sequences of the per-sequence (masked) token mean: every sequence weighs the same."""
    return per_sequence(x, mask).mean()
