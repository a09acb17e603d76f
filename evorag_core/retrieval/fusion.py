"""Reciprocal rank fusion (SPEC §1): score(d) = Σ_lists 1 / (rrf_k + rank_list(d)), ranks 1-based;
a list that does not hold d adds nothing.

Deterministic order: fused score descending; ties go to the better best rank, then to the better
rank in the earlier list (BM25 before dense), then to the smaller pid. Each score's terms are added
largest first, so equal rank multisets give bit-identical floats.
"""
from __future__ import annotations

import math
from typing import Sequence

from evorag_core.errors import RetrievalError
from evorag_core.retrieval.base import Hit, Retriever, check_k

__all__ = ["rrf_fuse", "HybridRetriever"]


def rrf_fuse(rankings: Sequence[Sequence[Hit]], rrf_k: int = 60, limit: int | None = None) -> list[Hit]:
    """Fuse ranked lists (each best first, ranks 1-based) into one list of at most `limit` Hits."""
    if rrf_k < 0:
        raise RetrievalError(f"rrf_k must be >= 0, got {rrf_k}")
    ranks: dict[str, list[float]] = {}  # pid -> its rank in each list (inf where absent)
    for i, hits in enumerate(rankings):
        for hit in hits:
            row = ranks.setdefault(hit.pid, [math.inf] * len(rankings))
            row[i] = min(row[i], hit.rank)
    fused = []
    for pid, rs in ranks.items():
        terms = sorted((1.0 / (rrf_k + r) for r in rs if r != math.inf), reverse=True)
        fused.append((-math.fsum(terms), min(rs), tuple(rs), pid))
    fused.sort()
    if limit is not None:
        fused = fused[:limit]
    return [Hit(pid, -neg, rank) for rank, (neg, _, _, pid) in enumerate(fused, start=1)]


class HybridRetriever:
    """RRF of a BM25 and a dense retriever, each asked for its top `depth` (at least k) first."""

    name = "rrf"

    def __init__(self, bm25: Retriever, dense: Retriever, rrf_k: int = 60, depth: int = 50):
        if depth < 1 or rrf_k < 0:
            raise RetrievalError(f"invalid fusion settings: depth={depth} (>= 1), rrf_k={rrf_k} (>= 0)")
        self.bm25, self.dense, self.rrf_k, self.depth = bm25, dense, rrf_k, depth
        self.corpus = getattr(bm25, "corpus", None)

    def search(self, query: str, k: int) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        check_k(k)
        depth = max(self.depth, k)
        lexical = self.bm25.search_batch(queries, depth)
        semantic = self.dense.search_batch(queries, depth)
        return [rrf_fuse((a, b), self.rrf_k, k) for a, b in zip(lexical, semantic)]
