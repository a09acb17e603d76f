"""`evorag ablate schedules|presets`: the paper's reward ablations (Tables 4 and 6) from one command.

One rollout set of the training questions is stored once, re-scored under each variant (only the weights change,
hence the returns, which sibling wins, and the pairs), then one training round per variant (same objective, seed
and step budget) and an evaluation of each adapter and of the base model on disjoint questions. Writes
<out>/ablation.md (the table, each row against time-dynamic / Full with paired-bootstrap p), ablation.json and
ablation.html / .png (plotly). Resumable: rerun the same command and it continues where it stopped.
The pipeline is training/ablation/ (docs/ablations.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evorag_core.cli.common import add_common, config_from_args, home_from_args, print_json
from evorag_core.errors import ConfigError
from evorag_core.objectives import OBJECTIVES

__all__ = ["add_parser", "main", "parse_slice", "add_pipeline_args", "plan_settings"]


def parse_slice(text: str) -> tuple[int, int]:
    start, sep, stop = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(start or 0), int(stop)
    except ValueError:
        raise ConfigError(f"expected a slice START:STOP of the data file's questions, got {text!r}") from None


def add_pipeline_args(p: argparse.ArgumentParser) -> None:
    """The options `ablate` and `tune-weights` share: the slices, the round and the evaluation."""
    add_common(p)
    p.add_argument("--train", default="0:64", help="training questions START:STOP of --data (default 0:64)")
    p.add_argument("--eval", default="100:200", help="evaluation questions START:STOP, disjoint (default 100:200)")
    p.add_argument("--objective", default="dpo",  # the objectives that train on the rollouts' pairs or episodes
                   choices=[n for n, o in OBJECTIVES.items() if o.data in ("pairs", "episodes")])
    p.add_argument("--max-steps", type=int, default=12, help="optimiser steps per round at most (0: no cap)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-t-max", type=int, default=8, help="T_max of the evaluation episodes")
    p.add_argument("--rollouts-from", default=None, metavar="URL",
                   help="use the rollout episodes of the training questions in this store instead of rolling out")
    p.add_argument("--out", type=Path, required=True, help="folder for the state, stores, adapters and report")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes for the rollouts and the evaluations, each loading the model once (default 1: "
                        "in this process); the rounds run in this process. One thread each unless policy.threads")
    p.add_argument("--rows-from", type=Path, default=None, metavar="DIR",
                   help="another ablation's --out folder: reuse its base row and every variant with the same weights "
                        "(e.g. presets' full = schedules' time-dynamic) when config, slices, budget and rollouts "
                        "match; without --rollouts-from, its rollout store is used")


def plan_settings(args: argparse.Namespace) -> dict:
    if args.corpus_from:
        raise ConfigError("--corpus-from is not supported here: the corpus is --data's passages (env.corpus)")
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    rollouts_from = args.rollouts_from
    if args.rows_from and not rollouts_from:  # the other run's rollout store, so that its rows can match
        from training.ablation.pipeline import load_state

        held = load_state(args.rows_from).get("rollouts")
        if not held:
            raise ConfigError(f"{args.rows_from} holds no finished ablation rollouts (state.json)")
        rollouts_from = held["store"]
    return {"data": args.data.resolve(), "train": parse_slice(args.train), "eval": parse_slice(args.eval),
            "out": args.out.resolve(), "objective": args.objective, "max_steps": args.max_steps, "seed": args.seed,
            "eval_t_max": args.eval_t_max, "rollouts_from": rollouts_from}


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="reward ablations: re-score one rollout set per variant, train, evaluate, table",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ablation", choices=["schedules", "presets"])
    add_pipeline_args(p)
    p.add_argument("--variants", default=None, metavar="A,B",
                   help="only these variants (the reference row is always run; \"\" : the reference alone)")
    p.add_argument("--resamples", type=int, default=10_000, help="paired-bootstrap resamples")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.env.scheduler import WeightTable
    from training.ablation.pipeline import AblationPlan, run_ablation
    from training.ablation.report import write_report
    from training.ablation.variants import ablation

    cfg = config_from_args(args)
    chosen = ablation(args.ablation, WeightTable.from_config(cfg.weights))
    if args.variants is not None:  # "" : the reference row alone
        chosen = chosen.only(tuple(v.strip() for v in args.variants.split(",") if v.strip()))
    settings = plan_settings(args)
    plan = AblationPlan(name=chosen.name, variants=chosen.variants, reference=chosen.reference, **settings)

    def show(name: str, record: dict) -> None:
        ev = record.get("eval")
        line = (f"F1 {ev['f1']:.3f} EM {ev['em']:.3f} steps {ev['avg_steps']:.2f}" if ev
                else f"no adapter: {record['round'].get('error')}")
        source = record.get("reused_from")
        reused = f" (reused: {source['variant']} of {source['run']})" if source else ""
        print(f"evorag ablate: {name}: {record['store']['pairs']} pairs, {line}{reused}", file=sys.stderr)

    state = run_ablation(plan, cfg, home_from_args(args), on_variant=show, workers=args.workers,
                         rows_from=args.rows_from)
    report = write_report(state, plan.out, args.resamples)
    if args.json:
        print_json(report)
    else:
        print((plan.out / "ablation.md").read_text())
        print(f"written: {', '.join(str(v) for k, v in report['files'].items() if not k.endswith('error'))}")
        if "png_error" in report["files"]:
            print(f"PNG export failed ({report['files']['png_error']}); the HTML figure is written")
    return 0
