"""The seven step-level reward signals r_t^(k) of SPEC §2, as pure functions of a StepContext.

Gold support and gold answers are used here and nowhere the policy can see them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from evorag_core.env.actions import Action, Answer, Backtrack, Refuse, Search
from evorag_core.signal_table import SIGNAL_TABLE
from evorag_core.metrics import exact_match, f1_score

__all__ = [
    "SIGNAL_NAMES",
    "StepContext",
    "retrieval_bonus",
    "action_penalty",
    "overlap_penalty",
    "backtrack_penalty",
    "refusal_reward",
    "step_cost",
    "answer_score",
    "answer_correctness",
    "SIGNALS",
    "compute_signals",
    "progress",
]

SIGNAL_NAMES: tuple[str, ...] = tuple(row.name for row in SIGNAL_TABLE)  # ret, act, dup, bt, ref, step, ans


@dataclass(frozen=True)
class StepContext:
    """Everything a signal may look at for step t (frozen; no randomness, no I/O)."""

    action: Action
    t: int
    t_max: int
    retrieved: frozenset[str] = frozenset()  # pids returned by this step's SEARCH
    gold_pids: frozenset[str] = frozenset()
    gold_known: bool = True  # False for data without passages or free questions: `ret` is then 0
    query_embedding: np.ndarray | None = None  # e(q_t) for SEARCH, L2-normalized
    history_embeddings: np.ndarray | None = None  # e(q_j), j < t, incl. backtracked queries; shape (n, d)
    answerable: bool | None = None  # the sufficiency verdict (judge or human override) at REFUSE
    gold_answers: tuple[str, ...] = ()
    redundancy_threshold: float = 0.0  # `act`: redundant when -r_dup > threshold
    act_progress: float = 0.3  # `act` applies only when p(t) >= this


def progress(t: int, t_max: int) -> float:
    """p(t) = (t - 1) / (T_max - 1), in [0, 1]; T_max = 1 gives p = 0."""
    if t_max <= 1:
        return 0.0
    return (t - 1) / (t_max - 1)


def retrieval_bonus(ctx: StepContext) -> float:
    """SEARCH: +1 if a gold passage was retrieved, else -1; 0 for other actions or when gold is unknown."""
    if not isinstance(ctx.action, Search) or not ctx.gold_known:
        return 0.0
    return 1.0 if ctx.retrieved & ctx.gold_pids else -1.0


def overlap_penalty(ctx: StepContext) -> float:
    """SEARCH: -max_j cos(e(q_t), e(q_j)) over earlier sub-queries; 0 for the first query."""
    if not isinstance(ctx.action, Search) or ctx.query_embedding is None:
        return 0.0
    if ctx.history_embeddings is None or len(ctx.history_embeddings) == 0:
        return 0.0
    cos = np.asarray(ctx.history_embeddings, dtype=np.float64) @ np.asarray(ctx.query_embedding, dtype=np.float64)
    return -float(np.max(cos))


def action_penalty(ctx: StepContext) -> float:
    """SEARCH with p(t) >= 0.3: -1 when the search is redundant (r_dup < -threshold), else 0."""
    if not isinstance(ctx.action, Search) or progress(ctx.t, ctx.t_max) < ctx.act_progress:
        return 0.0
    return -1.0 if overlap_penalty(ctx) < -ctx.redundancy_threshold else 0.0


def backtrack_penalty(ctx: StepContext) -> float:
    return -1.0 if isinstance(ctx.action, Backtrack) else 0.0


def refusal_reward(ctx: StepContext) -> float:
    """REFUSE: +1 if the evidence is insufficient (unanswerable), -1 if sufficient; else 0."""
    if not isinstance(ctx.action, Refuse):
        return 0.0
    if ctx.answerable is None:
        raise ValueError("refusal_reward needs a sufficiency verdict at REFUSE")
    return refusal_value(ctx.answerable)


def refusal_value(answerable: bool) -> float:
    """The refusal signal of a REFUSE under a verdict: +1 when the evidence is insufficient, -1 when sufficient
    (also what a human override of the verdict recomputes)."""
    return -1.0 if answerable else 1.0


def step_cost(ctx: StepContext) -> float:
    return -1.0


def answer_score(answer: str, gold_answers: Sequence[str]) -> float:
    """(EM + F1) / 2 of `answer` against the gold aliases: the value of `ans` for an ANSWER with this text."""
    return 0.5 * (exact_match(answer, gold_answers) + f1_score(answer, gold_answers))


def answer_correctness(ctx: StepContext) -> float:
    """Terminal ANSWER: `answer_score` against the gold aliases; else 0."""
    if not isinstance(ctx.action, Answer) or not ctx.gold_answers:
        return 0.0
    return answer_score(ctx.action.answer, ctx.gold_answers)


SignalFn = Callable[[StepContext], float]

SIGNALS: dict[str, SignalFn] = {
    "ret": retrieval_bonus,
    "act": action_penalty,
    "dup": overlap_penalty,
    "bt": backtrack_penalty,
    "ref": refusal_reward,
    "step": step_cost,
    "ans": answer_correctness,
}


_unmatched = sorted(set(SIGNALS) ^ set(SIGNAL_NAMES))
if _unmatched:  # a row of signal_table.py without its function here, or a function without its row
    raise ImportError(f"signals need both a row in signal_table.SIGNAL_TABLE and a function in SIGNALS: {_unmatched}")


def compute_signals(ctx: StepContext) -> dict[str, float]:
    """Every signal of the table for this step, in the table's order."""
    return {name: SIGNALS[name](ctx) for name in SIGNAL_NAMES}

