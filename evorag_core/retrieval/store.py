"""Persisted index folders: `<root>/<key>/` written whole or not at all, verified before use.

A folder is built in `<root>/.tmp-<key>-<random>/`, its `manifest.json` (sizes and SHA-256 of every
file) written last, then renamed into place (atomic on one file system). `load` re-checks the
manifest against the files; a folder that fails (partial copy, edited or truncated file, stale
format) is removed so the caller rebuilds it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from evorag_core.checksum import sha256_file
from evorag_core.errors import RetrievalError
from evorag_core.types import Passage

__all__ = ["IndexFolder", "corpus_key", "FORMAT_VERSION"]

log = logging.getLogger(__name__)
T = TypeVar("T")
FORMAT_VERSION = 1
_MANIFEST = "manifest.json"


def corpus_key(passages: Iterable[Passage], *parts: str) -> str:
    """SHA-256 over every passage's pid, title and text (length-prefixed) and the given parts."""
    h = hashlib.sha256(f"evorag-index-v{FORMAT_VERSION}".encode())
    for field in (s for p in passages for s in (p.pid, p.title, p.text)):
        _feed(h, field)
    for part in parts:
        _feed(h, part)
    return h.hexdigest()


def _feed(h: Any, text: str) -> None:  # h: a hashlib object
    data = text.encode("utf-8")
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


class IndexFolder:
    def __init__(self, root: Path, key: str):
        self.root, self.key = Path(root), key
        self.path = self.root / key

    def exists(self) -> bool:
        return self.path.is_dir()

    def manifest(self) -> dict[str, Any]:
        try:
            data = json.loads((self.path / _MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RetrievalError(f"{self.path}: unreadable manifest ({exc})") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or data.get("key") != self.key:
            raise RetrievalError(f"{self.path}: manifest of another format or key")
        return data

    def verify(self) -> dict[str, Any]:
        """The manifest, after checking that every listed file is present and unchanged."""
        data = self.manifest()
        files = data.get("files")
        if not isinstance(files, dict) or not files:
            raise RetrievalError(f"{self.path}: the manifest lists no files")
        for rel, expect in files.items():
            path = self.path / rel
            if not path.is_file() or path.stat().st_size != expect["size"] or sha256_file(path) != expect["sha256"]:
                raise RetrievalError(f"{self.path}: {rel} is missing or does not match its manifest entry")
        return data

    def load(self, loader: Callable[[Path], T]) -> T | None:
        """`loader(folder)` on a verified folder; None (and the folder removed) if absent or broken."""
        if not self.exists():
            return None
        try:
            self.verify()
            return loader(self.path)
        except (RetrievalError, OSError, ValueError, KeyError) as exc:
            log.warning("index %s is unusable (%s); rebuilding it", self.path, exc)
            shutil.rmtree(self.path, ignore_errors=True)
            return None

    def write(self, writer: Callable[[Path], None], meta: dict[str, Any]) -> None:
        """Run `writer(tmp_folder)`, record the manifest, and move the folder into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{self.key}-{uuid.uuid4().hex[:8]}"
        try:
            tmp.mkdir()
            writer(tmp)
            files = {str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": sha256_file(p)}
                     for p in sorted(tmp.rglob("*")) if p.is_file()}
            manifest = {"format": FORMAT_VERSION, "key": self.key, "files": files, **meta}
            (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
            if self.exists():
                if self._usable():
                    return  # a concurrent writer finished the same index first
                shutil.rmtree(self.path, ignore_errors=True)  # a broken leftover
            os.replace(tmp, self.path)
        except OSError as exc:
            if self.exists() and self._usable():
                return  # another process finished the same index first
            raise RetrievalError(f"cannot write the index {self.path}: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _usable(self) -> bool:
        try:
            self.verify()
            return True
        except RetrievalError:
            return False
