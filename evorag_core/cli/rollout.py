"""`evorag rollout`: sibling-branch rollouts of the LM policy; episodes, candidates and pairs go to the store.

Each episode is written as soon as it and the episodes before it are finished (episode, then its pairs); Ctrl-C
keeps every stored episode and its pairs (a write in progress is completed before the interrupt takes effect).
`--executor local --workers N` runs N worker processes, `--executor ray` Ray actors (pairs/executors.py).
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
from typing import Iterator

from evorag_core.cli.common import add_common, config_from_args, home_from_args, print_json
from evorag_core.cli.worker import db_url_from_args
from evorag_core.errors import ConfigError
from evorag_core.pairs.executors import EXECUTORS

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
    p.add_argument("--adapter", default=None,
                   help="LoRA adapter to roll out with, a folder or a registered name; a registered reader adapter "
                        "reads the answers only (default: base model)")
    p.add_argument("--db", default=None, metavar="URL",
                   help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
    p.add_argument("--executor", choices=list(EXECUTORS), default="local",
                   help="local: this process (--workers 1) or a process pool; ray: Ray actors (pip extra [ray])")
    p.add_argument("--workers", type=int, default=1, help="rollout workers, each with its own model and index")
    p.add_argument("--threads", type=int, default=None, help="torch threads per worker (default: cores // workers)")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join: auto or ray://HOST:10001 (default: start a local Ray for this run)")
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
    from evorag_core.adapters.resolve import resolve_adapter
    from evorag_core.adapters.role import POLICY, applied
    from evorag_core.data.datasets import load_dataset
    from evorag_core.evaluation.traces import run_name
    from evorag_core.lm.loading import base_model_id
    from evorag_core.pairs.executors import (RolloutWorker, WorkerSpec, local_results, policy_name, results_for,
                                             store_rollouts, warm)
    from evorag_core.pairs.selection import PairSelector
    from evorag_core.store import open_store

    cfg = config_from_args(args, {"reward.stage": args.stage, "rollout.siblings": args.siblings,
                                  "rollout.t_max": args.t_max, "rollout.max_states": args.max_states})
    if cfg.rollout.t_max > 0:
        cfg = replace(cfg, env=replace(cfg.env, t_max=cfg.rollout.t_max))
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    home = home_from_args(args)
    source = resolve_adapter(args.adapter, home, db_url_from_args(args, home)) if args.adapter else None
    cfg, adapter = applied(cfg, source.folder if source else None, source.role if source else POLICY)
    dataset = load_dataset(args.data)
    spec = WorkerSpec(cfg, str(home), str(dataset.path), tuple(str(p) for p in args.corpus_from), adapter,
                      cfg.reward.stage, args.threads, adapter_checksum=source.checksum if adapter and source else None)
    indices = list(range(len(dataset.questions)))[args.offset:]
    indices = indices[: args.limit] if args.limit is not None else indices
    in_process = args.executor == "local" and args.workers == 1
    worker = RolloutWorker(spec) if in_process else None  # loaded here: the policy name comes from its backend
    name = worker.policy_name if worker else policy_name(base_model_id(cfg.policy.model, home), spec.adapter,
                                                         cfg.answer.adapter)
    store = open_store(db_url_from_args(args, home))
    if args.resume:
        indices = [i for i in indices
                   if not store.list_episodes(question_id=dataset.questions[i].id, policy=name, limit=1)]
    selector = PairSelector(balance_ratio=cfg.rollout.balance_ratio)
    stats = selector.stats
    start, interrupted = time.perf_counter(), False

    def progress(question, saved) -> None:
        log.info("%d/%d %s: episode %d, %d steps, %d candidates, %d pairs (%.0f s so far)", stats.episodes,
                 len(indices), question.id, saved.episode_id, saved.steps, saved.candidates, len(saved.pair_ids),
                 time.perf_counter() - start)

    try:
        if worker is not None:
            results = local_results(spec, indices, worker=worker)
        else:
            if indices:
                warm(spec)
            results = results_for(args.executor, spec, indices, args.workers, args.address)
        store_rollouts(results, indices, store, selector, spec, name, write_guard=deferred_interrupt,
                       on_episode=progress, run=run_name("rollout", dataset.name))
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
           "stage": cfg.reward.stage, "executor": args.executor, "workers": args.workers}
    if args.json:
        print_json(out)
    else:
        print(f"stored {stats.episodes} episodes, {stats.steps} steps, {stats.candidates} candidates, "
              f"{stats.pairs_kept} pairs ({out['pairs_per_minute']} pairs/minute) in {store.url}")
        print(f"pairs: {stats.pairs_built} over the margin, {stats.dropped_duplicate} duplicates and "
              f"{stats.dropped_balance} dropped for greedy-side balance; greedy chosen/rejected "
              f"{stats.greedy_chosen}/{stats.greedy_rejected}")
    return 130 if interrupted else 0
