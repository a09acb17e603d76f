"""`evorag studio`: the browser studio (Gradio) on the embedded defaults, with its background worker.

Bound to a non-loopback address (e.g. `--host 0.0.0.0` in Docker) it refuses to start without `--auth` unless
`--insecure-no-auth` is given (exit 2)."""
from __future__ import annotations

import argparse
from pathlib import Path

from evorag_core.cli.common import add_answerer, add_common, config_from_args, home_from_args

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="serve the browser studio (episodes, annotation, training, evaluation)")
    add_common(p)
    p.add_argument("--host", default=None, help="interface to bind (default [studio] host, 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default [studio] port, 7860)")
    p.add_argument("--db", default=None, metavar="URL", help="database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
    p.add_argument("--model", default=None, help="policy model: 'embedded', a local folder or a hub id")
    add_answerer(p)
    p.add_argument("--auth", default=None, metavar="FILE|store",
                   help="require login: a users file written by `evorag users add` (argon2 hashes), or 'store' "
                        "(the store's users); failed logins are limited per user and per address")
    p.add_argument("--trusted-proxy", dest="trusted_proxies", action="append", default=[], metavar="IP|NET",
                   help="a reverse proxy whose X-Forwarded-For names the client (repeatable; default [studio] "
                        "trusted_proxies, none: the header is ignored, as the login limit needs)")
    p.add_argument("--insecure-no-auth", action="store_true",
                   help="serve on a non-loopback --host without any login (refused otherwise)")
    p.add_argument("--no-worker", action="store_true", help="do not start the background training worker")
    p.add_argument("--no-warm", action="store_true",
                   help="do not pre-load the default index and the policy model after start")
    return p


def main(args: argparse.Namespace) -> int:
    from app.shell.main import run

    cfg = config_from_args(args, {"policy.model": args.model,
                                  "studio.trusted_proxies": tuple(args.trusted_proxies) or None})
    home = home_from_args(args)
    db_url = args.db or None
    return run(
        cfg, home, data=Path(args.data), db_url=db_url, host=args.host, port=args.port, auth=args.auth,
        insecure_no_auth=args.insecure_no_auth, start_worker=False if args.no_worker else None, warm=not args.no_warm,
    )
