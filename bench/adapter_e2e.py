"""Reader adapters end to end: agent runs with `answer.adapter` set, each against a base run of the same questions.

    python -m bench.agent --sets hotpot-pooled --questions 100:300 --methods agent --judge-limit 0 --workers 2 \\
        --set policy.threads=1 --set answer.ranker_path=$PWD/bench/results/ranker_dev.json \\
        [--set answer.adapter=ADAPTER_DIR] --runs RUNS_NAME --out RUNS_NAME.json     # once per adapter, once without
    python -m bench.adapter_e2e --base RUNS_base/hotpot-pooled__agent.jsonl \\
        --adapter s0=RUNS_s0/hotpot-pooled__agent.jsonl --adapter s1=RUNS_s1/hotpot-pooled__agent.jsonl \\
        --what "..." --command "..." --out bench/results/NAME.json

Per adapter run: its summary, and against the base the paired bootstrap of EM, F1 and steps with the answers that
changed (`evaluation.compare_results`, as `evorag compare`). Over the adapters, their per-question mean against the
base (the seed mean). And the reader where retrieval left nothing to find: the questions on which the base run's
passages held every gold passage (`support_recall` 1), each arm's EM and F1 there with the bootstrap against the base.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from bench.reader_types import _commit
from bench.seeds import Answer, combine
from evorag_core.evaluation.runner import compare_results, load_results, summarize
from evorag_core.metrics import paired_bootstrap
from evorag_core.methods.base import QuestionResult


def _bootstrap(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    return paired_bootstrap(list(a), list(b)).__dict__


def seed_mean(arms: dict[str, dict[str, QuestionResult]], base: dict[str, QuestionResult]) -> dict[str, Any]:
    """The adapters' per-question mean EM and F1 against the base's, on the questions every run answered, in the base
    file's order (`bench.seeds.combine`)."""
    def answers(rows: dict[str, QuestionResult]) -> dict[str, Answer]:
        return {q: Answer(r.prediction or "", r.em, r.f1) for q, r in rows.items()}

    combined = combine(answers(base), {n: answers(arm) for n, arm in arms.items()}, order=list(base))
    return {m: combined.seed_mean[m].__dict__ for m in ("f1", "em")}


def full_support(arms: dict[str, dict[str, QuestionResult]], base: dict[str, QuestionResult]) -> dict[str, Any]:
    """EM and F1 on the questions whose base run retrieved every gold passage: the reader's share of the error."""
    def full(r: QuestionResult) -> bool:  # no support recall (a question without gold passages): not counted
        return r.support_recall is not None and r.support_recall >= 1.0

    ids = [q for q, r in base.items() if full(r) and all(q in arm for arm in arms.values())]
    out: dict[str, Any] = {"n": len(ids), "of": len(base)}
    if not ids:
        return out
    out["base"] = {m: sum(getattr(base[q], m) for q in ids) / len(ids) for m in ("em", "f1")}
    for name, arm in arms.items():
        out[name] = {m: sum(getattr(arm[q], m) for q in ids) / len(ids) for m in ("em", "f1")}
        out[name]["f1_vs_base"] = _bootstrap([arm[q].f1 for q in ids], [base[q].f1 for q in ids])
        out[name]["same_support"] = sum(full(arm[q]) for q in ids)
    return out


def report(base_path: Path, adapters: dict[str, Path]) -> dict[str, Any]:
    base_rows = load_results(base_path)
    base = {r.question_id: r for r in base_rows}
    arms = {name: {r.question_id: r for r in load_results(path)} for name, path in adapters.items()}
    out: dict[str, Any] = {"summaries": {"base": summarize(base_rows),
                                         **{n: summarize(list(arm.values())) for n, arm in arms.items()}},
                           "vs_base": {}, "runs": {"base": str(base_path), **{n: str(p) for n, p in adapters.items()}}}
    for name, arm in arms.items():
        out["vs_base"][name] = compare_results(list(arm.values()), base_rows)
    if len(arms) > 1:
        out["seed_mean_vs_base"] = seed_mean(arms, base)
    out["full_support"] = full_support(arms, base)
    return out


def _print(result: dict[str, Any]) -> None:
    for name, s in result["summaries"].items():
        line = f"{name:8s} n {s['n']}  EM {s['em']:.3f}  F1 {s['f1']:.3f}  steps {s['avg_steps']:.3f}"
        if name in result["vs_base"]:
            f1 = result["vs_base"][name]["f1"]
            line += f"  F1 - base {f1['diff']:+.3f} [{f1['ci_low']:+.3f}, {f1['ci_high']:+.3f}] p {f1['p_value']:.3g}"
        print(line)
    if "seed_mean_vs_base" in result:
        sm = result["seed_mean_vs_base"]
        print(f"seed mean  EM {sm['em']['mean_a']:.4f}  F1 {sm['f1']['mean_a']:.3f}  "
              f"F1 - base {sm['f1']['diff']:+.3f} p {sm['f1']['p_value']:.3g}")
    fs = result["full_support"]
    if not fs["n"]:
        print(f"no question of the base run retrieved every gold passage (of {fs['of']})")
        return
    print(f"every gold passage retrieved ({fs['n']} of {fs['of']}): base F1 {fs['base']['f1']:.3f}  "
          + "  ".join(f"{n} {v['f1']:.3f} (p {v['f1_vs_base']['p_value']:.3g})"
                      for n, v in fs.items() if isinstance(v, dict) and "f1_vs_base" in v))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", type=Path, required=True, help="the base run's JSON lines (bench.agent --runs)")
    p.add_argument("--adapter", action="append", required=True, metavar="NAME=RUNS_JSONL",
                   help="an adapter run, repeated (e.g. one per training seed)")
    p.add_argument("--what", default="", help="what was run, for the JSON")
    p.add_argument("--command", default="", help="the bench.agent command, for the JSON")
    p.add_argument("--note", default="", help="the machine, what else ran, caveats: for the JSON")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    adapters = {}
    for item in args.adapter:
        name, sep, path = item.partition("=")
        if not sep or not name:
            p.error(f"--adapter takes NAME=RUNS_JSONL, got {item!r}")
        adapters[name] = Path(path)
    for path in [args.base, *adapters.values()]:
        if not path.is_file():
            p.error(f"no run file {path}")
    result = {"what": args.what, "command": args.command, "note": args.note, "summarized_at": _commit(),
              **report(args.base, adapters)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    _print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
