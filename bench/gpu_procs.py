"""How many worker processes should share one GPU? The agent's episodes are batch-1 forward passes of a 135M model,
bound by kernel launches on the CPU (bench/gpu_check: ~10 % of a decode step is GPU time), so several processes
can share the GPU. This measures the aggregate rate of one episode-like unit of work (a prefill of `--prompt`
tokens, then `--decode` greedy tokens on its KV cache) with 1, 2, ... processes working at once.

    python -m bench.gpu_procs --device cuda --procs 12 --levels 1,4,8,12 --seconds 5 --out procs.json
    python -m bench.gpu_procs --device cpu --procs 2 --levels 1,2 --seconds 1 --layers 2   # a smoke run

The model is a randomly initialised SmolLM2-135M (its shapes are built in: no files, nothing downloaded); its speed
is the real model's. `--procs` processes start once and each loads the model; then for each level L the first L of
them work for `--seconds` while the others wait (one torch thread each). `--mps` starts NVIDIA's Multi-Process
Service first (`nvidia-cuda-mps-control -d`; left running for the processes that follow, `--mps-stop` stops it
after). Writes JSON: units per second at each level, and each level's speed-up over one process.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)


def _worker(rank: int, args: dict[str, Any], start: Any, done: Any, results: Any) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(rank)
    device = torch.device(args["device"])
    config = LlamaConfig(**{**SMOLLM2_135M, "num_hidden_layers": args["layers"]})
    model = LlamaForCausalLM(config).to(device).eval()
    prompt = torch.randint(0, config.vocab_size, (1, args["prompt"]), device=device)

    def unit() -> None:
        with torch.no_grad():
            out = model(input_ids=prompt, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            for _ in range(args["decode"]):
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            token.item()  # waits for the device

    unit()
    unit()
    results.put(("ready", rank, 0, 0.0))
    for level in args["levels"]:
        start.wait()
        if rank < level:
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args["seconds"]:
                unit()
                n += 1
            results.put(("level", rank, n, time.perf_counter() - t0))
        done.wait()


def measure(device: str, procs: int, levels: list[int], seconds: float, prompt: int, decode: int,
            layers: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")  # CUDA cannot be used in forked children
    start, done = ctx.Barrier(procs + 1), ctx.Barrier(procs + 1)
    results = ctx.Queue()
    args = dict(device=device, levels=levels, seconds=seconds, prompt=prompt, decode=decode, layers=layers)
    workers = [ctx.Process(target=_worker, args=(r, args, start, done, results), daemon=True) for r in range(procs)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()

    def collect(n: int) -> list:
        got = []
        while len(got) < n:  # a worker that died (an import error, CUDA out of memory) ends the measurement
            try:
                got.append(results.get(timeout=5))
            except queue.Empty:
                dead = [w.exitcode for w in workers if not w.is_alive()]
                if dead:
                    raise RuntimeError(f"{len(dead)} worker(s) exited (codes {dead}) before reporting")
        return got

    collect(procs)
    ready_s = time.perf_counter() - t0
    out = []
    for level in levels:
        start.wait(timeout=120)
        rows = collect(level)
        done.wait(timeout=120)
        units = sum(r[2] for r in rows)
        rate = sum(r[2] / r[3] for r in rows)
        out.append({"level": level, "units": units, "units_per_s": round(rate, 3),
                    "per_process_units_per_s": round(rate / level, 3)})
    for w in workers:
        w.join(timeout=60)
    one = next((r["units_per_s"] for r in out if r["level"] == 1), None)
    for r in out:
        r["speedup_vs_1"] = round(r["units_per_s"] / one, 2) if one else None
    return {"ready_s": round(ready_s, 1), "levels": out}


def start_mps() -> str | None:
    """Start the MPS control daemon; returns None when it runs, else why not."""
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        return "nvidia-cuda-mps-control is not on PATH"
    r = subprocess.run([exe, "-d"], capture_output=True, text=True, timeout=30)
    return None if r.returncode == 0 else f"exit {r.returncode}: {r.stderr.strip()[:300]}"


def stop_mps() -> None:
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe:
        subprocess.run([exe], input="quit\n", capture_output=True, text=True, timeout=30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--procs", type=int, default=12)
    p.add_argument("--levels", default="1,4,8,12")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--prompt", type=int, default=900, help="prefill tokens per unit (an agent prompt's length)")
    p.add_argument("--decode", type=int, default=16, help="greedy tokens per unit")
    p.add_argument("--layers", type=int, default=30, help="decoder layers (30: SmolLM2-135M; fewer for a smoke run)")
    p.add_argument("--mps", action="store_true", help="start NVIDIA MPS first")
    p.add_argument("--mps-stop", action="store_true", help="stop MPS after measuring")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    levels = sorted({int(x) for x in args.levels.split(",")})
    if levels[-1] > args.procs:
        p.error("a level exceeds --procs")
    report: dict[str, Any] = {"device": args.device, "procs": args.procs, "prompt": args.prompt,
                              "decode": args.decode, "layers": args.layers, "seconds": args.seconds,
                              "mps": args.mps}
    if args.mps:
        report["mps_error"] = start_mps()
    try:
        if not report.get("mps_error"):  # without the daemon the run would measure the plain case again
            report.update(measure(args.device, args.procs, levels, args.seconds, args.prompt, args.decode,
                                  args.layers))
    finally:
        if args.mps and args.mps_stop:
            stop_mps()
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
