"""Uploaded data files: size-limited, one copy, content-addressed, deleted by age.

An upload is kept at `<home>/uploads/<sha256 prefix>/<its name>`: the same content uploaded again is the same file
(one copy), and another file under the same name is another path, so the studio shows its questions, not the cached
ones of the first. Gradio's own temporary copy is moved there (not copied) and, when refused, deleted, so no upload
leaves two copies on disk. Uploads not used for `max_age_s` (their mtime, touched on upload and on each load) are
deleted by `clean_uploads`.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from evorag_core.errors import DataAccessError

__all__ = ["store_upload", "clean_uploads", "touch", "gradio_upload_folder"]

_DIGEST_CHARS = 16  # 64 bits of sha256: a folder name, not a security boundary (the name checks are elsewhere)
_CHUNK = 1 << 20


def gradio_upload_folder() -> Path:
    """Where Gradio puts uploaded files (gradio.utils.get_upload_folder, read without importing Gradio)."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio").resolve()


def _inside(path: Path, folder: Path) -> bool:
    return path.is_relative_to(folder)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()[:_DIGEST_CHARS]


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 / 10 else f"{n:,} bytes"


def store_upload(src: Path, uploads_dir: Path, *, max_mb: float) -> tuple[Path, bool]:
    """(kept path, True if it is new) of the uploaded file `src`; DataAccessError when it is larger than `max_mb`
    MiB. A file in Gradio's upload folder is moved (refused: deleted); any other is copied."""
    src = Path(src).resolve()
    ours = _inside(src, gradio_upload_folder())
    size = src.stat().st_size
    if size > max_mb * 2**20:
        if ours:
            src.unlink(missing_ok=True)
        raise DataAccessError(f"{src.name[:200]!r} is {_size(size)}: the studio takes uploads of at most {max_mb:g} MB "
                              f"(studio.max_upload_mb); upload a smaller file, or ask the operator to add its folder "
                              f"to studio.data_roots")
    target = uploads_dir / _digest(src) / src.name
    new = not target.is_file()
    if new:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        (shutil.move if ours else shutil.copyfile)(src, partial)
        partial.replace(target)
    elif ours:
        src.unlink(missing_ok=True)
    touch(target)
    return target, new


def touch(path: Path) -> None:
    """Mark an upload as used now (its age counts from here)."""
    try:
        os.utime(path)
    except OSError:
        pass


def clean_uploads(uploads_dir: Path, max_age_s: float, *, keep: Iterable[Path] = (),
                  now: float | None = None) -> list[Path]:
    """Delete the uploads (files and their content folders) unused for longer than `max_age_s`, except `keep`;
    returns the deleted files."""
    if not uploads_dir.is_dir():
        return []
    now = time.time() if now is None else now
    kept = {Path(p).resolve() for p in keep}
    gone: list[Path] = []
    for path in sorted(uploads_dir.rglob("*")):
        if not path.is_file() or path.resolve() in kept:
            continue
        try:
            if now - path.stat().st_mtime > max_age_s:
                path.unlink()
                gone.append(path)
        except OSError:  # deleted meanwhile by another studio on the same home
            continue
    for folder in sorted((p for p in uploads_dir.iterdir() if p.is_dir()), reverse=True):
        try:
            folder.rmdir()  # only when empty
        except OSError:
            pass
    return gone
