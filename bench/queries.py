"""Grounded vs free follow-up queries (`policy.query_mode`): figures from `bench/agent.py` runs of the agent.

    # one run per mode and set (agent only), e.g. the dev split:
    python -m bench.agent --sets hotpot-pooled --methods agent --questions 0:60 --judge-limit 0 \\
        --set policy.query_mode=grounded --runs bench/results/queries_runs/grounded --out /tmp/g.json
    # then
    python -m bench.queries --modes grounded=bench/results/queries_runs/grounded,free=bench/results/queries_runs/free \\
        --sets hotpot-pooled:0:60,2wiki:0:30 --out bench/results/agent_queries_dev.json

Per set and mode, from the per-question JSON lines (`<runs>/<set>__agent.jsonl`): EM, F1, support recall, full support
recall (every gold passage found), avg steps, the number of searches per episode (how many stop after one, how many
use the whole budget `--max-searches`), the later queries' distinct rate and their repeated / copied-line / loop
counts (`policy.queries.filter_reason` against the episode's earlier queries and the passages retrieved before
it), seconds per step; in grounded mode also which candidate source was chosen and what the filters dropped. Then the
paired bootstrap (10,000 resamples) of the first mode against the second on each set's common questions and on
all sets pooled: support recall, full support recall, EM, F1, steps.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from evorag_core.data.datasets import load_dataset
from evorag_core.evaluation.runner import load_results
from evorag_core.evidence.text import title_key
from evorag_core.metrics import mean, paired_bootstrap
from evorag_core.policy.queries import filter_reason

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot-pooled": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl"}


def _passages(set_name: str) -> dict:
    return {p.pid: p for q in load_dataset(BENCH / FILES[set_name]).questions for p in q.passages}


def episode_queries(result, passages: dict) -> list[dict]:
    """Each SEARCH of an episode after its first: the query, its filter reason against the episode so far, and the
    grounded query info when the policy recorded one."""
    steps = result.extras["episode"]["steps"]
    earlier = [result.question]
    seen: list = []
    out = []
    for i, step in enumerate(s for s in steps if s["action"] == "SEARCH"):
        query = step["query"]
        if i > 0:
            reason = filter_reason(query, earlier, seen)
            out.append({"query": query, "reason": reason, "info": step.get("info", {}).get("query")})
        earlier.append(query)
        seen.extend(passages[pid] for pid in step["passages"] if pid in passages)
    return out


def mode_figures(results, passages: dict, max_searches: int) -> dict:
    searches = [sum(s["action"] == "SEARCH" for s in r.extras["episode"]["steps"]) for r in results]
    later = [q for r in results for q in episode_queries(r, passages)]
    reasons = Counter(q["reason"] or "ok" for q in later)
    sources, dropped, fallbacks = Counter(), Counter(), 0
    for q in later:
        if q["info"]:
            sources[q["info"].get("source")] += 1
            dropped.update(q["info"].get("filtered", {}))
            fallbacks += q["info"].get("fallback") == "no_candidate"
    per_step = [r.seconds / r.steps for r in results if r.steps and r.seconds]
    return {
        "n": len(results),
        "em": round(mean(r.em for r in results), 4),
        "f1": round(mean(r.f1 for r in results), 4),
        "support_recall": round(mean(r.support_recall for r in results), 4),
        "full_support_recall": round(mean(float(r.support_recall == 1.0) for r in results), 4),
        "avg_steps": round(mean(r.steps for r in results), 3),
        "avg_searches": round(mean(searches), 3),
        "searches_histogram": dict(sorted(Counter(searches).items())),
        "one_search": sum(n == 1 for n in searches),
        "whole_budget": sum(n >= max_searches for n in searches),
        "refusals": sum(r.refused for r in results),
        "later_queries": len(later),
        "later_distinct_rate": round(len({(r, title_key(q["query"])) for r, qs in
                                          ((r.question_id, episode_queries(r, passages)) for r in results)
                                          for q in qs}) / len(later), 4) if later else None,
        "later_repeated": reasons["repeat"],
        "later_copied_line": reasons["copy"],
        "later_loop": reasons["loop"],
        "chosen_source": dict(sources),
        "filtered_by_policy": dict(dropped),
        "no_candidate_fallbacks": fallbacks,
        "seconds_per_step_median": round(statistics.median(per_step), 3) if per_step else None,
        "seconds_per_step_mean": round(statistics.mean(per_step), 3) if per_step else None,
    }


METRICS = {"support_recall": lambda r: r.support_recall, "full_support_recall": lambda r: float(r.support_recall == 1.0),
           "em": lambda r: r.em, "f1": lambda r: r.f1, "steps": lambda r: float(r.steps)}


def paired(a: list, b: list) -> dict:
    by_id = {r.question_id: r for r in b}
    common = [(x, by_id[x.question_id]) for x in a if x.question_id in by_id]
    out: dict = {"n": len(common)}
    for name, get in METRICS.items():
        res = paired_bootstrap([get(x) for x, _ in common], [get(y) for _, y in common])
        out[name] = {"diff": round(res.diff, 4), "ci95": [round(res.ci_low, 4), round(res.ci_high, 4)],
                     "p": round(res.p_value, 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", required=True, help="NAME=RUNS_DIR,NAME=RUNS_DIR (the first is compared to the second)")
    p.add_argument("--sets", required=True, help="SET:START:END,... (questions START..END-1 of each set)")
    p.add_argument("--max-searches", type=int, default=4)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--note", default="")
    args = p.parse_args(argv)
    modes = dict(item.split("=", 1) for item in args.modes.split(","))
    report: dict = {"modes": modes, "note": args.note, "sets": {}}
    pooled: dict[str, list] = {m: [] for m in modes}
    for spec in args.sets.split(","):
        set_name, start, end = spec.split(":")
        wanted = {q.id for q in load_dataset(BENCH / FILES[set_name]).questions[int(start):int(end)]}
        passages = _passages(set_name)
        runs = {m: [r for r in load_results(Path(d) / f"{set_name}__agent.jsonl") if r.question_id in wanted]
                for m, d in modes.items()}
        entry: dict = {"questions": [int(start), int(end)]}
        for m, res in runs.items():
            if len(res) != len(wanted):
                print(f"warning: {set_name} {m}: {len(res)} of {len(wanted)} questions", file=sys.stderr)
            entry[m] = mode_figures(res, passages, args.max_searches)
            pooled[m].extend(res)
        first, second = list(modes)[:2]
        entry[f"{first}_vs_{second}"] = paired(runs[first], runs[second])
        report["sets"][set_name] = entry
    first, second = list(modes)[:2]
    report["pooled"] = {f"{first}_vs_{second}": paired(pooled[first], pooled[second])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
