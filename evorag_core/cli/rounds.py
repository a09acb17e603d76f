"""`evorag rounds list [--json] | cancel ID | log ID [--follow]`: the training rounds in the store, cancelling one,
and a round's log.

Cancel: a queued round is cancelled at once (it never starts); a running one gets a cancel request that its worker
reads at its next training step, then it ends the round `cancelled` with its pairs back in the queue and no adapter.

Log: the lines its worker stored for the round (claim, phases, steps, warnings, a failure's traceback, the outcome;
evorag_core/store/round_logs.py), oldest first, as `2026-11-26 23:15:21 INFO     message` (UTC); lines the store
left out of a long round show as `… N lines left out …`. `--follow` prints new lines as they arrive until the round
has ended (exit 0 if it succeeded, 1 if it failed or was cancelled). `--json`: one JSON object per line (JSON Lines).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from evorag_core.errors import ConfigError, StoreError
from evorag_core.cli.common import add_common, home_from_args, print_json
from evorag_core.cli.train import round_json
from evorag_core.cli.worker import db_url_from_args

__all__ = ["add_parser", "main", "print_log", "log_text", "FOLLOW_GRACE_S"]

_DONE = ("succeeded", "failed", "cancelled")
# after its round has ended, a worker writes its last lines (the outcome) within a second: --follow waits this long
FOLLOW_GRACE_S = 3.0


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="list training rounds, cancel one, or print its log")
    actions = p.add_subparsers(dest="rounds_action", required=True, metavar="ACTION")
    for action, text in (("list", "the newest rounds first"),
                         ("cancel", "cancel a queued round, or ask the worker to stop a running one"),
                         ("log", "a round's log lines, as its worker stored them")):
        q = actions.add_parser(action, help=text)
        add_common(q, data=False)
        q.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
        if action == "list":
            q.add_argument("--limit", type=int, default=20, help="how many rounds (default 20)")
        else:
            q.add_argument("round_id", type=int, metavar="ID", help="round id (see `evorag rounds list`)")
        if action == "log":
            q.add_argument("--follow", "-f", action="store_true", help="print new lines until the round has ended")
            q.add_argument("--poll", type=float, default=1.0, help="seconds between reads with --follow (default 1)")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.store import open_store

    with open_store(db_url_from_args(args, home_from_args(args))) as store:
        if args.rounds_action == "list":
            _list(store.list_rounds(limit=args.limit), args.json)
            return 0
        if args.rounds_action == "log":
            return print_log(store, args.round_id, follow=args.follow, poll_s=args.poll, as_json=args.json)
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


def log_text(line: Any) -> str:
    """`2026-11-26 23:15:21 INFO     message`, a multi-line message's further lines indented under it."""
    when = line.created_at.strftime("%Y-%m-%d %H:%M:%S")
    return f"{when} {line.level:<8} " + line.message.replace("\n", "\n" + " " * 29)


def _print_lines(lines: list, after_seq: int, as_json: bool, out: TextIO) -> int:
    """Print `lines` (the ones after seq `after_seq`), a gap in seq as the lines left out; returns the last seq."""
    for line in lines:
        if as_json:
            out.write(json.dumps({"round_id": line.round_id, "seq": line.seq, "time": line.created_at.isoformat(),
                                  "level": line.level, "message": line.message}, ensure_ascii=False) + "\n")
        else:
            if line.seq > after_seq + 1:
                out.write(f"… {line.seq - after_seq - 1} lines left out …\n")
            out.write(log_text(line) + "\n")
        after_seq = line.seq
    out.flush()
    return after_seq


def print_log(store: Any, round_id: int, *, follow: bool = False, poll_s: float = 1.0, as_json: bool = False,
              out: TextIO | None = None) -> int:
    """Print round `round_id`'s stored log; with `follow`, new lines as they come until the round has ended (and its
    worker's last lines are in: FOLLOW_GRACE_S). Exit status: 0, or with `follow` 1 when it failed or was cancelled."""
    out = out or sys.stdout
    try:
        r = store.get_round(round_id)
    except KeyError:
        raise ConfigError(f"no round {round_id}; see `evorag rounds list`") from None
    seq = _print_lines(store.round_log(round_id), 0, as_json, out)
    if not follow:
        if seq == 0 and not as_json:
            print(f"round {round_id} ({r.status_label}) has no log lines yet", file=sys.stderr)
        return 0
    ended_at: float | None = None
    try:
        while True:
            r = store.get_round(round_id)
            if r.status in _DONE and ended_at is None:
                ended_at = time.monotonic()
            seq = _print_lines(store.round_log(round_id, after_seq=seq), seq, as_json, out)
            if ended_at is not None and time.monotonic() - ended_at >= FOLLOW_GRACE_S:
                break
            time.sleep(poll_s if ended_at is None else min(poll_s, 0.5))
    except KeyboardInterrupt:
        return 130
    if not as_json:
        print(f"round {round_id} {r.status_label}", file=sys.stderr)
    return 0 if r.status == "succeeded" else 1
