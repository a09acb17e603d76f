"""`evorag rounds list [--json] | cancel ID`: the training rounds in the store, and cancelling one.

Cancel: a queued round is cancelled at once (it never starts); a running one gets a cancel request that its worker
reads at its next training step, then it ends the round `cancelled` with its pairs back in the queue and no adapter.
"""
from __future__ import annotations

import argparse

from evorag_core.errors import ConfigError, StoreError
from evorag_core.cli.common import add_common, home_from_args, print_json
from evorag_core.cli.train import round_json
from evorag_core.cli.worker import db_url_from_args

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="list training rounds or cancel one")
    actions = p.add_subparsers(dest="rounds_action", required=True, metavar="ACTION")
    for action, text in (("list", "the newest rounds first"),
                         ("cancel", "cancel a queued round, or ask the worker to stop a running one")):
        q = actions.add_parser(action, help=text)
        add_common(q, data=False)
        q.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
        if action == "list":
            q.add_argument("--limit", type=int, default=20, help="how many rounds (default 20)")
        else:
            q.add_argument("round_id", type=int, metavar="ID", help="round id (see `evorag rounds list`)")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.store import open_store

    with open_store(db_url_from_args(args, home_from_args(args))) as store:
        if args.rounds_action == "list":
            _list(store.list_rounds(limit=args.limit), args.json)
            return 0
        try:
            r = store.cancel_round(args.round_id)
        except KeyError:
            raise ConfigError(f"no round {args.round_id}; see `evorag rounds list`") from None
        except StoreError as exc:
            raise ConfigError(str(exc)) from None
        if args.json:
            print_json({**round_json(r), "status_label": r.status_label})
        elif r.status == "cancelled":
            print(f"round {r.id} cancelled (it had not started)")
        else:
            print(f"round {r.id}: cancel requested; its worker stops it at the next training step")
        return 0


def _list(rows: list, as_json: bool) -> None:
    if as_json:
        print_json([{**round_json(r), "status_label": r.status_label} for r in rows])
        return
    if not rows:
        print("no training rounds yet: queue one with `evorag train` or from the studio")
    for r in rows:
        prog = r.progress or {}
        step = f"step {prog.get('step') or 0}/{prog['total']}" if prog.get("total") else ""
        print(f"{r.id:>5} {r.objective:<10} {r.status_label:<28} {step}")
