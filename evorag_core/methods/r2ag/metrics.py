"""R²AG's retrieval metrics (seed 002 §3) beside single-step retrieval (SR@K) on the same questions.

Per question, for a ranked list of pids (the tree's pids in order of first retrieval; SR: the question's top-K):
recall (share of gold found), full recall (all gold found), documents retrieved, average precision
AP = (1/|g|) Σ_k P@k · 1{pid_k ∈ g} (mAP = its mean), and for the tree also latency (seconds) and iterations, and
recall@5 / @10 of its first 5 / 10 pids (the tree at SR's budget). Questions without gold are skipped.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from evorag_core.types import Corpus, Question
from evorag_core.methods.r2ag.tree import Tree

__all__ = ["ListMetrics", "list_metrics", "average_precision_at", "summarize_rows", "retrieval_report", "SR_KS"]

SR_KS = (5, 10)


@dataclass(frozen=True)
class ListMetrics:
    recall: float
    full_recall: float
    docs: int
    ap: float


def average_precision_at(pids: Sequence[str], gold: frozenset[str]) -> float:
    """(1/|g|) Σ_k P@k · rel_k over the whole list (repeated pids count once, at their first position)."""
    if not gold:
        return 0.0
    hits = total = 0.0
    seen: set[str] = set()
    for k, pid in enumerate((p for p in pids if not (p in seen or seen.add(p))), start=1):
        if pid in gold:
            hits += 1
            total += hits / k
    return total / len(gold)


def list_metrics(pids: Sequence[str], gold: frozenset[str]) -> ListMetrics:
    found = len(gold & set(pids))
    recall = found / len(gold) if gold else 0.0
    return ListMetrics(recall, float(bool(gold) and found == len(gold)), len(set(pids)), average_precision_at(pids, gold))


def summarize_rows(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Mean of each key over the rows, plus the question count."""
    if not rows:
        return {"questions": 0}
    return {"questions": len(rows), **{k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}}


def _tree_row(tree: Tree, gold: frozenset[str], seconds: float) -> dict[str, float]:
    pids = tree.retrieved()
    m = list_metrics(pids, gold)
    return {"recall": m.recall, "full_recall": m.full_recall, "docs": float(m.docs), "map": m.ap,
            "latency_s": seconds, "iterations": float(tree.iterations),
            **{f"recall@{k}": list_metrics(pids[:k], gold).recall for k in SR_KS},
            "expansions": float(len(tree.expansions))}


def retrieval_report(questions: Sequence[Question], corpus_for: Callable[[Question], Corpus],
                     grow_tree: Callable[[Question, frozenset[str]], Tree], retriever_for: Callable[[Corpus], Any],
                     label: str = "r2ag", on_tree: Callable[[Question, Tree], None] | None = None) -> dict[str, Any]:
    """{label: tree metrics, "sr@5": ..., "sr@10": ...} over the questions that have gold.

    `grow_tree(question, gold)` builds the tree (gold only annotates it); SR retrieves top-max(K) once per question
    with the same retriever and cuts the list at each K."""
    tree_rows: list[dict[str, float]] = []
    sr_rows: dict[int, list[dict[str, float]]] = {k: [] for k in SR_KS}
    for q in questions:
        corpus = corpus_for(q)
        gold = corpus.gold_for(q)
        if not gold:
            continue
        start = time.perf_counter()
        tree = grow_tree(q, gold)
        tree_rows.append(_tree_row(tree, gold, time.perf_counter() - start))
        if on_tree is not None:
            on_tree(q, tree)
        start = time.perf_counter()
        hits = [h.pid for h in retriever_for(corpus).search(q.question, max(SR_KS))]
        seconds = time.perf_counter() - start
        for k in SR_KS:
            m = list_metrics(hits[:k], gold)
            sr_rows[k].append({"recall": m.recall, "full_recall": m.full_recall, "docs": float(m.docs), "map": m.ap,
                               "latency_s": seconds, "iterations": 1.0})
    return {label: summarize_rows(tree_rows), **{f"sr@{k}": summarize_rows(sr_rows[k]) for k in SR_KS}}
