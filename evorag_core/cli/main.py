"""`evorag` command line. Each subcommand lives in evorag_core/cli/<name>.py with add_parser() and main().

With `--json`, stdout holds only the JSON; logs and progress go to stderr.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from evorag_core.errors import EvoRagError

__all__ = ["main", "configure_logging", "COMMANDS", "QUIET_LOGGERS"]

# subcommand name -> module in evorag_core.cli (one literal table; no registries)
COMMANDS: dict[str, str] = {
    "run": "run",
    "eval": "eval",
    "compare": "compare",
    "retrieval-eval": "retrieval_eval",
    "studio": "studio",
    "train": "train",
    "worker": "worker",
    "adapters": "adapters",
    "rounds": "rounds",
    "rollout": "rollout",
    "pairs": "pairs",
    "users": "users",
    "annotate": "annotate",
    "ablate": "ablate",
    "tune-weights": "tune_weights",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evorag", description="EVO-RAG Studio: phase-aware multi-hop RAG agents")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        mod = importlib.import_module(f"evorag_core.cli.{module}")
        p = mod.add_parser(sub, name)
        p.set_defaults(_main=mod.main)
    return parser


# loggers that say at INFO what is routine for every command, shown with -v only: faiss's loader logs every optimised
# build it tries and cannot load (`ModuleNotFoundError(... swigfaiss_avx512_spr)`: harmless, a build that fits loads
# next); Alembic's ~20 lines (plugins, "Context impl SQLiteImpl", each migration) as every command opens the store
QUIET_LOGGERS = ("faiss.loader", "alembic")


def configure_logging(verbose: bool) -> None:
    """INFO (DEBUG with -v) on stderr; the QUIET_LOGGERS at WARNING unless -v."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    try:
        return int(args._main(args) or 0)
    except EvoRagError as exc:
        print(f"evorag {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"evorag {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
