"""`evorag adapters list [--json] | evaluate NAME | promote NAME | activate NAME | deactivate | soup A B --name NAME`:
the registry of trained LoRA adapters and gated promotion.

`soup` registers the mean of registered adapters of one role (evorag_core/adapters/soup.py) as a new staged adapter,
which the gate then evaluates like any round's.

`evaluate` runs the adapter against the live one (or `--against base|NAME`) on the `[promotion]` held-out slice and
stores the report (`--queue`: the worker runs it, as after a round); `promote` activates an adapter whose newest report
passed, or one that did not with `--force --reason TEXT`. Activation verifies the adapter first (files, checksum,
base model; see evorag_core/adapters/registry.py) and refuses a corrupt or incompatible one with a clear error, leaving
the active adapter as it was; `activate` of an adapter that failed its evaluation needs `--reason`. Running policy
backends that poll the store (evorag_core/adapters/watcher.py) load the newly active adapter for their next episode.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from evorag_core.errors import ConfigError
from evorag_core.cli.common import add_common, config_from_args, home_from_args, print_json
from evorag_core.cli.worker import db_url_from_args

if TYPE_CHECKING:
    from evorag_core.store import Store

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="list, activate or deactivate trained LoRA adapters")
    actions = p.add_subparsers(dest="adapters_action", required=True, metavar="ACTION")
    for action, text in (("list", "registered adapters, oldest first, with their held-out verdicts"),
                         ("evaluate", "evaluate an adapter against the live one on the [promotion] slice"),
                         ("promote", "activate an adapter whose evaluation passed (--force --reason: one that did not)"),
                         ("activate", "verify an adapter and make it the live one"),
                         ("soup", "register the mean of several adapters (one role) as a new staged adapter"),
                         ("deactivate", "use the base model (no adapter active)")):
        q = actions.add_parser(action, help=text)
        add_common(q, data=False)
        q.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
        q.add_argument("--model", default=None, help="policy model the adapter must fit (default [policy] model)")
        if action in ("evaluate", "promote", "activate"):
            q.add_argument("name", help="adapter name (see `evorag adapters list`)")
        if action == "soup":
            q.add_argument("names", nargs="+", metavar="NAME", help="the adapters to average (two or more)")
            q.add_argument("--name", dest="soup_name", required=True, help="the new adapter's name")
        if action in ("promote", "activate", "deactivate"):
            q.add_argument("--reason", default=None, help="why (stored in the activation log and shown in the studio)")
        if action == "promote":
            q.add_argument("--force", action="store_true", help="activate although its evaluation did not pass "
                                                                "(needs --reason)")
        if action == "evaluate":
            from evorag_core.promotion.gate import AGAINST_HELP

            q.add_argument("--against", default=None, help=f"{AGAINST_HELP} (default [promotion] against)")
            q.add_argument("--workers", type=int, default=None, help="evaluation processes (default [promotion] workers)")
            q.add_argument("--queue", action="store_true", help="queue the evaluation for the worker instead of "
                                                                "running it here")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.store import open_store

    cfg = config_from_args(args, {"policy.model": args.model})
    home = home_from_args(args)
    with open_store(db_url_from_args(args, home)) as store:
        if args.adapters_action == "list":
            return _list(store, args.json)
        if args.adapters_action == "evaluate":
            return _evaluate(args, cfg, home, store)
        if args.adapters_action == "deactivate":
            n = store.deactivate_adapters(who=_who(), reason=args.reason)
            _say(args, {"active": None, "deactivated": n}, "no adapter is active: the base model is live" +
                 ("" if n else " (none was active)"))
            return 0
        from evorag_core.adapters.registry import activate
        from evorag_core.lm.loading import base_model_id
        from evorag_core.promotion.gate import promote

        base_id = base_model_id(cfg.policy.model, home)
        if args.adapters_action == "soup":
            from evorag_core.adapters.soup import soup_registered

            row = soup_registered(store, args.names, args.soup_name, home, base_id)
            _say(args, {"adapter": row.name, "role": row.role, "path": row.path, "soup_of": list(args.names)},
                 f"adapter {row.name} registered, staged ({row.role}): the mean of {', '.join(args.names)}; "
                 f"evaluate it with `evorag adapters evaluate {row.name}`")
            return 0
        try:
            if args.adapters_action == "promote":
                if args.reason and not args.force:
                    raise ConfigError("--reason is for --force (a passing adapter needs no reason)")
                row = promote(store, args.name, base_id, reason=args.reason if args.force else None, who=_who())
            else:
                row = activate(store, args.name, base_id, reason=args.reason, who=_who())
        except KeyError:
            raise ConfigError(f"no adapter named {args.name!r}; see `evorag adapters list`") from None
        why = store.last_activation()
        _say(args, {"active": row.name, "path": row.path, "kind": why.kind if why else None},
             f"adapter {row.name} is active ({why.kind if why else 'activated'}; {row.path})")
        return 0


def _who() -> str:
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _evaluate(args: argparse.Namespace, cfg, home, store: Store) -> int:
    """Run (or queue) the evaluation of one adapter; prints the report's verdict and differences."""
    if args.queue:
        from evorag_core.objectives import EVALUATE_JOB

        rid = store.enqueue_round(EVALUATE_JOB, {"objective": EVALUATE_JOB, "adapter": args.name,
                                                 **({"against": args.against} if args.against else {})})
        _say(args, {"round": rid}, f"evaluation of {args.name} queued as round {rid} (the worker runs it)")
        return 0
    from evorag_core.evaluation.runner import Progress
    from evorag_core.promotion.gate import evaluate_candidate

    progress: list[Progress] = []

    def show(entry: dict) -> None:
        if not progress:
            progress.append(Progress(int(entry["total"]), desc=f"evaluate {args.name}"))
        bar = progress[0].bar
        bar.set_description_str(str(entry["phase"]))
        bar.update(int(entry["step"]) - bar.n)

    try:
        row = evaluate_candidate(store, cfg, home, args.name, against=args.against, on_progress=show,
                                 workers=args.workers)
    finally:
        for p in progress:
            p.close()
    from evorag_core.promotion.report import report_text

    live = store.active_adapter()
    if args.json:
        print_json({"promotion_id": row.id, "adapter": row.adapter, "against": row.against, "passed": row.passed,
                    "verdict": row.verdict, "live": live.name if live else None, "report": row.report})
    else:
        print(report_text(row, live.name if live else None))
    return 0


