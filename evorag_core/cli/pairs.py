"""`evorag pairs export|import`: preference pairs as JSON lines in TRL's conversational DPO format.
`evorag pairs answers`: queue answer pairs made from the store's episodes (training/answer_pairs.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evorag_core.cli.common import add_common, config_from_args, home_from_args, print_json
from evorag_core.cli.worker import db_url_from_args
from evorag_core.store.records import PAIR_SOURCES

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="export or import preference pairs (TRL conversational DPO format + metadata)")
    actions = p.add_subparsers(dest="pairs_action", required=True, metavar="ACTION")
    exp = actions.add_parser("export", help="write the store's pairs as JSON lines")
    exp.add_argument("--out", type=Path, required=True, help="output .jsonl file")
    exp.add_argument("--status", default="queued", choices=["queued", "claimed", "consumed", "discarded", "all"],
                     help="which pairs (default queued)")
    exp.add_argument("--source", choices=PAIR_SOURCES, default=None)
    exp.add_argument("--stage", choices=["discovery", "refinement"], default=None)
    imp = actions.add_parser("import", help="queue the pairs of an exported file (all or nothing)")
    imp.add_argument("file", type=Path, help="a .jsonl file written by `evorag pairs export`")
    ans = actions.add_parser(
        "answers", help="queue answer pairs: at the stored episodes' answer states, the reader's candidate nearest the "
                        "gold over a wrong one (source 'answer': `evorag train --objective dpo --source answer`)")
    ans.add_argument("--states", choices=["final", "all"], default="final",
                     help="the state each episode answered from (default), or every state")
    ans.add_argument("--against", choices=["random", "top"], default="random",
                     help="the wrong candidate: a seeded random one (default: measured better) or the reader's top")
    ans.add_argument("--max-pairs", type=int, default=1, help="pairs per state (default 1)")
    ans.add_argument("--episodes", default="", metavar="ID[,ID]",
                     help="these episodes (default: every finished episode that is not an evaluation's)")
    ans.add_argument("--data", type=Path, default=None,
                     help="data file for questions (gold, passages) the store does not hold")
    for q in (exp, imp, ans):
        add_common(q, data=False)
        q.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.pairs.io import export_pairs, import_pairs
    from evorag_core.store import open_store

    if args.pairs_action == "answers":
        return _answers(args)
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


def _answers(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from evorag_core.lm.backends import policy_backend
    from evorag_core.policy.agent import reader_passages
    from evorag_core.reader.answers import Reader
    from evorag_core.store import open_store
    from training.answer_pairs import make_answer_pairs

    if args.max_pairs < 1:
        raise SystemExit(f"evorag pairs answers: --max-pairs must be at least 1, got {args.max_pairs}")
    try:
        episode_ids = [int(i) for i in args.episodes.split(",") if i.strip()]
    except ValueError:
        raise SystemExit(f"evorag pairs answers: --episodes expects comma-separated ids, got {args.episodes!r}")
    cfg, home = config_from_args(args), home_from_args(args)
    reader = Reader(policy_backend(cfg.policy, home), cfg.answer, cfg.policy.passage_chars).span
    if reader is None:
        raise SystemExit("evorag pairs answers: answer pairs need the span reader (answer.mode = \"span\")")
    with open_store(db_url_from_args(args, home)) as store, tqdm(desc="episodes", unit="ep", file=sys.stderr) as bar:
        def step(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        report = make_answer_pairs(store, reader, lambda v: reader_passages(v, cfg.policy.reader_passages),
                                   t_max=cfg.env.t_max, data=str(args.data) if args.data else None,
                                   states=args.states, against=args.against, max_pairs=args.max_pairs,
                                   episode_ids=episode_ids, on_episode=step)
    ids = report.pair_ids
    out = {"queued": len(ids), "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None,
           "episodes": report.episodes, "already_paired": report.already, "no_gold": report.no_gold,
           "states": report.states, "no_passages": report.no_passages, "source": "answer"}
    if args.json:
        print_json(out)
    else:
        print(f"queued {len(ids)} answer pair(s) from {report.states} state(s) of {report.episodes} episode(s) "
              f"({report.already} already paired, {report.no_gold} without a gold answer, "
              f"{report.no_passages} state(s) with no passage to read); "
              "train them with `evorag train --objective dpo --source answer`")
    return 0
