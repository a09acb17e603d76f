"""Options shared by subcommands and the code that turns them into a Config, a home folder and a Runtime."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping

from evorag_core.config import ANSWERERS, REPO_ROOT, Config, home_dir, load_config
from evorag_core.errors import ConfigError

__all__ = ["DEFAULT_DATA", "add_common", "add_answerer", "config_from_args", "home_from_args", "runtime_from_args",
           "finite_json", "print_json"]

DEFAULT_DATA = REPO_ROOT / "data" / "demo" / "demo.jsonl"


def add_common(p: argparse.ArgumentParser, *, data: bool = True) -> None:
    p.add_argument("--config", type=Path, default=None, help="TOML config (default configs/default.toml)")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override one config value"
    )
    p.add_argument("--home", type=Path, default=None, help="home folder (default $EVORAG_HOME or ./.evorag)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout, logs on stderr")
    if data:
        p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="data file (default: the bundled demo set)")
        p.add_argument("--corpus-from", dest="corpus_from", type=Path, action="append", default=[], metavar="FILE",
                       help="retrieve from the pooled passages of these data files instead of --data's own "
                            "(repeatable; e.g. Bamboogle, which ships no passages)")


def add_answerer(p: argparse.ArgumentParser) -> None:
    """`--answerer`: who writes the LM agent's answer text (sets policy.answer_with)."""
    p.add_argument("--answerer", choices=list(ANSWERERS), default=None,
                   help="LM agent's ANSWER text: reader prompt (default), the policy prompt, or ARENA's cited reply")


def config_from_args(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> Config:
    overrides: dict[str, Any] = {}
    if getattr(args, "answerer", None):
        overrides["policy.answer_with"] = args.answerer
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects SECTION.KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    overrides.update({k: v for k, v in (extra or {}).items() if v is not None})
    return load_config(args.config, overrides)


def home_from_args(args: argparse.Namespace) -> Path:
    home = Path(args.home).resolve() if args.home else home_dir()
    home.mkdir(parents=True, exist_ok=True)
    return home


def runtime_from_args(args: argparse.Namespace, cfg: Config):
    from evorag_core.data.datasets import load_dataset
    from evorag_core.runtime import Runtime

    from evorag_core.data.datasets import pooled_corpus

    corpus = pooled_corpus(args.corpus_from) if getattr(args, "corpus_from", None) else None
    return Runtime(cfg, home_from_args(args), load_dataset(args.data), corpus)


def finite_json(obj: Any) -> Any:
    """`obj` with every NaN or ±inf float (in nested dicts, lists and tuples) replaced by None: JSON has no NaN, and
    `json.dump` would write a bare `NaN` that JSON parsers reject."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def print_json(obj: Any) -> None:
    """One JSON value on stdout (the `--json` contract): a non-finite number is written as null, never as NaN."""
    json.dump(finite_json(obj), sys.stdout, ensure_ascii=False, default=str, allow_nan=False)
    sys.stdout.write("\n")
    sys.stdout.flush()
