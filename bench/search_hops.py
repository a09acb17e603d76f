"""Does a follow-up search find what the first one missed? The hop planner (`evorag_core/policy/hops.py`) on
retrieval alone, no language model: fast enough to run on every question of every shared file.

    python -m bench.search_hops --sets hotpot:0:100,2wiki:0:50 --corpus file,all --out bench/results/search_hops.json

Per set and corpus ("file": the passages of that benchmark file pooled, `env.corpus = "pooled"`; "all": the passages
of every shared benchmark file pooled, `env.corpus_from`), each question is searched as the agent's greedy policy
would: SEARCH(question), then while the plan says search and the budget (`--max-searches`) allows, SEARCH(the
plan's query); top-k each (`--k`). Reported: fixed-k's figures (the first search alone: full support = every gold
passage in its top k, recall@k), the planner's (full support over every passage retrieved and over the reader's
`--reader` passages, the hops' rankings interleaved as `policy.agent.reader_passages` does), searches per question,
documents per question, the plan's stop reasons, and on the questions whose first search missed a gold passage the
share where a later search found a new one (the issue's target: >= 30 %). The same for the old grounded bridge query
(`policy.queries.grounded_candidates`'s first bridge candidate) as a reference is not run here: its figures are the
agent's (docs/search.md).
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm import tqdm

from evorag_core.config import load_config
from evorag_core.data.corpus import pool_passages
from evorag_core.data.datasets import load_dataset
from evorag_core.env.state import AgentView, Hop
from evorag_core.policy.agent import reader_passages
from evorag_core.policy.hops import plan_hop
from evorag_core.retrieval import RetrievalService

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl"}


def run_question(q, corpus, retriever, k: int, max_searches: int, reader: int, chars: int) -> dict[str, Any]:
    by_pid = {p.pid: p for p in corpus.passages}
    gold = {corpus.aliases.get(pid, pid) for pid in q.gold_pids}
    chain: list[Hop] = []
    searched = [q.question]
    plans = []
    query = q.question
    while True:
        hits = retriever.search(query, k)
        chain.append(Hop(query, tuple(by_pid[h.pid] for h in hits)))
        view = AgentView(q.question, tuple(chain), (), len(chain) + 1, 20)
        if len(chain) >= max_searches:
            plans.append("budget")
            break
        plan = plan_hop(q.question, view.passages, searched, chars)
        plans.append(plan.reason)
        if not plan.search:
            break
        query = plan.query
        searched.append(query)
    first = {p.pid for p in chain[0].passages}
    found = {p.pid for p in view.passages}
    read = {p.pid for p in reader_passages(view, reader)}
    return {"id": q.id, "gold": len(gold), "first_found": len(gold & first), "found": len(gold & found),
            "read_found": len(gold & read), "searches": len(chain), "docs": len(found), "plans": plans,
            "queries": searched[1:]}


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    missed = [r for r in rows if r["first_found"] < r["gold"]]
    return {
        "questions": n,
        "fixed_k_full_support": sum(r["first_found"] == r["gold"] for r in rows) / n,
        "fixed_k_recall": sum(r["first_found"] / r["gold"] for r in rows) / n,
        "agent_full_support": sum(r["found"] == r["gold"] for r in rows) / n,
        "agent_recall": sum(r["found"] / r["gold"] for r in rows) / n,
        "reader_full_support": sum(r["read_found"] == r["gold"] for r in rows) / n,
        "reader_recall": sum(r["read_found"] / r["gold"] for r in rows) / n,
        "first_missed": len(missed),
        "later_found_new_gold": sum(r["found"] > r["first_found"] for r in missed) / max(len(missed), 1),
        "searches": sum(r["searches"] for r in rows) / n,
        "docs": sum(r["docs"] for r in rows) / n,
        "one_search": sum(r["searches"] == 1 for r in rows) / n,
        "stop_reasons": dict(Counter(r["plans"][-1] for r in rows)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="hotpot:0:100,2wiki:0:50")
    ap.add_argument("--corpus", default="file,all", help="file (one benchmark file pooled), all (every file pooled)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--max-searches", type=int, default=4)
    ap.add_argument("--reader", type=int, default=5)
    ap.add_argument("--chars", type=int, default=300, help="passage characters the planner reads (policy.passage_chars)")
    ap.add_argument("--home", default=".evorag")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--rows", type=Path, help="write every question's row here (JSON lines)")
    args = ap.parse_args(argv)
    cfg = load_config()
    service = RetrievalService(cfg.retrieval, Path(args.home))
    data = {name: load_dataset(BENCH / file) for name, file in FILES.items()}
    everything = pool_passages(p for d in data.values() for q in d.questions for p in q.passages)
    report: dict[str, Any] = {"command": "python -m bench.search_hops " + " ".join(argv or []), "k": args.k,
                              "max_searches": args.max_searches, "reader": args.reader, "chars": args.chars,
                              "date": time.strftime("%Y-%m-%d"), "results": {}}
    all_rows = []
    for spec in args.sets.split(","):
        name, a, b = spec.split(":")
        questions = data[name].questions[int(a):int(b)]
        for mode in args.corpus.split(","):
            corpus = everything if mode == "all" else pool_passages(p for q in data[name].questions
                                                                    for p in q.passages)
            retriever = service.retriever_for(corpus)
            rows = [run_question(q, corpus, retriever, args.k, args.max_searches, args.reader, args.chars)
                    for q in tqdm(questions, desc=f"{spec} {mode}", leave=False)]
            fig = {"passages": len(corpus), **figures(rows)}
            report["results"][f"{spec}/{mode}"] = fig
            all_rows += [{"set": spec, "corpus": mode, **r} for r in rows]
            print(f"{spec:16s} {mode:4s} passages {len(corpus):5d}  fixed-k full {fig['fixed_k_full_support']:.3f}"
                  f" recall {fig['fixed_k_recall']:.3f} | planner full {fig['agent_full_support']:.3f}"
                  f" recall {fig['agent_recall']:.3f} read-full {fig['reader_full_support']:.3f}"
                  f" | missed {fig['first_missed']:3d} later-new {fig['later_found_new_gold']:.3f}"
                  f" | searches {fig['searches']:.2f} docs {fig['docs']:.1f} stops {fig['stop_reasons']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.rows:
        args.rows.write_text("".join(json.dumps(r) + "\n" for r in all_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
