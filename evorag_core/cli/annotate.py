"""`evorag annotate import FILE | from-rollouts | export --out F [--min-agreement X] [--format trl|hf]
[--include-disagreements] | status`:
the annotation queue the studio's Annotate tab works through (evorag_core/store/annotations.py).

- `import FILE`: JSON lines, one item each (evorag_core/pairs/annotation_items.py documents them); a malformed line
  is an error naming the line and field, and nothing is imported.
- `from-rollouts [--data FILE] [--run NAME]`: an item per stored rollout state with 2+ sibling candidates (and a
  refusal item per judged step); run again, it adds only states not queued yet.
- `export --out F`: the labels as preference pairs (TRL JSON lines, or a Hugging Face `datasets` folder with
  `--format hf`); `evorag pairs import F` queues a TRL file for training. Agreeing annotators give each pair once;
  unresolved disagreements are left out, and the message says how many (`--include-disagreements` writes their
  possibly contradictory pairs, with a warning on stderr).
- `status`: items, labels, per-annotator counts and agreement (pairwise, Cohen's and Fleiss' kappa).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evorag_core.cli.common import DEFAULT_DATA, add_common, config_from_args, home_from_args, print_json
from evorag_core.cli.worker import db_url_from_args
from evorag_core.errors import ConfigError

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="the annotation queue: import items, make them from rollouts, export labels")
    actions = p.add_subparsers(dest="annotate_action", required=True, metavar="ACTION")
    imp = actions.add_parser("import", help="queue the items of a JSON-lines file (all or nothing)")
    imp.add_argument("file", type=Path)
    rol = actions.add_parser("from-rollouts", help="queue the sibling groups of stored rollouts")
    rol.add_argument("--data", type=Path, default=DEFAULT_DATA, help="data file the rollouts ran on (passage texts)")
    rol.add_argument("--run", default=None, help="only this rollout run")
    rol.add_argument("--limit", type=int, default=1000, help="newest episodes examined (default 1000)")
    exp = actions.add_parser("export", help="write the labels as preference pairs")
    exp.add_argument("--out", type=Path, required=True, help="a .jsonl file (trl) or a folder (hf)")
    exp.add_argument("--format", choices=["trl", "hf"], default="trl")
    exp.add_argument("--min-agreement", type=float, default=None, metavar="X",
                     help="only items with 2+ labels agreeing at least X (0..1); resolved items always")
    exp.add_argument("--include-disagreements", action="store_true",
                     help="also write the pairs of unresolved disagreements (they may contradict each other)")
    status = actions.add_parser("status", help="items, labels and agreement")
    for q in (imp, rol, exp, status):
        add_common(q, data=False)
        q.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.store import open_store

    with open_store(db_url_from_args(args, home_from_args(args))) as store:
        out, message = _ACTIONS[args.annotate_action](args, store)
    if args.json:
        print_json(out)
    else:
        print(message)
    return 0


def _import(args, store):
    from evorag_core.pairs.annotation_items import import_items

    ids = import_items(store, args.file)
    return {"imported": len(ids), "ids": ids}, f"queued {len(ids)} items from {args.file}"


def _from_rollouts(args, store):
    from evorag_core.data.datasets import load_dataset
    from evorag_core.pairs.annotation_items import rollout_items

    passages = {p.pid: p for q in load_dataset(args.data).questions for p in q.passages}
    found = rollout_items(store, passages, run=args.run, limit=args.limit)
    ids = store.add_annotation_items(found)
    kinds = {k: sum(1 for i in found if i.kind == k) for k in ("preference", "refusal")}
    return ({"found": len(found), "queued": len(ids), **kinds},
            f"queued {len(ids)} new items ({len(found)} found: {kinds['preference']} preference, "
            f"{kinds['refusal']} refusal)")


def _export(args, store):
    from evorag_core.pairs.annotation_export import export_annotations

    x = args.min_agreement
    if x is not None and not 0.0 <= x <= 1.0:
        raise ConfigError(f"--min-agreement must be between 0 and 1; got {x}")
    report = export_annotations(store, args.out, fmt=args.format, min_agreement=x,
                                include_disagreements=args.include_disagreements)
    message = f"wrote {report.pairs} pairs to {args.out} ({args.format})"
    if report.left_out:
        message += (f"; left out {_items(report.left_out)} whose annotators disagree and no reviewer resolved "
                    "(resolve them in the studio's Review tab, or pass --include-disagreements)")
    if report.included:
        print(f"warning: the export includes the pairs of {_items(report.included)} whose annotators disagree and "
              "no reviewer resolved: they may contradict each other", file=sys.stderr)
    return ({"pairs": report.pairs, "left_out_disagreements": report.left_out,
             "included_disagreements": report.included, "out": str(args.out), "format": args.format,
             "min_agreement": x}, message)


def _items(n: int) -> str:
    return f"{n} item{'s' if n != 1 else ''}"


def _status(args, store):
    from evorag_core.pairs.annotation_export import disagreements, labelled_items, queue_agreement

    cfg = config_from_args(args)
    items = labelled_items(store)
    report = queue_agreement(items)
    per: dict[str, int] = {}
    for label in store.annotation_labels():
        per[label.annotator] = per.get(label.annotator, 0) + 1
    out = {
        **store.annotation_counts(), "annotators_per_item": cfg.annotate.annotators_per_item,
        "labels_by_annotator": per, "items_compared": report.items_compared,
        "mean_agreement": report.mean_agreement, "fleiss_kappa": report.fleiss,
        "cohen_kappa": {f"{a}/{b}": k for (a, b), k in report.cohen.items()},
        "disagreements": len(disagreements(items)),
    }
    lines = [f"{k}: {v}" for k, v in out.items()]
    return out, "\n".join(lines)


_ACTIONS = {"import": _import, "from-rollouts": _from_rollouts, "export": _export, "status": _status}
