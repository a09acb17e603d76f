"""Scoring continuations over a cached prompt: transformers' sdpa (keys copied to every head) against the grouped-key
attention of `evorag_core/lm/gqa_attention.py`, on the embedded model.

    python -m bench.masked_forward [--prompt-words 900] [--tokens 1,2,4,8,16,64] [--runs 5] --out JSON

One thread. A prompt of `--prompt-words` words is prefilled once; then, for each count, one continuation of that
many tokens is scored in one row over the cached prompt (`TransformersBackend._block_logprobs`, the block-masked
forward of label, argument and span scores), `--runs` times; the median milliseconds with each attention and the
log-probs' largest difference between the two.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from tqdm import tqdm

from evorag_core.config import PolicyConfig, home_dir
from evorag_core.lm.gqa_attention import GROUPED_SDPA
from evorag_core.lm.hf_backend import TransformersBackend


def _time(backend: TransformersBackend, prompt_len: int, conts: list[list[int]], runs: int) -> tuple[float, float]:
    """(median ms, log-prob) of scoring `conts` over the cached prompt."""
    times, value = [], 0.0
    with torch.inference_mode():
        for _ in range(runs):
            start = time.perf_counter()
            value = backend._block_logprobs(prompt_len, conts)[0]
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), value


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt-words", type=int, default=900)
    ap.add_argument("--tokens", default="1,2,4,8,16,64")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    backend = TransformersBackend(PolicyConfig(device="cpu", threads=1), home_dir())
    if not backend.grouped_sdpa:
        raise SystemExit("the backend did not switch to grouped-key attention (not a CPU sdpa model with grouped keys)")
    config = backend.model.config.get_text_config()
    ids = backend.encode("word " * args.prompt_words)
    with torch.inference_mode():
        backend._prefill(ids)
    rows = []
    for n in tqdm([int(t) for t in args.tokens.split(",")], desc="tokens"):
        conts = [[100 + i for i in range(n + 1)]]
        config._attn_implementation_internal = "sdpa"
        copied_ms, copied = _time(backend, len(ids), conts, args.runs)
        config._attn_implementation_internal = GROUPED_SDPA
        grouped_ms, grouped = _time(backend, len(ids), conts, args.runs)
        rows.append({"tokens": n, "sdpa_ms": round(copied_ms, 1), "grouped_ms": round(grouped_ms, 1),
                     "speedup": round(copied_ms / grouped_ms, 2), "logprob_abs_diff": abs(copied - grouped)})
        print(json.dumps(rows[-1]))
    out = {"what": __doc__.split("\n\n")[0], "prompt_tokens": len(ids), "runs": args.runs, "threads": 1,
           "model": backend.model_id, "machine": f"{platform.processor() or platform.machine()}, torch "
           f"{torch.__version__}", "rows": rows}
    args.out.write_text(json.dumps(out, indent=1))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
