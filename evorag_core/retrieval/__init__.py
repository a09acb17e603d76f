"""Retrieval: BM25, dense (MiniLM + FAISS) and their reciprocal rank fusion (SPEC §1), with
persisted indexes and an embedding cache. `evaluate_retrieval` lives in `.evaluate`."""
from __future__ import annotations

from .base import Hit, Retriever
from .bm25 import BM25_BACKENDS, BM25Retriever, passage_text
from .dense import DenseRetriever
from .embcache import EmbeddingCache
from .fusion import HybridRetriever, rrf_fuse
from .service import IndexInfo, RetrievalService, build_retrievers, open_index
from .threads import set_cpu_threads
from .tokenize import Tokenizer

__all__ = [
    "Hit",
    "Retriever",
    "BM25Retriever",
    "BM25_BACKENDS",
    "DenseRetriever",
    "HybridRetriever",
    "rrf_fuse",
    "build_retrievers",
    "open_index",
    "IndexInfo",
    "RetrievalService",
    "EmbeddingCache",
    "Tokenizer",
    "passage_text",
    "set_cpu_threads",
]
