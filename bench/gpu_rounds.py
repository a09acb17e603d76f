"""Issue #43 item 3 at a larger scale (a GPU machine): do DPO rounds on the agent's own rollouts raise its held-out
F1, and does the paper's step-level reward train a better agent than the outcome-only reward? One rollout set of the
training questions, re-scored under each reward, one round per reward and seed, greedy evaluation of the base and of
every adapter on the same held-out questions; paired bootstrap of each adapter against the base, and of the
outcome-only reward against the full one, per seed.

    python -m bench.gpu_rounds --data hotpotqa_dev300.jsonl --train 0:100 --eval 100:300 --seeds 0,1 \
        --workers 12 --max-steps 0 --set policy.device=cuda --set train.dtype=bfloat16 --out DIR
    python -m bench.gpu_rounds --summarize DIR [--json-out PATH] [--brief]   # a finished or interrupted run

It is the ablation pipeline (training/ablation/pipeline.py) with one row per reward and seed: `time-dynamic` is the
full step-level reward, `no-reward` the outcome-only one; another seed trains on the same rollouts again as
`NAME@sN` (same weights, another training seed). Phases run in this order - rollouts, the base evaluation, then each
seed's two rounds and evaluations - and every finished phase and evaluated question is kept in DIR, so a run stopped
by a time limit is summarised from what it finished and continues when run again. `--summarize` compares two rows
on the questions both finished (n says how many).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

FULL, OUTCOME = "time-dynamic", "no-reward"


def row_name(variant: str, seed: int, first_seed: int) -> str:
    return variant if seed == first_seed else f"{variant}@s{seed}"


def plan_variants(table, seeds: list[int]) -> tuple:
    """(full, outcome-only) for the first seed, then renamed copies for each further seed."""
    from training.ablation.variants import ablation

    base = ablation("schedules", table).only((OUTCOME,)).variants  # time-dynamic first, then no-reward
    return tuple(dataclasses.replace(v, name=row_name(v.name, s, seeds[0])) for s in seeds for v in base)


def run(args: argparse.Namespace) -> None:
    from evorag_core.cli.ablate import parse_slice
    from evorag_core.cli.common import config_from_args, home_from_args
    from evorag_core.env.scheduler import WeightTable
    from training.ablation.pipeline import AblationPlan, AblationRun

    seeds = [int(s) for s in args.seeds.split(",")]
    cfg = config_from_args(args)
    variants = plan_variants(WeightTable.from_config(cfg.weights), seeds)
    plan = AblationPlan(name="gpu-rounds", variants=variants, reference=FULL, data=args.data.resolve(),
                        train=parse_slice(args.train), eval=parse_slice(args.eval), out=args.out.resolve(),
                        objective=args.objective, max_steps=args.max_steps, seed=seeds[0], eval_t_max=args.eval_t_max)
    started = time.perf_counter()
    ablation = AblationRun(plan, cfg, home_from_args(args), args.workers)
    try:
        ablation.prepare()
        _log(f"rollouts and base evaluation done at {time.perf_counter() - started:.0f} s")
        per_seed = len(variants) // len(seeds)  # plan_variants: each seed's rows in turn
        for i, variant in enumerate(variants):
            seed = seeds[i // per_seed]
            record = ablation.variant(variant, seed=seed)
            ev = record.get("eval") or {}
            _log(f"{variant.name} (seed {seed}): {record['store']['pairs']} pairs, round "
                 f"{record['round'].get('status')} ({record['round'].get('steps')} steps), F1 {ev.get('f1')} "
                 f"at {time.perf_counter() - started:.0f} s")
    finally:
        ablation.close()


def _log(text: str) -> None:
    print(f"gpu_rounds: {text}", file=sys.stderr, flush=True)


def _results(path: Path) -> list:
    """The per-question lines of an evaluation; a torn last line (a run killed mid-write) is skipped."""
    from evorag_core.methods.base import QuestionResult

    out = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(QuestionResult.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _compare(a: list, b: list, resamples: int) -> dict[str, Any] | None:
    from evorag_core.evaluation.runner import compare_results

    ids = {r.question_id for r in b}
    if not any(r.question_id in ids for r in a):
        return None
    cmp = compare_results(a, b, resamples=resamples, seed=0)
    theirs = {r.question_id: r.prediction for r in b}
    same = sum(1 for r in a if r.question_id in theirs and theirs[r.question_id] == r.prediction)
    keep = {"n": cmp["n"], "same_answer": same}
    for metric in ("em", "f1", "steps"):
        r = cmp[metric]
        keep[metric] = {k: r[k] for k in ("mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_value") if k in r}
    return keep


def summarize(out: Path, resamples: int = 10_000) -> dict[str, Any]:
    """Every row's figures on the questions it finished, each adapter against the base and the outcome-only
    reward against the full one per seed; what each phase took (minutes) and how far the run got."""
    from training.ablation.pipeline import load_state

    state = load_state(out)
    if not state:
        raise SystemExit(f"{out} holds no run (state.json)")
    base = _results(out / "eval" / "base.jsonl")
    rows: dict[str, Any] = {}
    names = [v["name"] for v in state["plan"]["variants"]]
    for name in names:
        record = state["variants"].get(name) or {}
        results = _results(out / "eval" / f"{name}.jsonl")
        rnd = record.get("round") or {}
        rows[name] = {"pairs": (record.get("store") or {}).get("pairs"),
                      "round": {k: rnd.get(k) for k in ("status", "error", "steps", "pairs", "first_loss",
                                                         "final_loss", "minutes")},
                      "evaluated": len(results), "finished": bool(record.get("eval")),
                      "vs_base": _compare(results, base, resamples) if results and base else None}
        if name.startswith(OUTCOME):
            full = _results(out / "eval" / f"{name.replace(OUTCOME, FULL, 1)}.jsonl")
            rows[name]["vs_full"] = _compare(results, full, resamples) if results and full else None
    n_eval = state["plan"]["eval"][1] - state["plan"]["eval"][0]
    plan = {k: state["plan"][k] for k in ("data", "train", "eval", "objective", "max_steps", "seed", "eval_t_max")}
    return {"environment": _environment(), "plan": plan,
            "n_eval": n_eval,
            "rollouts": {k: (state.get("rollouts") or {}).get(k) for k in ("minutes",)},
            "rollout_episodes": len((state.get("rollouts") or {}).get("episode_ids") or []),
            "base": {"evaluated": len(base), "finished": bool(state.get("base")),
                     **{k: (state.get("base") or {}).get(k) for k in ("em", "f1", "avg_steps", "support_recall",
                                                                      "seconds")}},
            "rows": rows, "config": state.get("config")}


def brief(summary: dict[str, Any]) -> str:
    """A few lines: the base, then per row its round, its n and F1 against the base (and against the full reward)."""
    b = summary["base"]
    lines = [f"base: {b['evaluated']}/{summary['n_eval']} evaluated, F1 {b.get('f1')}, steps {b.get('avg_steps')}; "
             f"rollout episodes {summary['rollout_episodes']}"]
    for name, row in summary["rows"].items():
        r = row["round"]
        line = (f"{name}: {row['pairs']} pairs, round {r.get('status')} {r.get('steps')} steps, "
                f"{row['evaluated']} evaluated")
        for key in ("vs_base", "vs_full"):
            c = row.get(key)
            if c:
                line += (f"; {key} n {c['n']} F1 {c['f1']['diff']:+.4f} (p {c['f1']['p_value']:.3f}) "
                         f"steps {c['steps']['diff']:+.2f} same {c['same_answer']}")
        lines.append(line)
    return "\n".join(lines)


def _environment() -> dict[str, Any]:
    import torch

    from bench.gpu_check import environment

    return environment("cuda" if torch.cuda.is_available() else "cpu")


def main(argv: list[str] | None = None) -> int:
    from evorag_core.cli.ablate import add_pipeline_args

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--summarize", type=Path, default=None, metavar="DIR", help="summarise this run folder and exit")
    p.add_argument("--json-out", type=Path, default=None, help="write the summary here too")
    p.add_argument("--seeds", default="0,1", help="training seeds, comma-separated (default 0,1)")
    p.add_argument("--resamples", type=int, default=10_000)
    p.add_argument("--brief", action="store_true", help="print a few lines instead of the JSON")
    if argv is None:
        argv = sys.argv[1:]
    if "--summarize" in argv:
        args, _ = p.parse_known_args(argv)
    else:
        add_pipeline_args(p)
        args = p.parse_args(argv)
        run(args)
        args.summarize = args.out
    summary = summarize(args.summarize, args.resamples)
    text = json.dumps(summary, indent=2, default=str)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    print(brief(summary) if args.brief else text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
