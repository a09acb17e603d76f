"""The grounded-answer evaluation table from `bench/agent.py` per-question runs (no LM; reads JSON lines).

    python -m bench.answers_eval --runs DIR --set hotpot-pooled --questions 60:300 \\
        --methods fixed-k,agent,direct [--free-runs DIR] [--out bench/results/answers_hotpot60-300.json]

Per method on the chosen questions of the set (those every listed method has finished): n, EM, F1, support recall,
full support recall (every gold passage retrieved), documents retrieved, refusals; the same on comparison questions,
on the rest, and on questions whose gold is yes/no (with how often "yes" was said). Paired bootstrap (10,000
resamples): agent vs direct and agent vs fixed-k on F1 and on full support recall, and - with `--free-runs` (the
same set's runs with `--set answer.mode=free`) - every method's span vs free answers on F1 and EM, the free-mode
aggregates, and the agent (span) against closed-book `direct` answering freely (span-mode `direct` refuses).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from evorag_core.data.datasets import load_dataset
from evorag_core.evaluation.runner import load_results
from evorag_core.metrics import normalize_answer, paired_bootstrap

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot-pooled": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl",
         "bamboogle": "bamboogle_dev60.jsonl"}


def _rows(path: Path, ids: list[str]) -> dict:
    if not path.exists():
        return {}
    by_id = {r.question_id: r for r in load_results(path)}
    return {i: by_id[i] for i in ids if i in by_id}


def _agg(results: list) -> dict | None:
    if not results:
        return None
    full = [r.support_recall == 1.0 for r in results if r.support_recall is not None]
    return {"n": len(results), "em": round(statistics.mean(r.em for r in results), 4),
            "f1": round(statistics.mean(r.f1 for r in results), 4),
            "support_recall": round(statistics.mean(r.support_recall for r in results
                                                    if r.support_recall is not None), 4) if full else None,
            "full_support_recall": round(statistics.mean(full), 4) if full else None,
            "docs": round(statistics.mean(len(r.passages) for r in results), 2),
            "refusals": sum(r.refused for r in results)}


def _boot(a: list[float], b: list[float]) -> dict:
    r = paired_bootstrap(a, b)
    return {"n": r.n, "a": round(r.mean_a, 4), "b": round(r.mean_b, 4), "diff": round(r.diff, 4),
            "ci95": [round(r.ci_low, 4), round(r.ci_high, 4)], "p": round(r.p_value, 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, required=True)
    p.add_argument("--free-runs", type=Path, default=None)
    p.add_argument("--set", default="hotpot-pooled", choices=sorted(FILES))
    p.add_argument("--questions", default="0:300")
    p.add_argument("--methods", default="fixed-k,agent,direct")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    start, end = (int(x) for x in args.questions.split(":"))
    questions = load_dataset(BENCH / FILES[args.set]).questions[start:end]
    info = {q.id: q for q in questions}
    methods = [m for m in args.methods.split(",") if m]
    runs = {m: _rows(args.runs / f"{args.set}__{m}.jsonl", list(info)) for m in methods}
    common = [i for i in info if all(i in runs[m] for m in methods if runs[m])]
    report: dict = {"set": args.set, "questions": [start, end], "n_common": len(common), "methods": {}}
    yes_no = {i for i in common if any(normalize_answer(a) in ("yes", "no") for a in info[i].answers)}
    for m in methods:
        if not runs[m]:
            continue
        rs = [runs[m][i] for i in common]
        report["methods"][m] = {
            "all": _agg(rs), "comparison": _agg([r for r in rs if info[r.question_id].type == "comparison"]),
            "not_comparison": _agg([r for r in rs if info[r.question_id].type != "comparison"]),
            "yes_no_gold": _agg([r for r in rs if r.question_id in yes_no]),
            "not_yes_no_gold": _agg([r for r in rs if r.question_id not in yes_no]),
            "said_yes_on_yes_no": sum((r.prediction or "").lower() == "yes" for r in rs if r.question_id in yes_no),
            "gold_yes": sum(normalize_answer(info[i].answers[0]) == "yes" for i in yes_no),
        }

    def vals(m, key):
        if key == "full":
            return [float(runs[m][i].support_recall == 1.0) for i in common]
        return [getattr(runs[m][i], key) for i in common]

    comps = {}
    if runs.get("agent"):
        for other in ("direct", "fixed-k", "ircot", "self-ask"):
            if runs.get(other):
                comps[f"agent_vs_{other}"] = {"f1": _boot(vals("agent", "f1"), vals(other, "f1")),
                                              "em": _boot(vals("agent", "em"), vals(other, "em"))}
                if other != "direct":
                    comps[f"agent_vs_{other}"]["full_support_recall"] = _boot(vals("agent", "full"),
                                                                              vals(other, "full"))
    if args.free_runs:
        for m in methods:
            free = _rows(args.free_runs / f"{args.set}__{m}.jsonl", common)
            ids = [i for i in common if i in free]
            if ids and runs[m]:
                comps[f"{m}_span_vs_free"] = {
                    "f1": _boot([runs[m][i].f1 for i in ids], [free[i].f1 for i in ids]),
                    "em": _boot([runs[m][i].em for i in ids], [free[i].em for i in ids])}
                report.setdefault("free_methods", {})[m] = {"all": _agg([free[i] for i in ids])}
        free_direct = _rows(args.free_runs / f"{args.set}__direct.jsonl", common)
        ids = [i for i in common if i in free_direct]
        if runs.get("agent") and ids:  # closed book answers freely: the comparison the span-mode direct cannot give
            comps["agent_vs_direct_free"] = {
                "f1": _boot([runs["agent"][i].f1 for i in ids], [free_direct[i].f1 for i in ids]),
                "em": _boot([runs["agent"][i].em for i in ids], [free_direct[i].em for i in ids])}
    report["paired"] = comps
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
