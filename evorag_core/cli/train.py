"""`evorag train`: queue a training round for the worker (and follow it), or run the two-stage curriculum.

    evorag train --objective dpo|grpo|ppo|arena-grpo|r2ag-grpo [--pairs N] [--epochs E] [--lr LR] [--kl k2|k3]
                 [--seed S] [--set train.KEY=VALUE ...] [--wait]
    evorag train --objective dynakrag [--data FILE]       (fitted in this process; the studio queues it instead)
    evorag train --curriculum [--rounds N] [--train-questions M] [--dev D] [--single-stage STAGE] [--state FILE]
                 [--corpus-from FILE ...]

A queued round runs in `evorag worker` (a separate process); `--wait` follows it to the end with a progress bar on
stderr and exits 0 when it succeeded, 1 when it failed or was cancelled. A round whose worker died is queued again
until it has had train.max_attempts attempts (default 2). The round's job carries the flags' values and every
`--set train.KEY=VALUE` given here (but the queue's and the worker's own: lease_seconds, max_attempts); the worker's
config gives the rest.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from evorag_core.config import Config, apply_overrides
from evorag_core.errors import ConfigError
from evorag_core.objectives import OBJECTIVES
from evorag_core.cli.common import add_common, config_from_args, home_from_args, print_json
from evorag_core.cli.worker import db_url_from_args
from evorag_core.store.records import PAIR_SOURCES

if TYPE_CHECKING:
    from evorag_core.store import Round, Store

__all__ = ["add_parser", "main", "follow_round", "progress_line", "round_json"]

_DONE = ("succeeded", "failed", "cancelled")


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="queue a training round (DPO, GRPO, PPO) or run the curriculum")
    add_common(p, data=False)
    p.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
    p.add_argument("--model", default=None, help="policy model: 'embedded', a local folder or a hub id")
    p.add_argument("--objective", choices=list(OBJECTIVES), default=None,
                   help="default [train] objective (arena-grpo: ARENA's GRPO on --data questions; "
                        "dynakrag: fit the DynaKrag controller on --data, in this process)")
    p.add_argument("--pairs", type=int, default=None, help="DPO: queued pairs to claim (default 64)")
    p.add_argument("--episodes", type=int, default=None, help="GRPO/PPO: newest stored episodes to read (default 32)")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--kl", choices=["k2", "k3"], default=None, help="GRPO's KL estimator")
    p.add_argument("--beta", type=float, default=None, help="DPO's beta")
    p.add_argument("--seed", type=int, default=None, help="the round's training seed (default [train] seed)")
    p.add_argument("--reference", default=None,
                   help="previous (default: the live adapter, else the base model) | base | active | <adapter name>")
    p.add_argument("--source", choices=PAIR_SOURCES, default=None, help="DPO: only pairs of this source")
    p.add_argument("--stage", choices=["discovery", "refinement"], default=None, help="only pairs/episodes of a stage")
    p.add_argument("--holdout", type=float, default=None, help="DPO: share of states held out for pair accuracy")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many optimiser steps")
    p.add_argument("--wait", action="store_true", help="follow the round to its end (progress on stderr)")
    p.add_argument("--curriculum", action="store_true", help="rollout -> pairs -> preference model -> update -> dev eval")
    p.add_argument("--data", type=Path, default=None,
                   help="curriculum: data file (default: the bundled demo set); arena-grpo, r2ag-grpo: the questions to "
                        "train on")
    p.add_argument("--rounds", type=int, default=None, help="curriculum: round budget (default [curriculum] max_rounds)")
    p.add_argument("--train-questions", type=int, default=8, help="curriculum: rollout questions per round")
    p.add_argument("--dev", type=int, default=8, help="curriculum: dev questions evaluated after each round")
    p.add_argument("--single-stage", choices=["discovery", "refinement"], default=None,
                   help="curriculum: every round in this stage for the whole --rounds budget (no switch; the "
                        "single-stage baseline)")
    p.add_argument("--state", type=Path, default=None, metavar="FILE",
                   help="curriculum: append each finished round's record to FILE (JSON lines) and resume from it")
    p.add_argument("--corpus-from", dest="corpus_from", type=Path, action="append", default=[], metavar="FILE",
                   help="curriculum: retrieve from the pooled passages of these data files instead of --data's own "
                        "(repeatable)")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between progress polls with --wait")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.store import open_store

    cfg = config_from_args(args, {"policy.model": args.model, "train.objective": args.objective})
    home = home_from_args(args)
    for value, what in ((args.pairs, "--pairs"), (args.episodes, "--episodes"), (args.epochs, "--epochs"),
                        (args.rounds, "--rounds"), (args.max_steps, "--max-steps")):
        _check(value, what)
    _check_train_flags(args, cfg)
    if args.curriculum:
        from training.curriculum import run_curriculum_command

        return run_curriculum_command(args, cfg, home, db_url_from_args(args, home))
    if OBJECTIVES[cfg.train.objective].in_process:  # dynakrag: fitted here (the studio queues it for the worker)
        from evorag_core.methods.dynakrag.training import train_command

        return train_command(args.data, cfg, home, as_json=args.json)
    from training.job import job_config

    objective = cfg.train.objective
    config = job_config(
        objective, pairs=args.pairs, episodes=args.episodes, epochs=args.epochs, lr=args.lr, kl=args.kl,
        beta=args.beta, seed=args.seed, reference=args.reference, source=args.source, stage=args.stage,
        holdout=args.holdout, max_steps=args.max_steps, base_model=args.model,
        data=str(args.data) if args.data else None, train=_train_sets(args, cfg) or None,
    )
    _check_job(objective, config, cfg, home)
    with open_store(db_url_from_args(args, home)) as store:
        round_id = store.enqueue_round(objective, config, max_attempts=cfg.train.max_attempts)
        if not args.wait:
            if args.json:
                print_json(round_json(store.get_round(round_id)))
            else:
                print(f"round {round_id} queued ({objective}); run `evorag worker` to train it")
            return 0
        final = follow_round(store, round_id, stream=sys.stderr, poll_s=args.poll)
        if args.json:
            print_json(round_json(final))
        else:
            _print_summary(final)
        return 0 if final.status == "succeeded" else 1


def progress_line(r: Round, width: int = 30) -> str:
    """`round 3 dpo [#####.....] 5/10 loss 0.6931 eta 12s running`."""
    prog = r.progress or {}
    step, total = prog.get("step") or 0, prog.get("total")
    filled = int(width * step / total) if total else 0
    bar = "#" * filled + "." * (width - filled)
    parts = [f"round {r.id} {r.objective} [{bar}] {step}/{total if total else '?'}"]
    if prog.get("loss") is not None:
        parts.append(f"loss {float(prog['loss']):.4f}")
    if prog.get("eta") is not None:
        parts.append(f"eta {float(prog['eta']):.0f}s")
    parts.append(r.status if r.status != "running" else f"{r.status_label} ({prog.get('phase', 'train')})")
    return " ".join(parts)


def follow_round(store: Store, round_id: int, *, stream: TextIO, poll_s: float = 1.0) -> Round:
    """Redraw the progress line on `stream` until the round is succeeded, failed or cancelled; returns it."""
    waited = time.monotonic()
    hinted = False
    while True:
        r = store.get_round(round_id)
        stream.write("\r" + progress_line(r).ljust(100))
        stream.flush()
        if r.status in _DONE:
            stream.write("\n")
            stream.flush()
            return r
        if r.status == "queued" and not hinted and time.monotonic() - waited > 10:
            stream.write("\n(still queued: is a worker running? start one with `evorag worker`)\n")
            hinted = True
        time.sleep(poll_s)


def round_json(r: Round) -> dict[str, Any]:
    metrics = r.metrics or {}
    return {"round_id": r.id, "objective": r.objective, "status": r.status, "attempts": r.attempts,
            "error": r.error, "adapter": metrics.get("adapter"), "progress": r.progress, "metrics": metrics}


def _print_summary(r: Round) -> None:
    if r.status != "succeeded":
        print(f"round {r.id} {r.status}: {r.error or 'no error recorded'}")
        return
    m = r.metrics or {}
    keys = ("steps", "first_loss", "final_loss", "final_rewards_accuracies", "final_rewards_margins",
            "heldout_accuracy", "final_kl", "wall_s", "peak_rss_mb")
    shown = ", ".join(f"{k}={m[k]:.4g}" if isinstance(m[k], float) else f"{k}={m[k]}" for k in keys if k in m)
    print(f"round {r.id} succeeded: adapter {m.get('adapter')} ({shown})")
    if m.get("adapter"):
        print(f"activate it with: evorag adapters activate {m['adapter']}")


def _check(value: int | None, what: str) -> None:
    if value is not None and value < 1:
        raise ConfigError(f"{what} must be at least 1")


_TRAIN_FLAGS = {"lr": "train.lr", "beta": "train.beta"}  # flags that set a [train] value for the round
# [train] keys that are not the round's to carry: its objective (the job's own), and the queue's and the worker's
_NOT_CARRIED = ("objective", "lease_seconds", "max_attempts")


def _train_sets(args: argparse.Namespace, cfg: Config) -> dict[str, Any]:
    """The [train] values this command's `--set train.KEY=VALUE` gave, as the config parsed them: the round's job
    carries them (`train: {...}`), so the worker trains with them whatever its own config says (before, they were
    read here and dropped: a round queued with `--set train.seed=1` trained at the worker's seed)."""
    keys = (item.partition("=")[0].strip() for item in args.overrides)
    named = dict.fromkeys(k.removeprefix("train.") for k in keys if k.startswith("train."))
    return {k: getattr(cfg.train, k) for k in named if k not in _NOT_CARRIED}


def _check_train_flags(args: argparse.Namespace, cfg: Config) -> None:
    """--lr and --beta by the [train] RULES a `--set train.KEY=VALUE` meets (finite, > 0): ConfigError naming the
    flag, before anything is queued."""
    for flag, key in _TRAIN_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            try:
                apply_overrides(cfg, {key: value})
            except ConfigError as exc:
                raise ConfigError(f"--{flag}: {exc}; nothing queued") from None


def _check_job(objective: str, config: dict[str, Any], cfg: Config, home: Path) -> None:
    """The round's job read as the worker will read it (training.launch.check_job, as the studio's Launch does): a
    value the worker would fail the round for (--holdout outside [0, 1), say) is refused here instead, and nothing
    is queued."""
    from training.launch import check_job

    try:
        check_job(objective, config, cfg, home)
    except ConfigError as exc:
        raise ConfigError(f"the worker would refuse this round: {exc}; nothing queued") from None
