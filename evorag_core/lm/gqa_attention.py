"""Grouped-query attention without copied keys for masked CPU forwards.

transformers' "sdpa" attention expands a grouped-query model's keys and values to every query head (`repeat_kv`, a
copy) whenever a forward has more than one query token and an attention mask, unless the device is one it trusts
with SDPA's own grouped-query path (CUDA, XPU and MPS only, and CUDA only without a mask). PyTorch's CPU SDPA
kernel takes grouped keys as they are, so the copy is not needed: scoring 2-16 tokens in one row over a cached
~900-token prompt (block mask, no gradients, one thread, SmolLM2-135M) is 1.07-1.18x faster without it, with the
same log-probs (`bench/masked_forward.py`). Those forwards are the policy's label scores, its argument log-probs and
the reader's span scores. (A first micro-benchmark, run with autograd recording, showed 4-7x; every scoring path
runs in inference mode, where the figure is the one above.)

`use_grouped_sdpa(model)` switches a CPU model's "sdpa" attention to `GROUPED_SDPA`: forwards without gradients
with several query tokens and a mask call SDPA with `enable_gqa=True`; every other forward (training, one query
token, no mask, position biases) is transformers' own `sdpa_attention_forward`, unchanged.

Prompt attention in bf16 (`bf16_prompt_attention()`, entered by the backend around its prompt forwards when
`policy.prefill_dtype` resolves to "bfloat16"): inside it, gradient-free fp32 CPU forwards of several query tokens
attend over bf16 copies of their queries, keys and values (SDPA's flash kernel, fp32 accumulation) and return fp32;
the KV cache keeps its fp32 values. Causal prompts without a mask take the same path (`is_causal`), so a prompt's
states do not depend on whether an earlier prefix was cached. On this project's Xeon (AMX, one thread) 300 new
tokens over 900 cached take 3.3 ms a layer instead of 8.3 (`bench/cpu_kernels.py`), and a whole prompt forward
0.37 s instead of 0.52: prompt forwards are the largest share of a rollout (`docs/promotion.md`).
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Iterator

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

__all__ = ["GROUPED_SDPA", "bf16_prompt_attention", "grouped_sdpa_forward", "use_grouped_sdpa"]

GROUPED_SDPA = "evorag_grouped_sdpa"
_BF16_PROMPTS: ContextVar[bool] = ContextVar("evorag_bf16_prompt_attention", default=False)


@cache
def _register() -> None:
    """Make GROUPED_SDPA known to transformers (once per process), with sdpa's masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)


def use_grouped_sdpa(model) -> bool:
    """Switch `model` (on the CPU, attention "sdpa", grouped keys) to GROUPED_SDPA; whether it was switched."""
    config = model.config.get_text_config()
    param = next(model.parameters())
    groups = getattr(config, "num_attention_heads", 0) // max(getattr(config, "num_key_value_heads", 0) or 1, 1)
    if param.device.type != "cpu" or config._attn_implementation != "sdpa" or groups <= 1:
        return False
    _register()
    config._attn_implementation_internal = GROUPED_SDPA
    return True


@contextmanager
def bf16_prompt_attention() -> Iterator[None]:
    """Inside the block, GROUPED_SDPA forwards of several query tokens attend in bf16 (see the module docstring)."""
    token = _BF16_PROMPTS.set(True)
    try:
        yield
    finally:
        _BF16_PROMPTS.reset(token)


def grouped_sdpa_forward(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         **kwargs) -> tuple[torch.Tensor, None]:
    """transformers attention function: query [b, heads, q, d], key/value [b, kv_heads, k, d] (not repeated)."""
    grouped = getattr(module, "num_key_value_groups", 1) > 1
    plain = (query.shape[2] > 1 and not torch.is_grad_enabled() and query.device.type == "cpu"
             and kwargs.get("position_bias") is None and kwargs.get("softcap") is None)
    if plain and query.dtype == torch.float32 and _BF16_PROMPTS.get():
        return _bf16_attention(module, query, key, value, attention_mask, scaling, grouped, kwargs)
    if not (plain and grouped and attention_mask is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


def _bf16_attention(module, query, key, value, attention_mask, scaling, grouped, kwargs) -> tuple[torch.Tensor, None]:
    """fp32 query/key/value attended over bf16 copies; fp32 output [b, q, heads, d]. A mask-less forward is causal
    as in transformers' sdpa (`is_causal` from the call or the module)."""
    half = [t.to(torch.bfloat16) for t in (query, key, value)]
    mask = attention_mask
    if mask is not None and mask.is_floating_point():
        mask = mask.clamp(min=torch.finfo(torch.bfloat16).min).to(torch.bfloat16)
    causal = kwargs.get("is_causal")
    causal = mask is None and (getattr(module, "is_causal", True) if causal is None else causal)
    out = torch.nn.functional.scaled_dot_product_attention(
        *half, attn_mask=mask, is_causal=bool(causal), scale=scaling, enable_gqa=grouped
    )
    return out.transpose(1, 2).contiguous().to(query.dtype), None
