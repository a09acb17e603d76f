"""`evorag rollout`: sibling-branch rollouts of the LM policy; episodes, candidates and pairs go to the store.

Each episode is written as soon as it is finished (episode, then its pairs); Ctrl-C keeps every finished episode
and its pairs (a write in progress is completed before the interrupt takes effect).
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from evorag_core.cli.common import add_common, config_from_args, home_from_args, print_json
from evorag_core.cli.worker import db_url_from_args

__all__ = ["add_parser", "main", "deferred_interrupt"]

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="sibling-branch rollouts: store episodes, candidates and preference pairs")
    add_common(p)
    p.add_argument("--limit", type=int, default=None, help="first N questions of the data file (default: all)")
    p.add_argument("--offset", type=int, default=0, help="skip the first N questions")
    p.add_argument("--siblings", type=int, default=None, help="K candidates per branch state (default rollout.siblings)")
    p.add_argument("--stage", choices=["discovery", "refinement"], default=None)
    p.add_argument("--t-max", type=int, default=None, help="T_max of the rollout episodes (default rollout.t_max)")
    p.add_argument("--max-states", type=int, default=None, help="branch states per episode (default rollout.max_states)")
    p.add_argument("--resume", action="store_true",
                   help="skip questions that already have a rollout episode of this policy in the database")
    p.add_argument("--adapter", type=Path, default=None, help="LoRA adapter folder to roll out with (default: base model)")
    p.add_argument("--db", default=None, metavar="URL",
                   help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
    return p


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold SIGINT until the block is done (main thread only; elsewhere it does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[object] = []
    previous = signal.signal(signal.SIGINT, lambda *a: caught.append(a))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            raise KeyboardInterrupt


def main(args: argparse.Namespace) -> int:
    from evorag_core.data.datasets import load_dataset
    from evorag_core.evaluation.traces import run_name
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.pairs.rollout import run_rollouts
    from evorag_core.pairs.selection import PairSelector
    from evorag_core.runtime import Runtime
    from evorag_core.store import open_store

    cfg = config_from_args(args, {"reward.stage": args.stage, "rollout.siblings": args.siblings,
                                  "rollout.t_max": args.t_max, "rollout.max_states": args.max_states})
    if cfg.rollout.t_max > 0:
        cfg = replace(cfg, env=replace(cfg.env, t_max=cfg.rollout.t_max))
    home = home_from_args(args)
    dataset = load_dataset(args.data)
    questions = dataset.questions[args.offset:]
    questions = questions[: args.limit] if args.limit is not None else questions
    runtime = Runtime(cfg, home, dataset)
    backend = TransformersBackend(cfg.policy, home)
    policy_name = f"lm:{backend.model_id}"
    if args.adapter is not None:
        backend.load_adapter("rollout", args.adapter)
        backend.activate("rollout")
        policy_name += f"+{args.adapter.name}"
    policy = LMPolicy(backend, cfg.policy, cfg.answer)
    store = open_store(db_url_from_args(args, home))
    if args.resume:
        questions = [q for q in questions if not store.list_episodes(question_id=q.id, policy=policy_name, limit=1)]
    selector = PairSelector(balance_ratio=cfg.rollout.balance_ratio)
    stats = selector.stats
    start, interrupted = time.perf_counter(), False

    def progress(question, saved) -> None:
        log.info("%d/%d %s: episode %d, %d steps, %d candidates, %d pairs (%.0f s so far)", stats.episodes,
                 len(questions), question.id, saved.episode_id, saved.steps, saved.candidates, len(saved.pair_ids),
                 time.perf_counter() - start)

    try:
        run_rollouts(questions, runtime.make_env, policy, store, cfg.rollout, selector, policy_name=policy_name,
                     stage=cfg.reward.stage, write_guard=deferred_interrupt, on_episode=progress,
                     run=run_name("rollout", dataset.name), adapter=args.adapter.name if args.adapter else None,
                     data_path=str(dataset.path))
    except KeyboardInterrupt:
        interrupted = True
        print("evorag rollout: interrupted; finished episodes are stored", file=sys.stderr)
    finally:
        selector.finish()
        store.close()
    minutes = (time.perf_counter() - start) / 60
    out = {**stats.as_dict(), "pairs": stats.pairs_kept, "minutes": round(minutes, 3),
           "pairs_per_minute": round(stats.pairs_kept / minutes, 2) if minutes > 0 else None,
           "interrupted": interrupted, "db": store.url, "siblings": cfg.rollout.siblings, "t_max": cfg.env.t_max,
           "stage": cfg.reward.stage}
    if args.json:
        print_json(out)
    else:
        print(f"stored {stats.episodes} episodes, {stats.steps} steps, {stats.candidates} candidates, "
              f"{stats.pairs_kept} pairs ({out['pairs_per_minute']} pairs/minute) in {store.url}")
        print(f"pairs: {stats.pairs_built} over the margin, {stats.dropped_duplicate} duplicates and "
              f"{stats.dropped_balance} dropped for greedy-side balance; greedy chosen/rejected "
              f"{stats.greedy_chosen}/{stats.greedy_rejected}")
    return 130 if interrupted else 0
