"""`evorag tune-weights --method ucb1|bo`: adaptive tuning of the reward weight table (paper appendix B.2).

Every trial re-scores the stored rollouts of the training questions under a candidate Start/Mid/End table, trains one
short round (`--objective`, `--max-steps`) and scores the adapter by its mean F1 on the dev questions (`--eval`) -
the same per-variant pipeline as `evorag ablate`. ucb1: a bandit over 9 tables (kappa and the process weights each
scaled by 0.5 / 1 / 2; an arm pulled again trains with the next seed); bo: optuna's TPE over the 21 endpoints, the
hand table first. The best table is written as a [weights] TOML snippet (`--config` accepts it). With `--heldout`,
the tuned table and the hand table are then compared on those questions (an ablation table, as `evorag ablate`);
`--rows-from` an ablation run on those questions takes its rollouts, and its base row and the row with the hand
table's weights (schedules' time-dynamic, presets' full) for that comparison instead of computing them again.
Resumable: rerun the same command.
"""
from __future__ import annotations

import argparse
import json
import sys

from evorag_core.cli.ablate import add_pipeline_args, parse_slice, plan_settings
from evorag_core.cli.common import config_from_args, home_from_args, print_json

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="tune the reward weight table (UCB1 over a grid, or optuna BO over 21 endpoints)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", choices=["ucb1", "bo"], required=True)
    add_pipeline_args(p)
    p.add_argument("--budget", type=int, default=18, help="ucb1: pulls (rounds) in all, at least the 9 arms")
    p.add_argument("--trials", type=int, default=12, help="bo: optuna trials (rounds)")
    p.add_argument("--heldout", default=None, metavar="START:STOP",
                   help="afterwards, compare the tuned and the hand table on these questions (with --rows-from, "
                        "its base and hand-table rows are reused when they match)")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.env.scheduler import WeightTable
    from evorag_core.pairs.rescore import Variant
    from training.ablation.pipeline import AblationPlan, AblationRun

    cfg = config_from_args(args)
    hand = WeightTable.from_config(cfg.weights)
    home = home_from_args(args)
    settings = plan_settings(args)
    plan = AblationPlan(name=f"tune-{args.method}", variants=(Variant("hand", table=hand),), reference="hand",
                        **settings)
    run = AblationRun(plan, cfg, home, args.workers)
    try:
        return _tune(args, cfg, home, settings, plan, hand, run)
    finally:
        run.close()


def _tune(args, cfg, home, settings, plan, hand, run) -> int:
    from evorag_core.env.scheduler import WeightTable
    from evorag_core.pairs.rescore import Variant
    from training.ablation.tune import (best_trial, bo_search, table_from_params, table_params, toml_snippet, ucb1,
                                       weight_grid)

    run.prepare()

    def score(label: str, table: WeightTable, seed: int) -> float:
        record = run.variant(Variant(label, table=table), seed=seed)
        f1 = record["eval"]["f1"] if record.get("eval") else 0.0
        print(f"evorag tune-weights: {label}: dev F1 {f1:.4f} ({record['store']['pairs']} pairs)", file=sys.stderr)
        return f1

    if args.method == "ucb1":
        arms = weight_grid(hand)
        hand_arm = next(i for i, (_, table) in enumerate(arms) if table == hand)  # k1-p1: it keeps the ties
        result = ucb1(len(arms), lambda i, k: score(f"ucb-{arms[i][0]}-{k}", arms[i][1], plan.seed + k), args.budget,
                      prefer=hand_arm)
        best_name, best = arms[result.best]
        summary = {"arms": [n for n, _ in arms], "counts": result.counts, "means": result.means,
                   "history": result.history, "best": best_name, "best_dev_f1": result.means[result.best]}
    else:
        study = bo_search(lambda table, n: score(f"bo-{n}", table, plan.seed), args.trials, seed=plan.seed,
                          start=hand, storage=f"sqlite:///{plan.out / 'optuna.db'}")
        top = best_trial(study)  # the hand table (trial 0) keeps a tie
        best = table_from_params({**table_params(hand), **top.params})
        summary = {"best": f"bo-{top.number}", "best_dev_f1": top.value,
                   "trials": [{"number": t.number, "value": t.value, "state": t.state.name} for t in study.trials]}
    snippet = toml_snippet(best, f"evorag tune-weights --method {args.method}: best dev F1 "
                                 f"{summary['best_dev_f1']:.4f} ({summary['best']}); use with --config")
    (plan.out / "best_weights.toml").write_text(snippet)
    summary["snippet"] = str(plan.out / "best_weights.toml")
    if args.heldout:
        summary["heldout"] = _heldout(args, cfg, home, settings, hand, best, run)
    (plan.out / "tune.json").write_text(json.dumps(summary, indent=2, default=str))
    if args.json:
        print_json(summary)
    else:
        print(snippet)
        print(f"written: {plan.out / 'best_weights.toml'}, {plan.out / 'tune.json'}")
    return 0


def _heldout(args, cfg, home, settings, hand, best, run) -> dict:
    """The hand and the tuned table on the held-out questions, from the same rollouts (an ablation of two rows)."""
    from evorag_core.pairs.rescore import Variant
    from training.ablation.pipeline import AblationPlan, run_ablation
    from training.ablation.report import write_report

    out = settings["out"] / "heldout"
    plan = AblationPlan(name="tuned-vs-hand", variants=(Variant("hand", table=hand), Variant("tuned", table=best)),
                        reference="hand", **{**settings, "out": out, "eval": parse_slice(args.heldout),
                                             "rollouts_from": run.data["rollouts"]["store"]})
    state = run_ablation(plan, cfg, home, workers=args.workers, rows_from=args.rows_from)
    report = write_report(state, out)
    return {"table": str(out / "ablation.md"), "rows": report["rows"]}