def _say(args: argparse.Namespace, obj: dict, text: str) -> None:
    if args.json:
        print_json(obj)
    else:
        print(text)


def _list(store: Store, as_json: bool) -> int:
    from evorag_core.adapters.registry import adapter_json

    from evorag_core.promotion.report import heldout_columns

    reports = store.latest_promotions()
    rows = [{**adapter_json(a), "heldout": heldout_columns(reports.get(a.name))} for a in store.list_adapters()]
    if as_json:
        print_json(rows)
        return 0
    if not rows:
        print("no adapters registered yet: a finished training round registers one")
        return 0
    width = max(9, *(len(r["objective"] or "") for r in rows))  # a soup's objective names its inputs
    print(f"{'':2}{'name':<20} {'round':>5} {'objective':<{width}} {'role':<6} {'created':<20} {'held-out F1':>11} "
          f"{'Δ':>7} {'p':>7} {'verdict':<17} metrics")
    for r in rows:
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in r["metrics"].items() if k in _SHOWN)
        h = r["heldout"]
        f1 = f"{h['score']:.3f}" if h["score"] is not None else "-"
        diff = f"{h['diff']:+.3f}" if h["diff"] is not None else "-"
        p = f"{h['p']:.3g}" if h["p"] is not None else "-"
        print(f"{'* ' if r['active'] else '  '}{r['name']:<20} {r['round'] or '':>5} {r['objective'] or '':<{width}} "
              f"{r['role']:<6} {r['created'][:19]:<20} {f1:>11} {diff:>7} {p:>7} {h['state']:<17} {shown}")
    return 0


_SHOWN = ("steps", "final_loss", "heldout_accuracy", "final_rewards_accuracies", "final_kl", "wall_s")
