"""Does the agent's search change its answers? Figures for issue #42 from `bench/agent.py` runs (per-question JSON lines
under its --runs folder), on the questions every listed method answered.

    python -m bench.search_eval --runs RUNS --set hotpot-pooled --data ../shared/benchmarks/hotpotqa_dev300.jsonl \\
        --methods fixed-k,agent,ircot --out bench/results/search_eval_hotpot.json

Per method: EM, F1, steps, documents retrieved (distinct passages), seconds per question; yes/no accuracy on the
questions whose gold answer is yes/no, and how many questions whose gold is not yes/no got a yes/no answer; the
reader's F1 on the questions where every gold passage was among the passages it read (`reader_pids` of the agent's
ANSWER step; fixed-k's retrieved passages). Then the agent against each other method: the paired bootstrap of F1 and
EM (10,000 resamples) and of the share of questions with every gold passage read / retrieved, the number of questions
with the same answer, the documents ratio; and, on the questions
where the agent's first search missed a gold passage, the share where a later search found a new one.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evorag_core.data.corpus import pool_passages
from evorag_core.data.datasets import load_dataset
from evorag_core.metrics import mean, normalize_answer, paired_bootstrap

YES_NO = {"yes", "no"}


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    return {r["question_id"]: r for r in (json.loads(line) for line in path.read_text().splitlines() if line.strip())}


def _read_pids(row: dict[str, Any]) -> list[str]:
    steps = (row.get("extras") or {}).get("episode", {}).get("steps")
    if steps:
        for step in reversed(steps):
            if (step.get("info") or {}).get("reader_pids"):
                return step["info"]["reader_pids"]
    return list(row["passages"])


def _searches(row: dict[str, Any]) -> list[list[str]]:
    steps = (row.get("extras") or {}).get("episode", {}).get("steps") or []
    return [s["passages"] for s in steps if s["action"] == "SEARCH"]


def method_figures(rows: list[dict[str, Any]], gold: dict[str, set[str]], aliases: dict[str, str]) -> dict[str, Any]:
    yn = [r for r in rows if {normalize_answer(g) for g in r["gold"]} <= YES_NO]
    other = [r for r in rows if r not in yn]
    full_read = [r for r in rows if gold[r["question_id"]]
                 and gold[r["question_id"]] <= {aliases.get(p, p) for p in _read_pids(r)}]
    return {
        "n": len(rows),
        "em": mean(r["em"] for r in rows),
        "f1": mean(r["f1"] for r in rows),
        "steps": mean(r["steps"] for r in rows),
        "documents": mean(len(set(r["passages"])) for r in rows),
        "seconds": mean(r["seconds"] for r in rows),
        "yes_no_questions": len(yn),
        "yes_no_accuracy": mean(r["em"] for r in yn) if yn else None,
        "yes_no_said_yes": sum(normalize_answer(r["prediction"] or "") == "yes" for r in yn),
        "yes_no_answers_to_other_questions": sum(normalize_answer(r["prediction"] or "") in YES_NO for r in other),
        "all_gold_read": len(full_read),
        "reader_f1_all_gold_read": mean(r["f1"] for r in full_read) if full_read else None,
    }


def later_hops(rows: list[dict[str, Any]], gold: dict[str, set[str]], aliases: dict[str, str]) -> dict[str, Any]:
    missed, found = 0, 0
    for r in rows:
        hops = _searches(r)
        g = gold[r["question_id"]]
        if not hops or not g:
            continue
        first = {aliases.get(p, p) for p in hops[0]}
        if g <= first:
            continue
        missed += 1
        later = {aliases.get(p, p) for h in hops[1:] for p in h}
        found += bool((g - first) & later)
    return {"first_search_missed": missed, "later_search_found_new_gold": found,
            "share": found / missed if missed else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, required=True)
    ap.add_argument("--set", required=True, help="the set name of the run files (<set>__<method>.jsonl)")
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--methods", default="fixed-k,agent,ircot")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    dataset = load_dataset(args.data)
    aliases = dict(pool_passages(p for q in dataset.questions for p in q.passages).aliases)  # pooled: canonical pids
    gold = {q.id: {aliases.get(p, p) for p in q.gold_pids} for q in dataset.questions}
    methods = [m for m in args.methods.split(",") if (args.runs / f"{args.set}__{m}.jsonl").exists()]
    runs = {m: _rows(args.runs / f"{args.set}__{m}.jsonl") for m in methods}
    common = sorted(set.intersection(*(set(r) for r in runs.values())))
    report: dict[str, Any] = {"set": args.set, "data": str(args.data), "questions": len(common), "methods": {}}
    for m in methods:
        report["methods"][m] = method_figures([runs[m][q] for q in common], gold, aliases)
    if "agent" in runs:
        agent = [runs["agent"][q] for q in common]
        report["agent_later_hops"] = later_hops(agent, gold, aliases)
        report["agent_vs"] = {}
        for m in methods:
            if m == "agent":
                continue
            other = [runs[m][q] for q in common]
            f1 = asdict(paired_bootstrap([r["f1"] for r in agent], [r["f1"] for r in other]))
            em = asdict(paired_bootstrap([r["em"] for r in agent], [r["em"] for r in other]))
            same = sum(normalize_answer(a["prediction"] or "") == normalize_answer(b["prediction"] or "")
                       for a, b in zip(agent, other))
            read = [[float(bool(gold[r["question_id"]]) and gold[r["question_id"]] <= set(_read_pids(r))) for r in rows]
                    for rows in (agent, other)]
            found = [[float(bool(gold[r["question_id"]]) and gold[r["question_id"]] <= set(r["passages"])) for r in rows]
                     for rows in (agent, other)]
            docs = report["methods"]["agent"]["documents"] / max(report["methods"][m]["documents"], 1e-9)
            report["agent_vs"][m] = {"f1": f1, "em": em, "same_answer": same, "documents_ratio": docs,
                                     "all_gold_read": asdict(paired_bootstrap(*read)),
                                     "all_gold_retrieved": asdict(paired_bootstrap(*found))}
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
