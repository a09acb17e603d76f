"""`evorag pairs export|import`: preference pairs as JSON lines in TRL's conversational DPO format."""
from __future__ import annotations

import argparse
from pathlib import Path

from evorag_core.cli.common import add_common, home_from_args, print_json
from evorag_core.cli.worker import db_url_from_args

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="export or import preference pairs (TRL conversational DPO format + metadata)")
    actions = p.add_subparsers(dest="pairs_action", required=True, metavar="ACTION")
    exp = actions.add_parser("export", help="write the store's pairs as JSON lines")
    exp.add_argument("--out", type=Path, required=True, help="output .jsonl file")
    exp.add_argument("--status", default="queued", choices=["queued", "claimed", "consumed", "discarded", "all"],
                     help="which pairs (default queued)")
    exp.add_argument("--source", choices=["rollout", "human", "human-correction"], default=None)
    exp.add_argument("--stage", choices=["discovery", "refinement"], default=None)
    imp = actions.add_parser("import", help="queue the pairs of an exported file (all or nothing)")
    imp.add_argument("file", type=Path, help="a .jsonl file written by `evorag pairs export`")
    for q in (exp, imp):
        add_common(q, data=False)
        q.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.pairs.io import export_pairs, import_pairs
    from evorag_core.store import open_store

    with open_store(db_url_from_args(args, home_from_args(args))) as store:
        if args.pairs_action == "export":
            status = None if args.status == "all" else args.status
            n = export_pairs(store, args.out, status=status, source=args.source, stage=args.stage)
            out = {"exported": n, "file": str(args.out), "status": args.status, "db": store.url}
            message = f"wrote {n} pairs to {args.out}"
        else:
            ids = import_pairs(store, args.file)
            out = {"imported": len(ids), "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None,
                   "db": store.url}
            message = f"queued {len(ids)} pairs from {args.file}" + (f" (ids {ids[0]}..{ids[-1]})" if ids else "")
    if args.json:
        print_json(out)
    else:
        print(message)
    return 0
