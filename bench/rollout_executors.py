"""Rollout executors side by side: `evorag rollout --executor local --workers N` (a process pool) against
`--executor ray --workers N` (local Ray actors) with the embedded SmolLM2-135M policy on the same HotpotQA
questions. Reports pairs/minute of each run (runs alternate, pool first, `--repeats` times each, so a load change on
the machine hits both), the ratio of the medians, and whether every run stored the same episodes and pairs.

    python -m bench.rollout_executors [--questions 0:8] [--workers 2] [--threads 1] [--repeats 2]
                                      [--corpus pooled|per-question] [--home DIR] [--out bench/results/rollout_executors.json]

Each run is a fresh `evorag rollout` process writing its own SQLite file; its wall time includes starting the workers
(model and index load), as a user's run would. Target (#28): Ray within 10 % of the pool's pairs/minute, same pairs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "benchmarks" / "hotpotqa_dev300.jsonl"


def _run(args: argparse.Namespace, executor: str, db: Path) -> dict[str, Any]:
    lo, hi = (int(x) for x in args.questions.split(":"))
    argv = [sys.executable, "-m", "evorag_core.cli.main", "rollout", "--data", str(DATA), "--home", str(args.home),
            "--db", f"sqlite:///{db}", "--offset", str(lo), "--limit", str(hi - lo), "--executor", executor,
            "--workers", str(args.workers), "--threads", str(args.threads), "--json",
            "--set", f"env.corpus={args.corpus}", "--set", "policy.device=cpu",
            "--set", f"policy.passage_chars={args.passage_chars}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT),
               OMP_NUM_THREADS=str(args.threads))
    load0, start = os.getloadavg()[0], time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{executor} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"executor": executor, "wall_s": round(wall, 1), "pairs": out["pairs"], "episodes": out["episodes"],
            "pairs_per_minute": round(out["pairs"] / (wall / 60), 2), "load_avg_start": load0,
            "load_avg_end": os.getloadavg()[0], "db": str(db)}


def _stored(db: Path) -> dict[str, Any]:
    from evorag_core.store import open_store

    with open_store(f"sqlite:///{db}") as store:
        episodes = sorted(store.list_episodes(limit=None), key=lambda e: e.id)
        pairs = sorted(store.list_pairs(limit=None), key=lambda p: p.id)
        return {"episodes": [(e.question_id, e.total_return, e.answer) for e in episodes],
                "pairs": [(p.prompt, p.chosen, p.rejected, round(p.margin or 0.0, 9)) for p in pairs]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", default="0:8", help="slice START:STOP of the HotpotQA dev sample")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each executor (alternating)")
    ap.add_argument("--corpus", choices=["pooled", "per-question"], default="pooled")
    ap.add_argument("--passage-chars", type=int, default=120)
    ap.add_argument("--home", type=Path, default=ROOT / ".evorag" / "bench-executors")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rollout_executors.json")
    args = ap.parse_args(argv)
    args.home.mkdir(parents=True, exist_ok=True)
    runs_dir = args.home / "executor-runs"
    runs_dir.mkdir(exist_ok=True)
    runs = []
    for r in range(args.repeats):
        for executor in ("local", "ray"):
            db = runs_dir / f"{executor}-{r}-{int(time.time())}.db"
            run = _run(args, executor, db)
            print(f"{executor:5s} run {r}: {run['episodes']} episodes, {run['pairs']} pairs in {run['wall_s']} s "
                  f"= {run['pairs_per_minute']} pairs/min (load {run['load_avg_start']:.1f})", flush=True)
            runs.append(run)
    stored = [_stored(Path(run["db"])) for run in runs]
    median = {e: statistics.median(r["pairs_per_minute"] for r in runs if r["executor"] == e) for e in ("local", "ray")}
    result = {
        "bench": "rollout_executors", "questions": args.questions, "workers": args.workers, "threads": args.threads,
        "corpus": args.corpus, "runs": runs, "median_pairs_per_minute": median,
        "ray_over_pool": round(median["ray"] / median["local"], 3) if median["local"] else None,
        "same_pairs_every_run": all(s == stored[0] for s in stored[1:]),
        "target": "ray pairs/min within 10 % of the pool's; the same pairs for a fixed seed",
        "cpus": os.cpu_count(),
    }
    result["ray_within_10_percent"] = result["ray_over_pool"] is not None and result["ray_over_pool"] >= 0.9
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"median pairs/min: pool {median['local']}, ray {median['ray']} (ratio {result['ray_over_pool']}); "
          f"same pairs in every run: {result['same_pairs_every_run']} -> {args.out}")


if __name__ == "__main__":
    main()
