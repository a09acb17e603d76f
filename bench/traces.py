"""Trace browser speed: seed a store with N episodes through the store API, then time the Traces tab's queries.

    python -m bench.traces [--episodes 10000] [--runs 7] [--db URL] [--out bench/results/traces.json]

Seeding (`Store.add_episode`, one transaction per episode, as studio sessions, `evorag eval` and rollouts write
them): questions of the bundled demo file spread over four data set names; sources 20 % studio, 60 % eval, 20 %
rollout; policies oracle / script / LM base / LM adapters / pipeline baselines; 1-6 steps (SEARCH... then ANSWER or
REFUSE; mean about 2.4), each with the seven signals, seven weights and 5 passage ids per SEARCH; rollouts carry K=4
siblings on up to two steps; about 2 % of the episodes get a human override by one of four annotators.

Timed (each query `--runs` times; median and max, in ms): the first page with its total (COUNT + LIMIT/OFFSET), each
filter alone and combined, text search (hit and miss), ordering by return, the last page (deep OFFSET), the filter
pickers' distinct values, and opening a trace (episode with steps and siblings, its judgments) plus rendering it
with the Episode view's renderers. Target (issue 24): every query <= 1 s. Default database: a fresh SQLite file in
a temporary folder. The load average is recorded: the machine may be shared.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from evorag_core.data.datasets import load_dataset
from evorag_core.env.scheduler import WEIGHT_NAMES as WEIGHTS
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.store import Outcome, Sibling, Step, TraceFilter, open_store

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo" / "demo.jsonl"
DATASETS = ("demo", "hotpotqa", "musique", "2wikimultihopqa")
POLICIES = {"studio": ("oracle", "script", "LM · base model", "LM · adapter dpo-r1"),
            "eval": ("oracle", "lm:base", "lm:dpo-r1", "bm25-rag", "dynakrag"),
            "rollout": ("lm:HuggingFaceTB/SmolLM2-135M-Instruct", "lm:HuggingFaceTB/SmolLM2-135M-Instruct+dpo-r1")}
ANNOTATORS = ("ann", "bob", "chen", "dana")
TARGET_S = 1.0


def _steps(rng: random.Random, q: Any, rollout: bool) -> tuple[list[Step], Outcome, float]:
    n = min(6, 1 + int(rng.expovariate(0.5)))  # 1..6, mean about 2.4
    pids = [p.pid for p in q.passages] or [f"{q.id}:{i}" for i in range(10)]
    steps, total = [], 0.0
    for t in range(1, n + 1):
        last = t == n
        action = ("REFUSE" if rng.random() < 0.15 else "ANSWER") if last else "SEARCH"
        arg = None if action == "REFUSE" else (rng.choice(q.answers or ("unknown",)) if last else
                                               " ".join(rng.sample(q.question.split(), min(4, len(q.question.split())))))
        signals = {k: round(rng.uniform(-1, 1), 3) for k in SIGNAL_NAMES}
        weights = {w: round(rng.uniform(0, 2), 3) for w in WEIGHTS}
        reward = round(sum(signals[k] * weights[w] for k, w in zip(SIGNAL_NAMES, WEIGHTS)), 4)
        total += reward
        siblings = tuple(Sibling("SEARCH", f"candidate {i}", -rng.random(), rng.uniform(-2, 2)) for i in range(4)) \
            if rollout and t <= 2 and not last else ()
        steps.append(Step(t=t, action=action, argument=arg, passages=tuple(rng.sample(pids, min(5, len(pids))))
                          if action == "SEARCH" else (), signals=signals, weights=weights, reward=reward,
                          judge_verdict=("answerable" if rng.random() < 0.5 else "unanswerable")
                          if action == "REFUSE" else None, siblings=siblings))
    refused = steps[-1].action == "REFUSE"
    answer = steps[-1].argument if not refused else None
    em = 0.0 if refused else float(rng.random() < 0.4)
    f1 = em if em else (0.0 if refused else round(rng.random() * 0.8, 3))
    return steps, Outcome(answer, em, f1, refused), total


def seed(store: Any, n: int, rng: random.Random) -> dict[str, Any]:
    questions = load_dataset(DEMO).questions
    start, n_steps = time.perf_counter(), 0
    for i in range(n):
        q = rng.choice(questions)
        source = rng.choices(("studio", "eval", "rollout"), (0.2, 0.6, 0.2))[0]
        policy = rng.choice(POLICIES[source])
        adapter = "dpo-r1" if "dpo-r1" in policy else None
        dataset = rng.choice(DATASETS)
        steps, outcome, ret = _steps(rng, q, source == "rollout")
        n_steps += len(steps)
        eid = store.add_episode(
            question_id=q.id, dataset=dataset, question=q.question, policy=policy,
            stage=rng.choice(("discovery", "refinement")), schedule="time-dynamic",
            config={"preset": "full", "t_max": 20, "top_k": 5}, steps=steps, total_return=ret, source=source,
            adapter=adapter, data_path=f"/data/{dataset}.jsonl", run=f"{source} run {i // 500}", outcome=outcome)
        if rng.random() < 0.02:
            store.set_override(eid, steps[-1].t, rng.choice(("answerable", "unanswerable")), rng.choice(ANNOTATORS))
        if (i + 1) % 1000 == 0:
            print(f"  seeded {i + 1:,}/{n:,} episodes ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return {"episodes": n, "steps": n_steps, "seconds": round(time.perf_counter() - start, 1)}


def _stats(times: list[float], cpu: list[float]) -> dict[str, Any]:
    """Wall-clock median and max, and the median CPU time of this process (what the query costs without the
    machine's other load; SQLite runs in-process, so its work is counted)."""
    return {"median_ms": round(statistics.median(times) * 1000, 1), "max_ms": round(max(times) * 1000, 1),
            "cpu_median_ms": round(statistics.median(cpu) * 1000, 1)}


def _time(fn: Callable[[], Any], runs: int) -> dict[str, Any]:
    times, cpu, out = [], [], None
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {**_stats(times, cpu), "rows": len(getattr(out, "rows", ()) or ()), "total": getattr(out, "total", None)}


def queries(store: Any, n: int) -> dict[str, Callable[[], Any]]:
    from datetime import timedelta

    from evorag_core.store.base import utcnow

    today = utcnow().date()
    page = lambda f=None, offset=0: (lambda: store.search_traces(f, limit=25, offset=offset))  # noqa: E731
    return {
        "first page (no filter)": page(),
        "data file": page(TraceFilter(dataset="musique")),
        "method/policy": page(TraceFilter(policy="lm:dpo-r1")),
        "adapter": page(TraceFilter(adapter="dpo-r1")),
        "stage": page(TraceFilter(stage="refinement")),
        "source": page(TraceFilter(source="rollout")),
        "outcome correct": page(TraceFilter(outcome="correct")),
        "outcome refused": page(TraceFilter(outcome="refused")),
        "F1 range 0.3-0.6": page(TraceFilter(f1_min=0.3, f1_max=0.6)),
        "return range, by return": page(TraceFilter(return_min=0.0, return_max=2.0, order="return-desc")),
        "annotator": page(TraceFilter(annotator="chen")),
        "date range": page(TraceFilter(date_from=today - timedelta(days=7), date_to=today)),
        "text search (hit)": page(TraceFilter(text="river")),
        "text search (miss)": page(TraceFilter(text="zzzz no such words")),
        "combined filters": page(TraceFilter(dataset="hotpotqa", source="eval", outcome="wrong", return_min=-5.0,
                                             text="the")),
        "last page (deep offset)": page(None, max(0, n - 25)),
        "filter pickers (facets)": store.trace_facets,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--db", default=None, help="database URL (default: a new SQLite file in a temporary folder)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "traces.json")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    tmp = tempfile.TemporaryDirectory(prefix="evorag-traces-bench-")
    url = args.db or f"sqlite:///{Path(tmp.name) / 'traces.db'}"
    with open_store(url) as store:
        print(f"seeding {args.episodes:,} episodes into {store.url}", file=sys.stderr)
        seeded = seed(store, args.episodes, rng) if store.search_traces(limit=1).total < args.episodes else \
            {"episodes": store.search_traces(limit=1).total, "reused": True}
        results = {name: _time(fn, args.runs) for name, fn in queries(store, args.episodes).items()}
        results.update(_open_trace(store, args.runs, rng))
        size = Path(url.removeprefix("sqlite:///")).stat().st_size if url.startswith("sqlite:///") else None
    worst = max(r["max_ms"] for r in results.values())
    out = {"db": url if args.db else "sqlite (temporary file)", "db_bytes": size, "seeded": seeded,
           "runs": args.runs, "load_avg": os.getloadavg(), "cpu_count": os.cpu_count(), "queries": results,
           "worst_max_ms": worst, "target_ms": TARGET_S * 1000, "target_met": worst <= TARGET_S * 1000,
           "when": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    width = max(map(len, results))
    print(f"{'query':<{width}}  median ms    max ms  CPU median ms   total")
    for name, r in results.items():
        total = r.get("total") if r.get("total") is not None else ""
        print(f"{name:<{width}}  {r['median_ms']:9.1f} {r['max_ms']:9.1f}  {r['cpu_median_ms']:13.1f}   {total}")
    print(f"worst max {worst:.1f} ms (target {TARGET_S * 1000:.0f} ms: {'met' if out['target_met'] else 'MISSED'}); "
          f"load average {out['load_avg'][0]:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.out}")
    tmp.cleanup()
    return 0 if out["target_met"] else 1


def _open_trace(store: Any, runs: int, rng: random.Random) -> dict[str, dict[str, Any]]:
    """A random trace loaded (steps, siblings, judgments) and rendered as the Traces tab draws it (no passage
    texts: the seeded data paths do not exist)."""
    from app.common.trace_view import render_trace

    total = store.search_traces(limit=1).total
    render_trace(store.get_episode(1), store.judgments(1), by_pid=None, gold=())  # imports and Plotly's first use
    ids = [rng.randint(1, total) for _ in range(runs)]
    load_t, render_t, load_c, render_c = [], [], [], []
    for eid in ids:
        t0, c0 = time.perf_counter(), time.process_time()
        ep, judg = store.get_episode(eid), store.judgments(eid)
        t1, c1 = time.perf_counter(), time.process_time()
        render_trace(ep, judg, by_pid=None, gold=())
        load_t.append(t1 - t0)
        render_t.append(time.perf_counter() - t0)
        load_c.append(c1 - c0)
        render_c.append(time.process_time() - c0)
    return {"open trace (load)": {**_stats(load_t, load_c), "rows": 1, "total": None},
            "open trace (load + render)": {**_stats(render_t, render_c), "rows": 1, "total": None}}


if __name__ == "__main__":
    raise SystemExit(main())
