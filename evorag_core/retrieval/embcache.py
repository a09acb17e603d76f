"""Embeddings keyed by the SHA-256 of the embedded text, in memory and (optionally) on disk.

Per-question corpora (10 passages, rebuilt for every episode) reuse the vectors computed for the
pooled corpus, and later processes reuse both. On disk the cache is a folder per embedder
(`<root>/<sha256(model_id)[:16]>/`) of shard files `<random>.npz` (keys: (n, 32) uint8 digests,
vectors: (n, dim) float32), each written to a temporary name and renamed. Unreadable shards are
skipped and removed; many small shards are merged into one.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import uuid
import zipfile
from pathlib import Path
from typing import Sequence

import numpy as np

from evorag_core.retrieval.dense import QueryEncoder

__all__ = ["EmbeddingCache", "text_digest"]

log = logging.getLogger(__name__)
_MERGE_AT = 64  # shards; beyond this they are merged into one on the next load


def text_digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class EmbeddingCache:
    def __init__(self, embedder: QueryEncoder, root: Path | None = None):
        """`root=None` keeps the cache in memory only."""
        self.embedder = embedder
        self.folder = Path(root) / hashlib.sha256(embedder.model_id.encode()).hexdigest()[:16] if root else None
        self._vectors: dict[bytes, np.ndarray] = {}
        self._lock = threading.Lock()
        self._loaded = False
        self.encoded = 0  # texts embedded by this cache (misses), for tests and benchmarks

    def __len__(self) -> int:
        self._load()
        return len(self._vectors)

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32 rows; only texts never seen before are embedded."""
        self._load()
        digests = [text_digest(t) for t in texts]
        with self._lock:
            missing = {d: t for d, t in zip(digests, texts) if d not in self._vectors}
        if missing:
            new = self.embedder.encode(list(missing.values()))
            self.put_digests(list(missing), new, persist=True)
            self.encoded += len(missing)
        with self._lock:
            out = np.stack([self._vectors[d] for d in digests]) if digests \
                else np.empty((0, self.embedder.dim), dtype=np.float32)
        return out

    def put(self, texts: Sequence[str], vectors: np.ndarray, persist: bool = False) -> None:
        """Record known vectors (e.g. from a loaded index) so later lookups need no model call."""
        self.put_digests([text_digest(t) for t in texts], vectors, persist)

    def put_digests(self, digests: list[bytes], vectors: np.ndarray, persist: bool) -> None:
        self._load()
        vectors = np.asarray(vectors, dtype=np.float32)
        with self._lock:
            fresh = [i for i, d in enumerate(digests) if d not in self._vectors]
            for i in fresh:
                self._vectors[digests[i]] = vectors[i]
        if persist and fresh and self.folder is not None:
            keys = np.frombuffer(b"".join(digests[i] for i in fresh), dtype=np.uint8).reshape(len(fresh), 32)
            self._write_shard(keys, vectors[fresh])

    # --- disk ---------------------------------------------------------------------------------

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            if self.folder is None or not self.folder.is_dir():
                return
            shards = sorted(self.folder.glob("*.npz"))
            for shard in shards:
                self._read_shard(shard)
        if len(shards) > _MERGE_AT:
            self._merge(shards)

    def _read_shard(self, shard: Path) -> None:
        try:
            with np.load(shard, allow_pickle=False) as data:
                keys, vecs = data["keys"], data["vectors"]
            if keys.ndim != 2 or keys.shape[1] != 32 or vecs.shape != (len(keys), self.embedder.dim):
                raise ValueError(f"shapes {keys.shape} / {vecs.shape}")
        except FileNotFoundError:
            return  # merged away by another process meanwhile
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            log.warning("embedding cache shard %s is unreadable (%s); removing it", shard, exc)
            shard.unlink(missing_ok=True)
            return
        for key, vec in zip(keys, vecs.astype(np.float32)):
            self._vectors.setdefault(key.tobytes(), vec)

    def _write_shard(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        name = uuid.uuid4().hex
        tmp = self.folder / f".{name}.part"  # not matched by "*.npz" while being written
        with tmp.open("wb") as f:
            np.savez(f, keys=keys, vectors=vectors)
        os.replace(tmp, self.folder / f"{name}.npz")

    def _merge(self, shards: list[Path]) -> None:
        with self._lock:
            if not self._vectors:
                return
            keys = np.frombuffer(b"".join(self._vectors), dtype=np.uint8).reshape(len(self._vectors), 32)
            vecs = np.stack(list(self._vectors.values()))
        self._write_shard(keys, vecs.astype(np.float32))
        for shard in shards:
            shard.unlink(missing_ok=True)
