"""Retrieval quality and speed on a data set, the question text as the only query.

Per retriever: support_recall (mean fraction of a question's gold passages in the top k),
full_recall (fraction of questions with every gold passage in the top k), mrr (mean reciprocal rank
of the first gold passage within the top k, 0 if none), queries_per_s (one `search` call per
question, the embedder's string cache cleared first), index_build_s and, when the index was read
from disk, index_load_s. Questions without gold passages are skipped.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from evorag_core.config import RetrievalConfig
from evorag_core.data.corpus import build_corpus
from evorag_core.errors import RetrievalError
from evorag_core.types import Corpus, Dataset, Question
from evorag_core.retrieval.base import Hit, Retriever
from evorag_core.retrieval.service import RetrievalService

__all__ = ["evaluate_retrieval", "question_metrics", "RETRIEVER_NAMES"]

RETRIEVER_NAMES = ("bm25", "dense", "rrf")


def question_metrics(hits: Sequence[Hit], gold: frozenset[str]) -> tuple[float, float, float]:
    """(support recall, full recall, reciprocal rank) of one ranked list against its gold pids."""
    found = [h for h in hits if h.pid in gold]
    recall = len({h.pid for h in found}) / len(gold)
    return recall, float(recall == 1.0), (1.0 / found[0].rank if found else 0.0)


def _timed_search(retriever: Retriever, queries: Sequence[str], k: int, service: RetrievalService
                  ) -> tuple[list[list[Hit]], float]:
    clear = getattr(service.embedder, "clear_cache", None)
    if clear is not None:  # time the model, not the embedder's string cache
        clear()
    t0 = time.perf_counter()
    results = [retriever.search(q, k) for q in queries]
    return results, time.perf_counter() - t0


def _summary(rows: list[tuple[float, float, float]], n_queries: int, search_s: float) -> dict[str, float]:
    n = len(rows)
    return {"questions": n,
            "support_recall": sum(r[0] for r in rows) / n,
            "full_recall": sum(r[1] for r in rows) / n,
            "mrr": sum(r[2] for r in rows) / n,
            "queries_per_s": n_queries / search_s if search_s > 0 else float("inf")}


def evaluate_retrieval(dataset: Dataset, corpus_mode: str, k: int, cfg: RetrievalConfig, home: Path,
                       service: RetrievalService | None = None) -> dict[str, dict]:
    """Metrics keyed by retriever name ("bm25", "dense", "rrf"); see the module docstring."""
    questions = [q for q in dataset.questions if q.gold_pids]
    if not questions:
        raise RetrievalError(f"{dataset.path}: no question has gold passages to evaluate retrieval against")
    service = service or RetrievalService(cfg, home)
    if corpus_mode == "pooled":
        return _pooled(build_corpus(dataset, "pooled"), questions, k, service)
    return _per_question(dataset, questions, corpus_mode, k, service)


def _pooled(corpus: Corpus, questions: list[Question], k: int, service: RetrievalService) -> dict[str, dict]:
    info = service.open(corpus, persist=True)
    queries = [q.question for q in questions]
    out = {}
    for name in RETRIEVER_NAMES:
        results, seconds = _timed_search(info.retrievers[name], queries, k, service)
        rows = [question_metrics(hits, corpus.gold_for(q)) for hits, q in zip(results, questions)]
        out[name] = {"corpus": "pooled", "passages": len(corpus), "k": k, **_summary(rows, len(queries), seconds),
                     "index_build_s": info.build_seconds.get(name)}
        if info.loaded:
            out[name]["index_load_s"] = info.seconds[name]
    return out


def _per_question(dataset: Dataset, questions: list[Question], mode: str, k: int,
                  service: RetrievalService) -> dict[str, dict]:
    rows: dict[str, list] = {name: [] for name in RETRIEVER_NAMES}
    search_s = dict.fromkeys(RETRIEVER_NAMES, 0.0)
    build_s = dict.fromkeys(RETRIEVER_NAMES, 0.0)
    passages = 0
    for q in questions:
        corpus = build_corpus(dataset, mode, q)
        info = service.open(corpus, persist=False)
        passages += len(corpus)
        for name in RETRIEVER_NAMES:
            build_s[name] += info.seconds[name]
            (hits,), seconds = _timed_search(info.retrievers[name], [q.question], k, service)
            search_s[name] += seconds
            rows[name].append(question_metrics(hits, corpus.gold_for(q)))
    return {name: {"corpus": mode, "passages": passages / len(questions), "k": k,
                   **_summary(rows[name], len(questions), search_s[name]), "index_build_s": build_s[name]}
            for name in RETRIEVER_NAMES}
