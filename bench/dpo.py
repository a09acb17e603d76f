"""CPU cost of one DPO step on the embedded policy model: seconds per step and peak memory.

    python -m bench.dpo --max-length 512 --dtype float32 --batch 4 [--grad-ckpt] [--steps 2]
    python -m bench.dpo --grid        # every setting in GRID, each in a fresh process (clean peak RSS)

Pairs are real HotpotQA dev questions with their passages in a ChatML agent prompt, long enough that every
sequence is cut to max_length; completions are "SEARCH: …" vs "ANSWER: …". Prints one JSON line per setting.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main"]

GRID = [
    (length, dtype, ckpt, 4) for length in (512, 256) for dtype in ("float32", "bfloat16") for ckpt in (False, True)
] + [(512, "float32", False, 2), (512, "bfloat16", True, 2)]
ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT.parent / "shared" / "benchmarks"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pairs(tokenizer, n: int):
    from training.objectives.dpo.data import PairExample

    rows = [json.loads(line) for line in (BENCHMARKS / "hotpotqa_dev300.jsonl").open(encoding="utf-8")][:n]
    pairs = []
    for row in rows:
        passages = "\n".join(f"[{i + 1}] {p['title']}: {p['text']}" for i, p in enumerate(row["passages"]))
        messages = [
            {"role": "system", "content": "You answer multi-hop questions. Reply SEARCH: <query>, BACKTRACK, "
                                          "ANSWER: <answer> or REFUSE."},
            {"role": "user", "content": f"Question: {row['question']}\nRetrieved passages:\n{passages}"},
        ]
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        pairs.append(PairExample(prompt, f"SEARCH: {row['question'][:60]}", f"ANSWER: {row['answers'][0]}"))
    return pairs


def run_one(max_length: int, dtype: str, grad_ckpt: bool, batch: int, steps: int, threads: int) -> dict:
    import torch

    from evorag_core.config import TrainConfig
    from evorag_core.lm.half_decode import cpu_has_native_bf16, cpu_model
    from evorag_core.lm.loading import load_model

    from training.objectives.dpo.trainer import train_dpo

    torch.set_num_threads(threads)
    home = Path(os.environ.get("EVORAG_HOME", ".evorag"))
    model, tokenizer, folder = load_model("embedded", home, device="cpu")
    rss_loaded = _rss_mb()
    cfg = dataclasses.replace(TrainConfig(), max_length=max_length, dtype=dtype, gradient_checkpointing=grad_ckpt,
                              batch_size=batch, epochs=1)
    with tempfile.TemporaryDirectory() as tmp:
        result = train_dpo(_pairs(tokenizer, batch * steps), model, tokenizer, cfg, Path(tmp) / "a", None, None,
                           base_model_id=str(folder))
    marks = [h["elapsed_s"] for h in result.history if "loss" in h]
    later = [b - a for a, b in zip(marks, marks[1:])]
    cpu = [h["cpu_s"] for h in result.history if "loss" in h]
    cpu_later = [b - a for a, b in zip(cpu, cpu[1:])]
    return {
        "max_length": max_length, "dtype": dtype, "grad_ckpt": grad_ckpt, "batch": batch, "steps": result.steps,
        "threads": threads, "first_step_s": round(marks[0], 1),
        "later_step_s": round(sum(later) / len(later), 1) if later else None,
        "first_step_cpu_s": round(cpu[0], 1),
        "later_step_cpu_s": round(sum(cpu_later) / len(cpu_later), 1) if cpu_later else None,
        "rss_after_load_mb": round(rss_loaded), "peak_rss_mb": round(result.peak_rss_mb),
        "truncated": result.truncated, "first_loss": round(result.metrics["first_loss"], 4),
        "cpu_model": cpu_model(), "native_bf16": cpu_has_native_bf16(),
        "load_avg_1m": round(os.getloadavg()[0], 1),  # other work on the machine inflates the step times
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="float32")
    parser.add_argument("--grad-ckpt", action="store_true")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--grid", action="store_true", help="run every GRID setting in its own process")
    args = parser.parse_args(argv)
    if not args.grid:
        started = time.perf_counter()
        record = run_one(args.max_length, args.dtype, args.grad_ckpt, args.batch, args.steps, args.threads)
        record["total_s"] = round(time.perf_counter() - started, 1)
        print(json.dumps(record), flush=True)
        return
    for length, dtype, ckpt, batch in GRID:
        cmd = [sys.executable, "-m", "bench.dpo", "--max-length", str(length), "--dtype", dtype,
               "--batch", str(batch), "--steps", str(args.steps), "--threads", str(args.threads)]
        subprocess.run(cmd + (["--grad-ckpt"] if ckpt else []), check=True)


if __name__ == "__main__":
    main()
