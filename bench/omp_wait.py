"""OpenMP's wait policy for torch on a small shared machine: LM generation with 2 torch threads, alone and beside a
second process doing the same, with OMP_WAIT_POLICY unset (libgomp spins) and PASSIVE (it sleeps).

    python -m bench.omp_wait [--model embedded] [--threads 2] [--repeats 3] [--tokens 24]
                             [--out bench/results/omp_wait.json]

Each measurement is a fresh process (the policy is read when torch loads libgomp): it loads the model, generates one
warm-up continuation, then `--repeats` greedy continuations of `--tokens` tokens of a ~300-token prompt, and reports
the wall seconds and the CPU seconds of that loop. "contended" runs two such processes at once; their mean is
reported. The JSON holds every process's figures, the host's CPU count and the load average before each case.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.record import settings, write_json

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("default", "PASSIVE")


def child(args: argparse.Namespace) -> None:
    import resource

    import torch

    from evorag_core.config import PolicyConfig, home_dir
    from evorag_core.lm.hf_backend import TransformersBackend

    torch.set_num_threads(args.threads)
    backend = TransformersBackend(PolicyConfig(model=args.model, device="cpu", threads=args.threads), home_dir())
    prompt = backend.chat_prompt("You are a helpful assistant.", "Describe the river Thames in a few sentences. " * 20)
    backend.generate(prompt, args.tokens)
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for i in range(args.repeats):
        backend.generate(f"{prompt}{i}", args.tokens)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(json.dumps({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}))


def run_case(args: argparse.Namespace, policy: str, processes: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("OMP_NUM_THREADS", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    argv = [sys.executable, "-m", "bench.omp_wait", "--child", "--model", args.model, "--threads", str(args.threads),
            "--repeats", str(args.repeats), "--tokens", str(args.tokens)]
    load = os.getloadavg()[0]
    procs = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for _ in range(processes)]
    runs = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a measuring process failed (exit {p.returncode})")
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return {"policy": policy, "processes": processes, "load_avg_before": round(load, 2), "runs": runs,
            "wall_s": round(sum(r["wall_s"] for r in runs) / len(runs), 2),
            "cpu_s": round(sum(r["cpu_s"] for r in runs) / len(runs), 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "omp_wait.json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    cases = [run_case(args, policy, n) for n in (1, 2) for policy in POLICIES]
    for c in cases:
        print(f"{'alone' if c['processes'] == 1 else 'contended':<9} {c['policy']:<8} wall {c['wall_s']:6.2f} s  "
              f"CPU {c['cpu_s']:6.2f} s  (load before {c['load_avg_before']})")
    write_json(args.out, {"settings": settings(args, lambda k: k == "child"), "cpus": os.cpu_count(), "cases": cases})
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
