"""What every retriever returns and promises: ranked `Hit`s, best first, ranks 1-based.

Ties are broken deterministically: equal scores rank by position in the corpus (earlier first).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from evorag_core.errors import RetrievalError
from evorag_core.types import Corpus

__all__ = ["Hit", "Retriever", "top_k", "check_k", "check_corpus"]


@dataclass(frozen=True)
class Hit:
    pid: str
    score: float
    rank: int  # 1-based


@runtime_checkable
class Retriever(Protocol):
    name: str

    def search(self, query: str, k: int) -> list[Hit]: ...

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]: ...


def check_k(k: int) -> None:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise RetrievalError(f"k must be a positive integer, got {k!r}")


def check_corpus(corpus: Corpus) -> None:
    if len(corpus) == 0:
        raise RetrievalError("cannot index an empty corpus")


def top_k(scores: np.ndarray, k: int, pids: Sequence[str], *, positive_only: bool = False) -> list[Hit]:
    """The k best rows of `scores` as Hits: score descending, then corpus position ascending."""
    n = scores.shape[0]
    k = min(k, n)
    if k < n:
        cut = np.partition(scores, n - k)[n - k]  # the k-th largest score
        candidates = np.flatnonzero(scores >= cut)  # every row tied with it too, in corpus order
    else:
        candidates = np.arange(n)
    order = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
    if positive_only:
        order = order[scores[order] > 0]
    return [Hit(pids[i], float(scores[i]), r) for r, i in enumerate(order, start=1)]
