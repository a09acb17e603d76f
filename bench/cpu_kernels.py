"""The CPU kernels left to speed up rollouts: decode linears per weight format, and prompt attention per dtype.

    python -m bench.cpu_kernels [--runs 5] --out bench/results/cpu_kernels.json

One thread, the embedded model's shapes (SmolLM2-135M: 30 blocks of q, k, v, o, gate, up, down), random weights.
1. Decode linears: all 210 block linears applied once to 1 and to 4 rows (one decode step of one row / of K = 4
   siblings), each weight a separate tensor so that a step streams every weight from memory as a real step does:
   fp32; the fp16 copies the backend decodes with; bf16 copies; weight-only int8 (per output channel, bf16
   activations, `torch.ops.aten._weight_int8pack_mm`). Median milliseconds, and the largest relative error of one
   gate projection's output against fp32.
2. Prompt attention: 300 new tokens over 900 cached ones (9 query heads over 3 key/value heads, head size 64, a
   causal boolean mask), SDPA with grouped keys in fp32, fp16 and bf16: median milliseconds and the largest absolute
   difference of the output against fp32.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from tqdm import tqdm

from evorag_core.lm.half_decode import cpu_model

HIDDEN, INTER, KV, LAYERS = 576, 1536, 192, 30
SHAPES = [(HIDDEN, HIDDEN), (KV, HIDDEN), (KV, HIDDEN), (HIDDEN, HIDDEN), (INTER, HIDDEN), (INTER, HIDDEN),
          (HIDDEN, INTER)] * LAYERS  # (out, in) of every block linear


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def _int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 weight and its bf16 scales."""
    scale = (weight.abs().amax(dim=1) / 127).clamp_min(1e-12)
    return (weight / scale[:, None]).round().clamp(-127, 127).to(torch.int8), scale.to(torch.bfloat16)


def _formats(weight: torch.Tensor) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Each weight format as x (fp32) -> fp32 output, the conversions included as the backend would do them."""
    half, bf16, (w8, scale) = weight.half(), weight.bfloat16(), _int8(weight)
    return {
        "fp32": lambda x: F.linear(x, weight),
        "fp16": lambda x: F.linear(x.half(), half).float(),
        "bf16": lambda x: F.linear(x.bfloat16(), bf16).float(),
        "int8_weight_only": lambda x: torch.ops.aten._weight_int8pack_mm(x.bfloat16(), w8, scale).float(),
    }


def decode_linears(runs: int) -> dict:
    layers = [_formats(torch.randn(o, i) * i ** -0.5) for o, i in SHAPES]
    rows_out = {}
    for rows in (1, 4):
        inputs = {n: torch.randn(rows, n) for n in (HIDDEN, INTER)}
        rows_out[f"{rows}_rows_ms"] = {
            name: _median_ms(lambda name=name: [fmt[name](inputs[i]) for fmt, (_, i) in zip(layers, SHAPES)], runs)
            for name in tqdm(layers[0], desc=f"decode linears, {rows} rows")}
    x = torch.randn(4, HIDDEN)
    want = layers[4]["fp32"](x)
    rows_out["gate_relative_error"] = {name: float((fn(x) - want).abs().max() / want.abs().max())
                                       for name, fn in layers[4].items()}
    return rows_out


def prompt_attention(runs: int, new: int = 300, cached: int = 900) -> dict:
    keys = new + cached
    query, key, value = torch.randn(1, 9, new, 64) * 2, torch.randn(1, 3, keys, 64) * 2, torch.randn(1, 3, keys, 64)
    mask = torch.ones(new, keys, dtype=torch.bool)
    mask[:, cached:] = torch.ones(new, new, dtype=torch.bool).tril()
    want = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)
    out = {}
    for dtype in tqdm((torch.float32, torch.float16, torch.bfloat16), desc="prompt attention"):
        q, k, v = query.to(dtype), key.to(dtype), value.to(dtype)
        run = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # noqa: E731
        out[str(dtype).removeprefix("torch.")] = {"ms": _median_ms(run, runs),
                                                  "max_abs_diff": float((run().float() - want).abs().max())}
    return {"new_tokens": new, "cached_tokens": cached, **out}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    with torch.inference_mode():
        result = {"what": __doc__.split("\n\n")[0], "machine": f"{cpu_model()}, torch {torch.__version__}",
                  "threads": 1, "runs": args.runs, "decode_linears": decode_linears(args.runs),
                  "prompt_attention": prompt_attention(args.runs)}
    print(json.dumps(result, indent=1))
    args.out.write_text(json.dumps(result, indent=1))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
