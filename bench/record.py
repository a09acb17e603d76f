"""What every benchmark writes beside its figures: its command-line settings as JSON-ready values, and the result
file itself (its folder made)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

__all__ = ["settings", "write_json"]


def settings(args: argparse.Namespace, skip: Callable[[str], bool] = lambda name: False) -> dict[str, Any]:
    """The parsed arguments, paths as strings, without those whose name `skip` accepts (internal flags)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if not skip(k)}


def write_json(path: Path, data: Any, indent: int = 1) -> None:
    """`data` as JSON at `path` (values JSON cannot hold written with str())."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=indent, default=str))
