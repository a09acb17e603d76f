"""`evorag compare A.jsonl B.jsonl`: paired bootstrap of two eval result files on their common questions."""
from __future__ import annotations

import argparse
from pathlib import Path

from evorag_core.evaluation.runner import compare_results, load_results
from evorag_core.cli.common import print_json

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="paired bootstrap between two eval result files")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--resamples", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    return p


def main(args: argparse.Namespace) -> int:
    out = compare_results(load_results(args.a), load_results(args.b), args.resamples, args.seed)
    out["a"], out["b"] = str(args.a), str(args.b)
    if args.json:
        print_json(out)
        return 0
    print(f"A = {args.a}\nB = {args.b}\ncommon questions: {out['n']}")
    for metric in ("em", "f1", "steps"):
        r = out[metric]
        print(
            f"  {metric:<5} A {r['mean_a']:.4f}  B {r['mean_b']:.4f}  diff {r['diff']:+.4f}"
            f"  95% CI [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]  p = {r['p_value']:.4f}  {r['verdict']}"
        )
    c = out["changes"]
    print(f"  answers changed: {c['changed']} (A's F1 higher on {c['better']}, lower on {c['worse']}); at equal steps "
          f"{c['same_steps_changed']} ({c['same_steps_better']} higher, {c['same_steps_worse']} lower)")
    if c["yes_no"]["n"]:
        yn = c["yes_no"]
        print(f"  yes/no questions: {yn['n']}, right A {yn['right_a']:g}  B {yn['right_b']:g}")
    return 0
