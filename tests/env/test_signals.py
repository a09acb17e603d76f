"""The seven signals against values computed by hand (SPEC §2)."""
import numpy as np
import pytest

from evorag_core.env.actions import Answer, Backtrack, Refuse, Search
from evorag_core.env.signals import (
    SIGNAL_NAMES,
    StepContext,
    action_penalty,
    answer_correctness,
    backtrack_penalty,
    compute_signals,
    overlap_penalty,
    progress,
    refusal_reward,
    retrieval_bonus,
    step_cost,
)


def unit(*xs):
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_progress_endpoints():
    """p(1) = 0, p(T_max) = 1, p(7) with T_max = 20 is 6/19."""
    assert progress(1, 20) == 0.0
    assert progress(20, 20) == 1.0
    assert progress(7, 20) == pytest.approx(6 / 19)


def test_retrieval_bonus():
    gold = frozenset({"g1", "g2"})
    hit = StepContext(Search("q"), 1, 20, retrieved=frozenset({"x", "g2"}), gold_pids=gold)
    miss = StepContext(Search("q"), 1, 20, retrieved=frozenset({"x"}), gold_pids=gold)
    assert retrieval_bonus(hit) == 1.0
    assert retrieval_bonus(miss) == -1.0
    assert retrieval_bonus(StepContext(Answer("a"), 1, 20, gold_pids=gold)) == 0.0
    # No gold support at all (e.g. unanswerable question with passages): a search never hits -> -1.
    assert retrieval_bonus(StepContext(Search("q"), 1, 20, retrieved=frozenset({"x"}))) == -1.0
    # Data without passages: gold unknown -> 0.
    assert retrieval_bonus(StepContext(Search("q"), 1, 20, retrieved=frozenset({"x"}), gold_known=False)) == 0.0


def test_overlap_zero_for_first_query():
    ctx = StepContext(Search("q"), 1, 20, query_embedding=unit(1, 0), history_embeddings=None)
    assert overlap_penalty(ctx) == 0.0


def test_overlap_is_minus_max_cosine():
    """History e1=(1,0), e2=(0.6,0.8); query (0.8,0.6): cosines 0.8 and 0.96 -> dup = -0.96."""
    hist = np.stack([unit(1, 0), unit(0.6, 0.8)])
    ctx = StepContext(Search("q"), 3, 20, query_embedding=unit(0.8, 0.6), history_embeddings=hist)
    assert overlap_penalty(ctx) == pytest.approx(-0.96, abs=1e-6)


def test_action_penalty_progress_boundary():
    """T_max = 11: p(4) = 0.3 exactly -> applies; p(3) = 0.2 -> does not. Redundant when r_dup < 0."""
    hist = np.stack([unit(1, 0)])
    redundant = dict(query_embedding=unit(1, 1), history_embeddings=hist)
    assert action_penalty(StepContext(Search("q"), 4, 11, **redundant)) == -1.0
    assert action_penalty(StepContext(Search("q"), 3, 11, **redundant)) == 0.0
    # Orthogonal query: r_dup = 0, not < 0 -> not redundant.
    fresh = dict(query_embedding=unit(0, 1), history_embeddings=hist)
    assert action_penalty(StepContext(Search("q"), 4, 11, **fresh)) == 0.0
    # Threshold 0.8: cos = 0.707 is not redundant, cos = 1 is.
    assert action_penalty(StepContext(Search("q"), 4, 11, redundancy_threshold=0.8, **redundant)) == 0.0
    same = dict(query_embedding=unit(1, 0), history_embeddings=hist)
    assert action_penalty(StepContext(Search("q"), 4, 11, redundancy_threshold=0.8, **same)) == -1.0
    # First query is never redundant.
    assert action_penalty(StepContext(Search("q"), 20, 20, query_embedding=unit(1, 0))) == 0.0


def test_backtrack_and_step():
    assert backtrack_penalty(StepContext(Backtrack(), 2, 20)) == -1.0
    assert backtrack_penalty(StepContext(Search("q"), 2, 20)) == 0.0
    assert step_cost(StepContext(Answer("x"), 5, 20)) == -1.0


def test_refusal_reward():
    assert refusal_reward(StepContext(Refuse(), 2, 20, answerable=False)) == 1.0
    assert refusal_reward(StepContext(Refuse(), 2, 20, answerable=True)) == -1.0
    assert refusal_reward(StepContext(Search("q"), 2, 20)) == 0.0
    with pytest.raises(ValueError):
        refusal_reward(StepContext(Refuse(), 2, 20))


def test_answer_correctness():
    """Gold 'Tromeo and Juliet'; answer 'Tromeo & Juliet' -> EM 0, F1: tokens {tromeo, juliet} vs
    {tromeo, and, juliet}: P = 2/2, R = 2/3, F1 = 0.8 -> (0 + 0.8)/2 = 0.4."""
    gold = ("Tromeo and Juliet",)
    assert answer_correctness(StepContext(Answer("Tromeo & Juliet"), 3, 20, gold_answers=gold)) == pytest.approx(0.4)
    assert answer_correctness(StepContext(Answer("the Tromeo and Juliet."), 3, 20, gold_answers=gold)) == 1.0
    assert answer_correctness(StepContext(Search("x"), 3, 20, gold_answers=gold)) == 0.0


def test_compute_signals_has_all_seven():
    out = compute_signals(StepContext(Backtrack(), 2, 20))
    assert tuple(out) == SIGNAL_NAMES
    assert out == {"ret": 0.0, "act": 0.0, "dup": 0.0, "bt": -1.0, "ref": 0.0, "step": -1.0, "ans": 0.0}
