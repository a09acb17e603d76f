"""Dense retrieval: exact inner product (FAISS IndexFlatIP) over L2-normalised passage embeddings,
so scores are cosine similarities."""
from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from evorag_core.errors import RetrievalError
from evorag_core.types import Corpus
from evorag_core.retrieval.base import Hit, check_corpus, check_k
from evorag_core.retrieval.bm25 import passage_text

__all__ = ["DenseRetriever", "QueryEncoder"]


class QueryEncoder(Protocol):
    dim: int
    model_id: str

    def encode(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray: ...


class DenseRetriever:
    name = "dense"

    def __init__(self, corpus: Corpus, embedder: QueryEncoder, vectors: np.ndarray | None = None):
        """`vectors` (n, dim), row i for passage i, skips embedding the corpus (cached or loaded)."""
        import faiss

        check_corpus(corpus)
        self.corpus, self.embedder = corpus, embedder
        self._pids = [p.pid for p in corpus.passages]
        if vectors is None:
            vectors = embedder.encode([passage_text(p) for p in corpus.passages])
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(corpus), embedder.dim):
            raise RetrievalError(f"dense vectors have shape {vectors.shape}, expected ({len(corpus)}, {embedder.dim})")
        self.vectors = vectors
        self._index = faiss.IndexFlatIP(embedder.dim)
        self._index.add(vectors)

    def search(self, query: str, k: int) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        check_k(k)
        if not queries:
            return []
        return self.search_vectors(self.embedder.encode(list(queries)), k)

    def search_vectors(self, queries: np.ndarray, k: int) -> list[list[Hit]]:
        """Search with already-embedded queries (rows L2-normalised)."""
        k = min(k, len(self._pids))
        scores, ids = self._index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
        out = []
        for row_s, row_i in zip(scores, ids):
            order = np.lexsort((row_i, -row_s))  # score descending, then corpus position
            out.append([Hit(self._pids[row_i[j]], float(row_s[j]), r) for r, j in enumerate(order, start=1)])
        return out
