"""Shared-prefix ("cascade") attention for sibling decoding on the CPU.

K sibling candidates continue one prompt. Forking the prompt's cache into K rows (`kv_cache.fork_cache`) copies it K
times and makes every decode step read it K times: on the 2-core machine attention over a ~700-token prompt took 3x
as long for 4 rows as for 1, and the copy itself ~20 ms. Here the prompt's keys/values stay one row, shared by every
sibling (`kv_cache.shared_prefix_cache`: views of the prefix cache, no copy); only each sibling's own tokens (its
"suffix") are kept per row. Each layer attends in two parts and merges them exactly:

- prefix: the K rows' queries are stacked as K query positions of one sequence against the one-row prefix, so its
  keys/values are read once. Every query sees the whole prefix (it precedes every sibling token).
- suffix: each row's queries against its own suffix keys/values, under the causal/padding mask's suffix columns.
- merge: with the log-sum-exp l of each part's scores, out = (e^(l_p - m) o_p + e^(l_s - m) o_s) / (e^(l_p - m) +
  e^(l_s - m)), m = max(l_p, l_s) — the softmax over the concatenated keys, computed in two blocks.

Scores are computed in float32 whatever the model's dtype. The model's attention implementation is switched to
this one only inside `shared_prefix_attention(model, cache)` (and back after); the active cache is found through a
context variable, since transformers does not pass the cache to attention functions. `supports_cascade` limits it to
decoder architectures whose attention is plain scaled dot-product with grouped keys (Llama, Mistral, Qwen2/3) and no
sliding window or soft-capping; other models keep forked caches.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Iterator

import torch

__all__ = ["CASCADE_ATTENTION", "supports_cascade", "shared_prefix_attention", "cascade_attention_forward"]

CASCADE_ATTENTION = "evorag_cascade"
_CASCADE_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
_ACTIVE: ContextVar = ContextVar("evorag_shared_prefix_cache", default=None)


def supports_cascade(model) -> bool:
    """Whether `model`'s attention is plain GQA scaled dot-product attention this module can split in two."""
    cfg = model.config.get_text_config()
    if getattr(cfg, "model_type", None) not in _CASCADE_MODEL_TYPES:
        return False
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return False
    return not getattr(cfg, "attn_logit_softcapping", None)


@cache
def _register() -> None:
    """Make CASCADE_ATTENTION known to transformers (once per process)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(CASCADE_ATTENTION, cascade_attention_forward)
    AttentionMaskInterface.register(CASCADE_ATTENTION, sdpa_mask)


@contextmanager
def shared_prefix_attention(model, cache) -> Iterator[None]:
    """Run forwards of `model` over `cache` (a `shared_prefix_cache`) with cascade attention."""
    _register()
    config = model.config.get_text_config()
    previous = config._attn_implementation
    token = _ACTIVE.set(cache)
    config._attn_implementation_internal = CASCADE_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation_internal = previous
        _ACTIVE.reset(token)


def _scores_softmax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                    visible: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale) v and the log-sum-exp of the scores, over the last two dims; `visible` (bool,
    broadcastable to the scores) masks keys out. A query that sees no key gets output 0 and lse -inf."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    weights = torch.exp(scores - lse.clamp(min=torch.finfo(scores.dtype).min))
    return torch.matmul(weights, v), lse


def cascade_attention_forward(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                              attention_mask: torch.Tensor | None, scaling: float | None = None, **kwargs):
    """transformers attention function (see the module docstring). `key`/`value` are the rows' suffix states
    [n, kv_heads, S, d] as returned by the cache's update; the shared prefix comes from the active cache."""
    cache = _ACTIVE.get()
    layer = cache.layers[module.layer_idx] if cache is not None else None
    prefix_k = getattr(layer, "prefix_keys", None)
    if prefix_k is None:  # no shared prefix here: the model's usual attention
        from evorag_core.lm.gqa_attention import grouped_sdpa_forward

        return grouped_sdpa_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    prefix_v = layer.prefix_values
    n, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else dim ** -0.5
    dtype = query.dtype
    q = query.float().reshape(n, kv_heads, groups * q_len, dim)  # head h = kv * groups + g
    # prefix: every row's queries as positions of one sequence over the one-row prefix
    qp = q.transpose(0, 1).reshape(1, kv_heads, n * groups * q_len, dim)
    out_p, lse_p = _scores_softmax(qp, prefix_k.float(), prefix_v.float(), scale, None)
    out_p = out_p.reshape(kv_heads, n, groups * q_len, dim).transpose(0, 1)
    lse_p = lse_p.reshape(kv_heads, n, groups * q_len, 1).transpose(0, 1)
    # suffix: each row over its own tokens, under the mask's suffix columns (None: causal within the suffix)
    suffix = key.shape[2]
    if attention_mask is not None:
        visible = attention_mask[..., -suffix:].bool()  # [n, 1, q, S]
        visible = visible.unsqueeze(2).expand(n, visible.shape[1], groups, q_len, suffix)
        visible = visible.reshape(n, visible.shape[1], groups * q_len, suffix)
    elif q_len > 1:
        causal = torch.ones(q_len, suffix, dtype=torch.bool, device=query.device).tril(suffix - q_len)
        visible = causal.repeat(groups, 1)
    else:
        visible = None
    out_s, lse_s = _scores_softmax(q, key.float(), value.float(), scale, visible)
    top = torch.maximum(lse_p, lse_s)
    w_p, w_s = torch.exp(lse_p - top), torch.exp(lse_s - top)
    out = (w_p * out_p + w_s * out_s) / (w_p + w_s)
    out = out.reshape(n, heads, q_len, dim).transpose(1, 2).contiguous().to(dtype)
    return out, None
