"""`evorag adapters list [--json] | activate NAME | deactivate`: the registry of trained LoRA adapters.

Activation verifies the adapter first (files, checksum, base model; see evorag_core/adapters/registry.py) and refuses a corrupt
or incompatible one with a clear error, leaving the active adapter as it was. Running policy backends that poll the
store (evorag_core/adapters/watcher.py) load the newly active adapter for their next episode.
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
    for action, text in (("list", "registered adapters, oldest first"),
                         ("activate", "verify an adapter and make it the live one"),
                         ("deactivate", "use the base model (no adapter active)")):
        q = actions.add_parser(action, help=text)
        add_common(q, data=False)
        q.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
        q.add_argument("--model", default=None, help="policy model the adapter must fit (default [policy] model)")
        if action == "activate":
            q.add_argument("name", help="adapter name (see `evorag adapters list`)")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.store import open_store

    cfg = config_from_args(args, {"policy.model": args.model})
    home = home_from_args(args)
    with open_store(db_url_from_args(args, home)) as store:
        if args.adapters_action == "list":
            return _list(store, args.json)
        if args.adapters_action == "deactivate":
            n = store.deactivate_adapters()
            _say(args, {"active": None, "deactivated": n}, "no adapter is active: the base model is live" +
                 ("" if n else " (none was active)"))
            return 0
        from evorag_core.adapters.registry import activate
        from evorag_core.lm.loading import base_model_id

        try:
            row = activate(store, args.name, base_model_id(cfg.policy.model, home))
        except KeyError:
            raise ConfigError(f"no adapter named {args.name!r}; see `evorag adapters list`") from None
        _say(args, {"active": row.name, "path": row.path}, f"adapter {row.name} is active ({row.path})")
        return 0


def _say(args: argparse.Namespace, obj: dict, text: str) -> None:
    if args.json:
        print_json(obj)
    else:
        print(text)


def _list(store: Store, as_json: bool) -> int:
    from evorag_core.adapters.registry import adapter_json

    rows = [adapter_json(a) for a in store.list_adapters()]
    if as_json:
        print_json(rows)
        return 0
    if not rows:
        print("no adapters registered yet: a finished training round registers one")
        return 0
    print(f"{'':2}{'name':<20} {'round':>5} {'objective':<9} {'created':<20} metrics")
    for r in rows:
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in r["metrics"].items() if k in _SHOWN)
        print(f"{'* ' if r['active'] else '  '}{r['name']:<20} {r['round'] or '':>5} {r['objective'] or '':<9} "
              f"{r['created'][:19]:<20} {shown}")
    return 0


_SHOWN = ("steps", "final_loss", "heldout_accuracy", "final_rewards_accuracies", "final_kl", "wall_s")
