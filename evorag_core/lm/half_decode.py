"""Half-precision weight copies for inference on the CPU: fp16 for decode steps, bf16 (optional) for prompts.

At batch 1 a decode step is a chain of matrix-vector products: its time is the time to stream every weight from
memory once. On x86-64 CPUs with F16C, MKL/oneDNN's fp16 matrix-vector kernel reads half the bytes and converts in
registers. Measured on this project's 2-core machine (AMD EPYC, fp32 streaming at ~10 GB/s; `bench/lm_speed.py`):
the linears of SmolLM2-135M's 30 blocks take 16 ms per token with fp16 copies vs 60 ms at fp32, the tied LM head
3 ms vs 11 ms. The fp16 kernels lose to fp32 from ~8 rows up (prefill: 2.4 s vs 0.5 s at 300 rows), so copies are
used only inside `half_decode(model)` (the backend's decode loop) and only for inputs of at most `max_rows` rows
(batch-1 decoding and K <= 4 batched siblings). Choice scoring, `sequence_logprob`'s continuation and everything
that needs gradients use the fp32 weights, bit for bit as before; so does prefill unless bf16 prefill (below) is on.

Numerics: fp16 keeps 11 significant bits. In the blocks each weight moves by at most 2^-11 of itself (the embedded
GGUF's 4-bit weights are far coarser: ~1/15 of a block's range) and each linear's output rounds to fp16. The LM head
is treated differently because fp16 *outputs* round logits of ~20 by up to ~0.01: each row's `exact_top` largest
logits are recomputed from the fp32 weight (a gather of that many rows), so the greedy token and the likely ones
have fp32 logits and the log-softmax normalizer is off by at most the tail's probability mass times ~0.01.
Measured: a 40-token greedy continuation's log-prob differs from the fp32 forward by ~3e-3 in total (tested).

The copy follows the weight: it is rebuilt whenever the fp32 tensor changed in place (`Tensor._version`), so a model
trained in the same process (an optimizer step, a LoRA merge) never decodes with stale weights.

Prefill with bf16 copies (`enable_half_decode(..., prefill_bf16=True)`, used by the backend when
`policy.prefill_dtype` resolves to "bfloat16"; the default "auto" does where the CPU has AVX512-BF16 or AMX, see
`resolve_prefill_dtype`). A prompt's forward is compute-bound, and with native bf16 instructions oneDNN's bf16 matrix
products beat fp32 ones. Inside `bf16_prefill(model)` the block linears (not the LM head, whose logits stay fp32)
take inputs of more than `max_rows` rows through a bf16 copy of their weight and return fp32; norms and the KV cache
stay fp32 (the backend then also runs the prompt's attention in bf16: `gqa_attention.bf16_prompt_attention`).
(Continuations scored over the prompt stay fp32: through the copies rollouts were 1.11x faster, but a continuation's
score then depended on how many tokens shared its forward and drifted ~0.1 nat over 16 tokens from the decode path's
log-prob; `rollout_throughput_bf16_scoring.json`.) Measured on a 2-core AMD Zen 4 (2 threads), an 800-token prompt:
528 tokens/s fp32, 805 with the bf16 copies (957 with the whole model in bf16, which also rounds the attention, the
cache and the logits). bf16 keeps 8 significant bits, so the prompt's keys/values move by ~2^-9 relative and the
action labels' scores by up to ~0.07 nat (tested): near-tie decisions can flip. On the first 50 HotpotQA questions
(per-question corpora) the agent made 45 of 50 predictions identical to fp32 prefill's, F1 0.0707 both (the
whole-bf16 model: 38 of 50, F1 0.0627).
"""
from __future__ import annotations

import platform
from contextlib import contextmanager
from pathlib import Path
from typing import ContextManager, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from evorag_core.config import PREFILL_DTYPES

__all__ = ["HalfDecodeLinear", "enable_half_decode", "half_decode", "bf16_prefill", "cpu_has_native_bf16", "cpu_model",
           "resolve_prefill_dtype", "DEFAULT_MAX_ROWS", "DEFAULT_EXACT_TOP"]

DEFAULT_MAX_ROWS = 4
DEFAULT_EXACT_TOP = 64


_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU advertises bf16 matrix instructions (Linux /proc/cpuinfo flags AVX512-BF16 or AMX-BF16).
    Without them oneDNN emulates bf16 and prefill would gain little or lose; elsewhere (no /proc) assume not."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return any(flag in flags for flag in _BF16_CPU_FLAGS)


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name ("model name" in /proc/cpuinfo; platform.processor() where there is none): benchmark
    figures record it, since bf16 speed in particular depends on it."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")


