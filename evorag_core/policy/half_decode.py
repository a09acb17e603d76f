"""Decode steps with half-precision weight copies on the CPU.

At batch 1 a decode step is a chain of matrix-vector products: its time is the time to stream every weight from
memory once. On x86-64 CPUs with F16C, MKL/oneDNN's fp16 matrix-vector kernel reads half the bytes and converts in
registers. Measured on this project's 2-core machine (AMD EPYC, fp32 streaming at ~10 GB/s; `bench/lm_speed.py`):
the linears of SmolLM2-135M's 30 blocks take 16 ms per token with fp16 copies vs 60 ms at fp32, the tied LM head
3 ms vs 11 ms. The fp16 kernels lose to fp32 from ~8 rows up (prefill: 2.4 s vs 0.5 s at 300 rows), so copies are
used only inside `half_decode(model)` (the backend's decode loop) and only for inputs of at most `max_rows` rows
(batch-1 decoding and K <= 4 batched siblings). Prefill, choice scoring, `sequence_logprob` and everything that
needs gradients use the fp32 weights, bit for bit as before.

Numerics: fp16 keeps 11 significant bits. In the blocks each weight moves by at most 2^-11 of itself (the embedded
GGUF's 4-bit weights are far coarser: ~1/15 of a block's range) and each linear's output rounds to fp16. The LM head
is treated differently because fp16 *outputs* round logits of ~20 by up to ~0.01: each row's `exact_top` largest
logits are recomputed from the fp32 weight (a gather of that many rows), so the greedy token and the likely ones
have fp32 logits and the log-softmax normalizer is off by at most the tail's probability mass times ~0.01.
Measured: a 40-token greedy continuation's log-prob differs from the fp32 forward by ~3e-3 in total (tested).

The copy follows the weight: it is rebuilt whenever the fp32 tensor changed in place (`Tensor._version`), so a model
trained in the same process (an optimizer step, a LoRA merge) never decodes with stale weights.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["HalfDecodeLinear", "enable_half_decode", "half_decode", "DEFAULT_MAX_ROWS", "DEFAULT_EXACT_TOP"]

DEFAULT_MAX_ROWS = 4
DEFAULT_EXACT_TOP = 64


class HalfDecodeLinear(nn.Linear):
    """An `nn.Linear` with an fp16 copy of its weight (a plain attribute, not a parameter or buffer: state dicts,
    `.to()` and peft see an ordinary Linear), used while `active` for small, gradient-free fp32 CPU inputs.
    With `exact_top` > 0 (the LM head) each row's `exact_top` largest outputs are recomputed in fp32."""

    half_weight: torch.Tensor | None
    half_version: int
    max_rows: int
    exact_top: int
    active: bool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._use_half(x):
            return F.linear(x, self.weight, self.bias)
        out = F.linear(x.to(torch.float16), self._current_half()).to(x.dtype)
        if self.exact_top > 0:
            out = self._exact_top_outputs(x, out)
        return out if self.bias is None else out + self.bias

    def _use_half(self, x: torch.Tensor) -> bool:
        # `active` is only ever set for CPU fp32 weights (enable_half_decode); the input must match them
        return (
            self.active
            and x.numel() <= self.max_rows * x.shape[-1]
            and x.dtype == torch.float32
            and x.is_cpu
            and not torch.is_grad_enabled()
        )

    def _current_half(self) -> torch.Tensor:
        if self.half_weight is None or self.half_version != self.weight._version:
            with torch.inference_mode(False), torch.no_grad():
                self.half_weight = self.weight.detach().to(torch.float16)
            self.half_version = self.weight._version
        return self.half_weight

    def _exact_top_outputs(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Overwrite each row's `exact_top` largest outputs with their fp32 values ([rows, k, in] @ [rows, in])."""
        flat_x, flat_out = x.reshape(-1, x.shape[-1]), out.reshape(-1, out.shape[-1])
        top = flat_out.topk(min(self.exact_top, flat_out.shape[-1]), dim=-1).indices
        exact = torch.bmm(self.weight[top], flat_x.unsqueeze(-1)).squeeze(-1)
        return flat_out.scatter_(-1, top, exact).reshape(out.shape)


def enable_half_decode(model: nn.Module, max_rows: int = DEFAULT_MAX_ROWS, exact_top: int = DEFAULT_EXACT_TOP) -> int:
    """Give every plain fp32 CPU `nn.Linear` of `model` an fp16 decode copy (LoRA's own small A/B layers excepted);
    the output embedding also gets `exact_top`. Returns how many were converted (0 for a model on a GPU or in another
    dtype). The copies stay unused until `half_decode(model)` turns them on."""
    if max_rows < 1 or exact_top < 0:
        raise ValueError(f"need max_rows >= 1 and exact_top >= 0, got {max_rows}, {exact_top}")
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    converted = 0
    for name, module in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if type(module) is not nn.Linear or leaf.startswith("lora_"):
            continue
        if module.weight.device.type != "cpu" or module.weight.dtype != torch.float32:
            continue
        module.__class__ = HalfDecodeLinear
        module.half_weight, module.half_version, module.max_rows = None, -1, max_rows
        module.exact_top = exact_top if module is head else 0
        module.active = False
        converted += 1
    return converted


@contextmanager
def half_decode(model: nn.Module) -> Iterator[int]:
    """Inside the block, `model`'s `HalfDecodeLinear`s use their fp16 copies; yields how many there are."""
    modules = [m for m in model.modules() if isinstance(m, HalfDecodeLinear) and m.weight.is_cpu]
    for m in modules:
        m.active = True
    try:
        yield len(modules)
    finally:
        for m in modules:
            m.active = False
