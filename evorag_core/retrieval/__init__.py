"""Retrieval: BM25, dense (MiniLM + FAISS) and their reciprocal rank fusion (SPEC §1), with
persisted indexes and an embedding cache. `evaluate_retrieval` lives in `.evaluate`."""
from __future__ import annotations

from evorag_core.retrieval.base import Hit, Retriever
from evorag_core.retrieval.bm25 import BM25_BACKENDS, BM25Retriever, passage_text
from evorag_core.retrieval.dense import DenseRetriever
from evorag_core.retrieval.embcache import EmbeddingCache
from evorag_core.retrieval.fusion import HybridRetriever, rrf_fuse
from evorag_core.retrieval.service import IndexInfo, RetrievalService, build_retrievers, open_index
from evorag_core.retrieval.threads import set_cpu_threads
from evorag_core.retrieval.tokenize import Tokenizer

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
