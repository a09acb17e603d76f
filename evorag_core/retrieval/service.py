"""Building retrievers for a corpus, with persisted indexes and cached embeddings.

`build_retrievers(corpus, cfg, home)` gives {"bm25", "dense", "rrf"}; the index lives in
`home/indexes/<key>/` (`$EVORAG_CACHE_DIR/indexes/` when set: `config.cache_dir`) where key = SHA-256 of the corpus
(pids, titles, texts), the embedder's `model_id` and the index settings, so a changed corpus or setting builds a new
index and an unchanged one is loaded (verified first, rebuilt if broken).

`RetrievalService(cfg, home)` owns one embedder and one embedding cache for a process (the env, the
studio): `retrievers(corpus)` persists large corpora and builds small ones (the 10-20 passages of a
per-question corpus) in memory from cached vectors, memoised by corpus.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from evorag_core.config import RetrievalConfig, cache_dir
from evorag_core.retrieval.embedding import Embedder
from evorag_core.errors import RetrievalError
from evorag_core.types import Corpus
from evorag_core.retrieval.base import Retriever
from evorag_core.retrieval.bm25 import BM25Retriever, passage_text
from evorag_core.retrieval.dense import DenseRetriever, QueryEncoder
from evorag_core.retrieval.embcache import EmbeddingCache
from evorag_core.retrieval.fusion import HybridRetriever
from evorag_core.retrieval.store import IndexFolder, corpus_key
from evorag_core.retrieval.tokenize import Tokenizer

__all__ = ["build_retrievers", "open_index", "build_in_memory", "IndexInfo", "RetrievalService", "make_embedder",
           "PERSIST_MIN"]

PERSIST_MIN = 200  # corpora with at least this many passages get a persisted index
_MEMO = 256  # small per-question retriever sets kept per service


@dataclass(frozen=True)
class IndexInfo:
    retrievers: dict[str, Retriever]
    folder: Path | None  # None: built in memory only
    loaded: bool  # True: read from disk, False: built now
    seconds: dict[str, float] = field(default_factory=dict)  # per retriever: this call's build or load time
    build_seconds: dict[str, float] = field(default_factory=dict)  # per retriever: the build time (recorded)


def make_embedder(cfg: RetrievalConfig) -> Embedder:
    return Embedder(cfg.dense_model, dtype=cfg.dtype, max_seq_length=cfg.max_seq_length, batch_size=cfg.batch_size)


def _tokenizer(cfg: RetrievalConfig) -> Tokenizer:
    return Tokenizer(stopwords=cfg.stopwords, stem=cfg.stemmer)


def _bundle(bm25: BM25Retriever, dense: DenseRetriever, cfg: RetrievalConfig) -> dict[str, Retriever]:
    return {"bm25": bm25, "dense": dense, "rrf": HybridRetriever(bm25, dense, cfg.rrf_k, cfg.fusion_depth)}


def _vectors(corpus: Corpus, embedder: QueryEncoder, cache: EmbeddingCache | None) -> np.ndarray:
    texts = [passage_text(p) for p in corpus.passages]
    return cache.vectors(texts) if cache is not None else embedder.encode(texts)


def build_in_memory(corpus: Corpus, cfg: RetrievalConfig, embedder: QueryEncoder,
                    cache: EmbeddingCache | None = None) -> IndexInfo:
    """{"bm25", "dense", "rrf"} over `corpus`, nothing written (passage vectors via `cache` if given)."""
    t0 = time.perf_counter()
    bm25 = BM25Retriever(corpus, cfg.bm25_backend, _tokenizer(cfg), cfg.bm25_method)
    t1 = time.perf_counter()
    dense = DenseRetriever(corpus, embedder, _vectors(corpus, embedder, cache))
    t2 = time.perf_counter()
    seconds = {"bm25": t1 - t0, "dense": t2 - t1, "rrf": t2 - t0}
    return IndexInfo(_bundle(bm25, dense, cfg), None, False, seconds, seconds)


def open_index(corpus: Corpus, cfg: RetrievalConfig, home: Path, embedder: QueryEncoder,
               cache: EmbeddingCache | None = None) -> IndexInfo:
    """Load the persisted index of `corpus` under `home/indexes/`, or build and persist it."""
    tokenizer = _tokenizer(cfg)
    bm25_settings = BM25Retriever.settings_for(cfg.bm25_backend, cfg.bm25_method, tokenizer)
    key = corpus_key(corpus.passages, embedder.model_id, bm25_settings, "dense: flat-ip over 'title. text'")
    folder = IndexFolder(cache_dir(home) / "indexes", key)

    t0 = time.perf_counter()
    loaded = folder.load(lambda path: (BM25Retriever.load(path / "bm25", corpus, cfg.bm25_backend, tokenizer,
                                                          cfg.bm25_method),
                                       np.load(path / "dense" / "embeddings.npy", allow_pickle=False),
                                       folder.manifest().get("build_seconds", {})))
    if loaded is not None:
        t1 = time.perf_counter()
        bm25, vectors, built = loaded
        dense = DenseRetriever(corpus, embedder, vectors)  # raises on a shape mismatch
        if cache is not None:
            cache.put([passage_text(p) for p in corpus.passages], vectors)
        t2 = time.perf_counter()
        seconds = {"bm25": t1 - t0, "dense": t2 - t1, "rrf": t2 - t0}
        return IndexInfo(_bundle(bm25, dense, cfg), folder.path, True, seconds, dict(built))

    info = build_in_memory(corpus, cfg, embedder, cache)
    bm25, dense = info.retrievers["bm25"], info.retrievers["dense"]

    def write(path: Path) -> None:
        bm25.save(path / "bm25")
        (path / "dense").mkdir()
        np.save(path / "dense" / "embeddings.npy", dense.vectors)

    meta = {"passages": len(corpus), "model_id": embedder.model_id, "bm25": bm25_settings,
            "build_seconds": info.seconds, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    folder.write(write, meta)
    return IndexInfo(info.retrievers, folder.path, False, info.seconds, info.seconds)


def build_retrievers(corpus: Corpus, cfg: RetrievalConfig, home: Path,
                     embedder: QueryEncoder | None = None) -> dict[str, Retriever]:
    """{"bm25", "dense", "rrf"} over `corpus`, loaded from `home/indexes/` when already built."""
    return open_index(corpus, cfg, home, embedder or make_embedder(cfg)).retrievers


class RetrievalService:
    """One embedder, one embedding cache and memoised retrievers for a process."""

    def __init__(self, cfg: RetrievalConfig, home: Path, embedder: QueryEncoder | None = None):
        self.cfg, self.home = cfg, Path(home)
        self._embedder = embedder
        self._cache: EmbeddingCache | None = None
        self._memo: OrderedDict[str, IndexInfo] = OrderedDict()
        self._keys: OrderedDict[int, tuple[Corpus, str]] = OrderedDict()  # id(corpus) -> content key
        self._lock = threading.RLock()

    @property
    def embedder(self) -> QueryEncoder:
        with self._lock:
            if self._embedder is None:
                self._embedder = make_embedder(self.cfg)
            return self._embedder

    @property
    def cache(self) -> EmbeddingCache:
        with self._lock:
            if self._cache is None:
                self._cache = EmbeddingCache(self.embedder, cache_dir(self.home) / "embeddings")
            return self._cache

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Query embeddings (float32, L2-normalised) through the embedder's LRU."""
        return self.embedder.encode(list(texts))

    def open(self, corpus: Corpus, persist: bool | None = None) -> IndexInfo:
        """Retrievers for `corpus` with timings; persisted when `persist` (default: len >= PERSIST_MIN)."""
        persist = len(corpus) >= PERSIST_MIN if persist is None else persist
        key = self._key(corpus) + str(persist)
        with self._lock:
            if key in self._memo:
                self._memo.move_to_end(key)
                return self._memo[key]
            if persist:
                info = open_index(corpus, self.cfg, self.home, self.embedder, self.cache)
            else:
                info = build_in_memory(corpus, self.cfg, self.embedder, self.cache)
            self._memo[key] = info
            if len(self._memo) > _MEMO:
                self._memo.popitem(last=False)
            return info

    def _key(self, corpus: Corpus) -> str:
        """Content hash of `corpus`, remembered per object (hashing 100K passages takes ~0.1 s)."""
        with self._lock:
            seen = self._keys.get(id(corpus))
            if seen is not None and seen[0] is corpus:
                return seen[1]
        key = corpus_key(corpus.passages)
        with self._lock:
            self._keys[id(corpus)] = (corpus, key)  # holding the corpus keeps its id unique
            if len(self._keys) > _MEMO:
                self._keys.popitem(last=False)
        return key

    def retrievers(self, corpus: Corpus) -> dict[str, Retriever]:
        return self.open(corpus).retrievers

    def retriever_for(self, corpus: Corpus, name: str = "rrf") -> Retriever:
        """The named retriever ("bm25", "dense" or "rrf") over `corpus`."""
        found = self.retrievers(corpus)
        if name not in found:
            raise RetrievalError(f"unknown retriever {name!r}; expected one of {', '.join(found)}")
        return found[name]
