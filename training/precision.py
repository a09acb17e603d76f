"""Training precision: `train.dtype` ("auto" | "float32" | "bfloat16") resolved for the device a round runs on.

bf16 only pays where the hardware multiplies bf16 natively. On a CPU without AVX512-BF16 / AMX oneDNN is not used
for bf16 and PyTorch falls back to its reference GEMM loop: measured 2026-11-25 on a 2-core AMD EPYC (AVX2) with
torch 2.13 CPU, one thread, a 256x1536 @ 1536x576 product (the MLP's backward shape) took 0.223 s in bf16 against
0.008 s in fp32 (28x), and a DPO step on SmolLM2-135M (4 pairs x 512 tokens, gradient checkpointing) did not finish
in 4 minutes in bf16 against 40 s in fp32 (`python -m bench.dpo`). On an Intel Xeon with AMX the same round
ran at 19 s per step in bf16 (bench/results/learning.json, 2026-11-24). So "auto" picks bf16 only where it is native
and an explicit "bfloat16" on an emulating CPU is kept (the user asked for it) with a warning naming the cost.
"""
from __future__ import annotations

import functools
import logging

import torch

from evorag_core.config import TRAIN_DTYPES
from evorag_core.lm.half_decode import cpu_has_native_bf16

__all__ = ["resolve_train_dtype", "native_bf16"]

log = logging.getLogger("evorag.train")


def native_bf16(device_type: str, cpuinfo: str | None = None) -> bool:
    """Whether `device_type` ("cpu", "cuda", ...) multiplies bf16 natively (CUDA: compute capability >= 8.0)."""
    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False))
    if device_type == "cpu":
        return cpu_has_native_bf16(cpuinfo)
    return False


def resolve_train_dtype(setting: str, device_type: str, cpuinfo: str | None = None) -> str:
    """`train.dtype` -> "float32" | "bfloat16" for a round on `device_type`; warns when bf16 would be emulated."""
    if setting not in TRAIN_DTYPES:
        raise ValueError(f"train.dtype must be one of {', '.join(TRAIN_DTYPES)}, got {setting!r}")
    if setting == "auto":
        return "bfloat16" if native_bf16(device_type, cpuinfo) else "float32"
    if setting == "bfloat16" and not native_bf16(device_type, cpuinfo):
        _warn_emulated(device_type)
    return setting


@functools.cache
def _warn_emulated(device_type: str) -> None:
    """Once per process and device type: the autocast context is entered at every training step."""
    log.warning("train.dtype=bfloat16 on a %s without native bf16 matrix instructions: PyTorch emulates it, "
                "measured up to 28x slower per matrix product than float32; set train.dtype=auto or float32",
                device_type)
