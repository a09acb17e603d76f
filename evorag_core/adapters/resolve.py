"""Which LoRA adapter a user means: a folder path, or a name registered in the store."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from evorag_core.errors import AdapterError

__all__ = ["AdapterSource", "resolve_adapter"]

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class AdapterSource:
    """Where an adapter argument points: the name to load it under, its folder and, for a registered name, the
    registry's checksum of its weights (None for a folder given by path: its own metadata is checked) and role."""

    name: str
    folder: Path
    checksum: str | None = None
    role: str = "policy"  # the registry's role (adapters/role.py); a folder given by path is the policy's


def resolve_adapter(spec: str, home: Path, db_url: str | None = None) -> AdapterSource:
    """The LoRA adapter given as a folder path or as a name registered in the store (`db_url`, else EVORAG_DB_URL,
    else `home/evorag.db`)."""
    folder = Path(spec).expanduser()
    if folder.is_dir():
        return AdapterSource(_SAFE_NAME.sub("-", folder.name).strip("-")[:64] or "adapter", folder)
    url = db_url or os.environ.get("EVORAG_DB_URL")
    if url is None:
        db = Path(home) / "evorag.db"
        if not db.is_file():
            raise AdapterError(f"adapter {spec!r} is not a folder, and there is no database at {db} to look it up")
        url = f"sqlite:///{db}"
    from evorag_core.store import open_store

    store = open_store(url)
    try:
        row = store.get_adapter(spec)
    except KeyError:
        known = ", ".join(a.name for a in store.list_adapters()) or "none"
        raise AdapterError(f"no adapter named {spec!r} in the store (registered: {known})") from None
    finally:
        store.close()
    return AdapterSource(row.name, Path(row.path), row.checksum or None, row.role)
