"""`evorag worker`: the background training worker (claims queued rounds with a lease; see training/worker.py)."""
from __future__ import annotations

import argparse
import os

from evorag_core.errors import ConfigError
from evorag_core.cli.common import add_common, config_from_args, home_from_args, print_json

__all__ = ["add_parser", "main", "db_url_from_args"]


def db_url_from_args(args: argparse.Namespace, home) -> str:
    """--db, else $EVORAG_DB_URL, else the SQLite file in the home folder (as the studio does)."""
    return getattr(args, "db", None) or os.environ.get("EVORAG_DB_URL") or f"sqlite:///{home / 'evorag.db'}"


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="run queued training rounds (a separate, crash-safe process)")
    add_common(p, data=False)
    p.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
    p.add_argument("--model", default=None, help="policy model: 'embedded', a local folder or a hub id")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="reap expired leases, run at most one queued round, exit")
    when.add_argument("--drain", action="store_true",
                      help="run queued rounds until none is left (rounds they queue included, e.g. evaluations), exit")
    p.add_argument("--poll", type=float, default=2.0, metavar="S", help="seconds between polls when idle (default 2)")
    p.add_argument("--lease", type=float, default=None, metavar="S", help="lease length (default [train] lease_seconds)")
    return p


def main(args: argparse.Namespace) -> int:
    from training.worker import WorkerOptions, run_worker

    cfg = config_from_args(args, {"policy.model": args.model})
    home = home_from_args(args)
    lease = args.lease if args.lease is not None else float(cfg.train.lease_seconds)
    if lease <= 0 or args.poll <= 0:
        raise ConfigError("--lease and --poll must be positive")
    count = run_worker(cfg, home, db_url_from_args(args, home), WorkerOptions(lease_s=lease, poll_s=args.poll,
                                                                                 once=args.once, drain=args.drain))
    if args.json:
        print_json({"rounds": count})
    return 0