def resolve_prefill_dtype(setting: str, cpuinfo: str | None = None) -> str:
    """`policy.prefill_dtype` ("auto" | "float32" | "bfloat16") -> "float32" | "bfloat16"."""
    if setting not in PREFILL_DTYPES:
        raise ValueError(f"prefill dtype must be one of {', '.join(PREFILL_DTYPES)}, got {setting!r}")
    if setting == "auto":
        return "bfloat16" if cpu_has_native_bf16(cpuinfo) else "float32"
    return setting


class HalfDecodeLinear(nn.Linear):
    """An `nn.Linear` with an fp16 copy of its weight (a plain attribute, not a parameter or buffer: state dicts,
    `.to()` and peft see an ordinary Linear), used while `active` for small, gradient-free fp32 CPU inputs.
    With `exact_top` > 0 (the LM head) each row's `exact_top` largest outputs are recomputed in fp32."""

    half_weight: torch.Tensor | None
    half_version: int
    max_rows: int
    exact_top: int
    active: bool
    bf16_weight: torch.Tensor | None
    bf16_version: int
    prefill_copy: bool  # may prefill through a bf16 copy (enable_half_decode(prefill_bf16=True); not the LM head)
    prefill_active: bool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the flags are only ever set for CPU fp32 weights (enable_half_decode); the input must match them
        fast = self.active or self.prefill_active
        if fast and x.dtype == torch.float32 and x.is_cpu and not torch.is_grad_enabled():
            small = x.numel() <= self.max_rows * x.shape[-1]
            if self.active and small:
                out = F.linear(x.to(torch.float16), self._copy("half", torch.float16)).to(x.dtype)
                if self.exact_top > 0:
                    out = self._exact_top_outputs(x, out)
                return out if self.bias is None else out + self.bias
            if self.prefill_active and not small:
                out = F.linear(x.to(torch.bfloat16), self._copy("bf16", torch.bfloat16)).to(x.dtype)
                return out if self.bias is None else out + self.bias
        return F.linear(x, self.weight, self.bias)

    def _copy(self, kind: str, dtype: torch.dtype) -> torch.Tensor:
        """The `dtype` copy of the weight (attribute `<kind>_weight`), rebuilt when the weight changed in place."""
        weight, version = getattr(self, f"{kind}_weight"), getattr(self, f"{kind}_version")
        if weight is None or version != self.weight._version:
            with torch.inference_mode(False), torch.no_grad():
                weight = self.weight.detach().to(dtype)
            setattr(self, f"{kind}_weight", weight)
            setattr(self, f"{kind}_version", self.weight._version)
        return weight

    def _exact_top_outputs(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Overwrite each row's `exact_top` largest outputs with their fp32 values ([rows, k, in] @ [rows, in])."""
        flat_x, flat_out = x.reshape(-1, x.shape[-1]), out.reshape(-1, out.shape[-1])
        top = flat_out.topk(min(self.exact_top, flat_out.shape[-1]), dim=-1).indices
        exact = torch.bmm(self.weight[top], flat_x.unsqueeze(-1)).squeeze(-1)
        return flat_out.scatter_(-1, top, exact).reshape(out.shape)


def enable_half_decode(model: nn.Module, max_rows: int = DEFAULT_MAX_ROWS, exact_top: int = DEFAULT_EXACT_TOP,
                       *, prefill_bf16: bool = False) -> int:
    """Give every plain fp32 CPU `nn.Linear` of `model` an fp16 decode copy (LoRA's own small A/B layers excepted);
    the output embedding also gets `exact_top`. With `prefill_bf16`, every converted linear but the output embedding
    may also prefill through a bf16 copy. Returns how many were converted (0 for a model on a GPU or in another
    dtype). The copies stay unused (and unmade) until `half_decode(model)` / `bf16_prefill(model)` turn them on."""
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
        module.bf16_weight, module.bf16_version = None, -1
        module.prefill_copy, module.prefill_active = prefill_bf16 and module is not head, False
        converted += 1
    return converted


@contextmanager
def _switched_on(modules: list[HalfDecodeLinear], flag: str) -> Iterator[int]:
    """Set boolean attribute `flag` on `modules` for the block (and back off after it); yields how many."""
    for m in modules:
        setattr(m, flag, True)
    try:
        yield len(modules)
    finally:
        for m in modules:
            setattr(m, flag, False)


def half_decode(model: nn.Module) -> ContextManager[int]:
    """Inside the block, `model`'s `HalfDecodeLinear`s use their fp16 copies; yields how many there are."""
    return _switched_on([m for m in model.modules() if isinstance(m, HalfDecodeLinear) and m.weight.is_cpu], "active")


def bf16_prefill(model: nn.Module) -> ContextManager[int]:
    """Inside the block, `model`'s linears enabled with `prefill_bf16` run inputs of more than `max_rows` rows
    through their bf16 copies; yields how many do."""
    modules = [m for m in model.modules() if isinstance(m, HalfDecodeLinear) and m.prefill_copy and m.weight.is_cpu]
    return _switched_on(modules, "prefill_active")
