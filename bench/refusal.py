"""What refusing costs and buys: a run with a refusal setting against the same run without it (no LM; reads the
per-question JSON lines `bench/agent.py` writes).

    python -m bench.refusal --base-runs DIR --runs DIR --sets hotpot-pooled:100:200:answerable,bamboogle:0:60:out \\
        --methods fixed-k,agent [--out bench/results/refusal_min_confidence.json]

Each `--sets` entry is SET:START:END:KIND, KIND `answerable` (the gold passages are in the corpus: a refusal there is
a false refusal) or `out` (the answers are not in the corpus: a refusal is the right call). Per set and method, over
the questions both runs finished: the refusal rate of each run, the questions answered right (EM) by the base run
that the other refused ("right lost"), the refusals of base answers that were wrong ("wrong withheld"), EM among the
answered, and EM / F1 of both with the paired bootstrap (10,000 resamples). Both runs must hold the same questions'
results for a set and method; a question missing from either is left out and counted.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from evorag_core.data.datasets import load_dataset
from evorag_core.evaluation.runner import load_results
from evorag_core.metrics import paired_bootstrap

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot-pooled": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl",
         "bamboogle": "bamboogle_dev60.jsonl"}
KINDS = ("answerable", "out")


def parse_sets(text: str) -> list[tuple[str, int, int, str]]:
    """SET:START:END:KIND,... -> [(set, start, end, kind)]; a clear error for anything else."""
    out = []
    for item in (s for s in text.split(",") if s.strip()):
        parts = item.strip().split(":")
        if len(parts) != 4 or parts[0] not in FILES or parts[3] not in KINDS or not all(p.isdigit() for p in parts[1:3]):
            raise SystemExit(f"bench.refusal: --sets entry {item!r} is not SET:START:END:KIND with SET one of "
                             f"{', '.join(FILES)} and KIND one of {', '.join(KINDS)}")
        out.append((parts[0], int(parts[1]), int(parts[2]), parts[3]))
    return out


def _mean(xs: list[float]) -> float | None:
    return round(statistics.mean(xs), 4) if xs else None


def compare(base: dict[str, Any], other: dict[str, Any], ids: list[str], kind: str) -> dict[str, Any]:
    """The table row of one set and method (see the module docstring); `base` / `other`: question id -> result."""
    both = [i for i in ids if i in base and i in other]
    b, o = [base[i] for i in both], [other[i] for i in both]
    answered = [r for r in o if not r.refused]
    row: dict[str, Any] = {
        "kind": kind, "n": len(both), "missing": len(ids) - len(both),
        "refusal_rate_base": _mean([float(r.refused) for r in b]), "refusal_rate": _mean([float(r.refused) for r in o]),
        "right_lost": sum(x.em == 1.0 and y.refused and not x.refused for x, y in zip(b, o)),
        "right_base": sum(x.em == 1.0 for x in b),
        "wrong_withheld": sum(x.em < 1.0 and y.refused and not x.refused for x, y in zip(b, o)),
        "wrong_base": sum(x.em < 1.0 and not x.refused for x in b),
        "answered": len(answered), "em_among_answered": _mean([r.em for r in answered]),
        "em_among_answered_base": _mean([r.em for r in b if not r.refused]),
        "changed_otherwise": sum(x.prediction != y.prediction and not y.refused for x, y in zip(b, o)),
    }
    if both:
        for metric in ("em", "f1"):
            r = paired_bootstrap([getattr(y, metric) for y in o], [getattr(x, metric) for x in b])
            row[metric] = {"base": round(r.mean_b, 4), "with": round(r.mean_a, 4), "diff": round(r.diff, 4),
                           "ci95": [round(r.ci_low, 4), round(r.ci_high, 4)], "p": round(r.p_value, 4)}
    return row


def _results(path: Path) -> dict[str, Any]:
    return {r.question_id: r for r in load_results(path)} if path.exists() else {}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-runs", type=Path, required=True, help="runs folder without the refusal setting")
    p.add_argument("--runs", type=Path, required=True, help="runs folder with it")
    p.add_argument("--sets", required=True, metavar="SET:START:END:KIND[,...]")
    p.add_argument("--methods", default="fixed-k,agent")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    report: dict[str, Any] = {"base_runs": str(args.base_runs), "runs": str(args.runs), "sets": {}}
    for name, start, end, kind in parse_sets(args.sets):
        ids = [q.id for q in load_dataset(BENCH / FILES[name]).questions[start:end]]
        rows = {}
        for method in (m for m in args.methods.split(",") if m):
            base = _results(args.base_runs / f"{name}__{method}.jsonl")
            other = _results(args.runs / f"{name}__{method}.jsonl")
            rows[method] = compare(base, other, ids, kind)
            r = rows[method]
            f1 = r.get("f1", {})
            print(f"{name} {start}:{end} ({kind}) {method}: n {r['n']} (missing {r['missing']}), refusals "
                  f"{r['refusal_rate_base']} -> {r['refusal_rate']}, right lost {r['right_lost']}/{r['right_base']}, "
                  f"wrong withheld {r['wrong_withheld']}/{r['wrong_base']}, EM among answered "
                  f"{r['em_among_answered_base']} -> {r['em_among_answered']}, F1 {f1.get('base')} -> {f1.get('with')} "
                  f"(p {f1.get('p')})")
        report["sets"][f"{name}:{start}:{end}"] = rows
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
