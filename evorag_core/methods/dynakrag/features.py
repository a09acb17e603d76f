"""Controller features: numbers observable at inference only (question text, retrieved passages and their
retriever scores, the frontier, the recorded gap and judgment, the action history, the candidate action and its
estimated cost). Nothing here reads a `Question`: gold passages, answers and support recall cannot leak in.

`state_features` feed the continuation model; `action_features` = state features + action one-hot + cost feed
the action-value model. `FEATURE_NAMES` / `STATE_FEATURES` fix the column order saved with a trained model.
"""
from __future__ import annotations

import numpy as np

from evorag_core.config import DynaKragConfig
from evorag_core.methods.dynakrag.ops import estimated_cost
from evorag_core.methods.dynakrag.state import CONTROL, SCORED, EvidenceState
from evorag_core.evidence.text import content_terms, term_overlap, title_key, words

__all__ = ["STATE_FEATURES", "FEATURE_NAMES", "state_features", "action_features", "action_matrix"]

_YESNO = frozenset({"is", "are", "was", "were", "did", "do", "does", "has", "have", "had", "can", "could", "will"})
_WHO = frozenset({"who", "whom", "whose"})
_WHEN_WHERE = frozenset({"when", "where"})

STATE_FEATURES = (
    "q_chars", "q_words", "q_content_terms", "q_capitalized", "q_yesno", "q_who", "q_when_where", "q_has_or",
    "n_docs", "n_titles", "n_frontier_docs", "n_targeted_docs",
    "ranking_fetched", "cursor", "frontier_frac", "frontier_unseen", "next_frontier_score", "top_frontier_score",
    "frontier_score_mean", "frontier_score_min", "targeted_score_mean", "targeted_score_max", "last_added",
    "q_coverage", "q_title_coverage", "max_doc_overlap", "evidence_kchars",
    "n_bridge",
    "steps", "steps_left", "retrieval_calls", "retrieval_left", "has_gap", "judged_yes", "judged_no", "p_sufficient",
    *(f"count_{a}" for a in CONTROL),
)
FEATURE_NAMES = (*STATE_FEATURES, *(f"is_{a}" for a in SCORED), "action_cost")


def _question_features(q: str) -> list[float]:
    ws = words(q)
    raw = q.split()
    caps = sum(1 for w in raw[1:] if w[:1].isupper())
    first = ws[0] if ws else ""
    return [len(q), len(ws), len(set(content_terms(q))), caps, float(first in _YESNO), float(first in _WHO),
            float(first in _WHEN_WHERE), float(" or " in f" {q.lower()} ")]


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else 0.0


def state_features(s: EvidenceState, cfg: DynaKragConfig) -> list[float]:
    frontier = [d.score for d in s.docs if d.action == "retrieve_more"]
    targeted = [d.score for d in s.docs if d.action != "retrieve_more"]
    ranking = s.ranking or ()
    unseen = s.frontier_unseen()
    next_score = next((sc for pid, sc in ranking[s.cursor:] if pid not in s.seen), 0.0)
    evidence = " ".join(f"{d.passage.title} {d.passage.text}" for d in s.docs)
    titles = " ".join(d.passage.title for d in s.docs)
    doc_overlaps = [term_overlap(s.question, f"{d.passage.title} {d.passage.text}") for d in s.docs]
    return [
        *_question_features(s.question),
        len(s.docs), len({title_key(d.passage.title) for d in s.docs}), len(frontier), len(targeted),
        float(s.ranking is not None), s.cursor, s.cursor / len(ranking) if ranking else 0.0, max(unseen, 0),
        next_score, ranking[0][1] if ranking else 0.0, _mean(frontier), min(frontier, default=0.0),
        _mean(targeted), max(targeted, default=0.0), s.last_added,
        term_overlap(s.question, evidence), term_overlap(s.question, titles), max(doc_overlaps, default=0.0),
        len(evidence) / 1000.0,
        len(s.bridge_candidates),
        s.steps, cfg.max_steps - s.steps, s.retrieval_calls, cfg.retrieval_cap - s.retrieval_calls,
        float(bool(s.missing)), float(s.sufficient is True), float(s.sufficient is False),
        -1.0 if s.p_sufficient is None else s.p_sufficient,
        *(s.count(a) for a in CONTROL),
    ]


def action_features(s: EvidenceState, action: str, cfg: DynaKragConfig, base: list[float] | None = None) -> list[float]:
    """Features of (s, a); pass `base = state_features(s, cfg)` to reuse it across actions."""
    if action not in SCORED:
        raise ValueError(f"the controller does not score {action!r}; scored actions: {', '.join(SCORED)}")
    base = state_features(s, cfg) if base is None else base
    return [*base, *(float(action == a) for a in SCORED), estimated_cost(s, action, cfg)]


def action_matrix(s: EvidenceState, actions: tuple[str, ...], cfg: DynaKragConfig) -> np.ndarray:
    base = state_features(s, cfg)
    return np.asarray([action_features(s, a, cfg, base) for a in actions], dtype=np.float64).reshape(len(actions), -1)
