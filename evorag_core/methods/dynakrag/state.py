"""The DynaKrag evidence state (SPEC §7): everything the controller may observe, and nothing gold.

The state is an immutable value: an operation returns a new state, so training can branch every valid action
from the same state without copying. It holds the question text only (never a `Question`, whose gold flags
and answers must not reach the controller).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from evorag_core.types import Passage
from evorag_core.evidence.entities import bridge_candidates
from evorag_core.evidence.text import title_key

__all__ = [
    "ACQUISITION",
    "CONTROL",
    "SCORED",
    "ACTIONS",
    "RETRIEVAL",
    "EvidenceDoc",
    "EvidenceState",
    "initial_state",
]

ACQUISITION = ("retrieve_more", "gap_query", "rewrite_query", "bridge_entity_expand")  # change the evidence
RETRIEVAL = ACQUISITION  # every acquisition operation is one retrieval call
CONTROL = ACQUISITION + ("sufficiency_check",)  # the steps counted against max_steps
SCORED = CONTROL + ("stop_answer",)  # what the controller ranks
ACTIONS = SCORED + ("compress_answer_evidence",)  # the seven operations; compression is terminal


@dataclass(frozen=True)
class EvidenceDoc:
    passage: Passage
    score: float  # the retriever's score for the query that found it
    action: str  # the operation that added it
    query: str


@dataclass(frozen=True)
class EvidenceState:
    question: str
    docs: tuple[EvidenceDoc, ...] = ()
    ranking: tuple[tuple[str, float], ...] | None = None  # (pid, score) of the initial ranking; None: not fetched
    cursor: int = 0  # frontier: next position of `ranking` that retrieve_more looks at
    query: str = ""  # the latest query issued
    missing: str = ""  # missing-information description recorded by the last insufficient sufficiency_check
    sufficient: bool | None = None  # the last sufficiency judgment; None: never judged
    p_sufficient: float | None = None
    probed_at: int = -1  # len(docs) at the last sufficiency_check; -1: never
    history: tuple[str, ...] = ()  # executed operations, in order
    queries: tuple[str, ...] = ()  # every query sent to a retriever
    expanded: tuple[str, ...] = ()  # bridge entities already expanded
    last_added: int = 0  # documents added by the latest retrieval operation
    cost: float = 0.0  # accumulated estimated cost (see ops.estimated_cost)
    retrieval_calls: int = 0
    lm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    terminated: bool = False  # stop_answer executed
    snippets: tuple[str, ...] | None = None  # compressed evidence; None: not compressed

    @property
    def steps(self) -> int:
        """Control steps taken (acquisition + sufficiency); stop and compression do not count."""
        return sum(1 for a in self.history if a in CONTROL)

    @property
    def pids(self) -> tuple[str, ...]:
        return tuple(d.passage.pid for d in self.docs)

    @property
    def passages(self) -> tuple[Passage, ...]:
        return tuple(d.passage for d in self.docs)

    @cached_property
    def seen(self) -> frozenset[str]:
        """Pids and normalised titles of the evidence: a document matching either is not added again."""
        return frozenset(self.pids) | frozenset(title_key(d.passage.title) for d in self.docs)

    @cached_property
    def bridge_candidates(self) -> tuple[str, ...]:
        return bridge_candidates(
            self.question, [d.passage.text for d in self.docs], [d.passage.title for d in self.docs], self.expanded
        )

    def frontier_unseen(self) -> int:
        """Unseen documents left in the initial ranking after the cursor (-1: ranking not fetched yet)."""
        if self.ranking is None:
            return -1
        return sum(1 for pid, _ in self.ranking[self.cursor:] if pid not in self.seen)

    def count(self, action: str) -> int:
        return self.history.count(action)

    def summary(self) -> dict:
        """A JSON-friendly view for traces and the studio."""
        return {
            "docs": [{"pid": d.passage.pid, "title": d.passage.title, "score": round(d.score, 4), "by": d.action}
                     for d in self.docs],
            "cursor": self.cursor,
            "ranking": None if self.ranking is None else len(self.ranking),
            "query": self.query,
            "missing": self.missing,
            "sufficient": self.sufficient,
            "p_sufficient": self.p_sufficient,
            "bridge_candidates": list(self.bridge_candidates[:5]),
            "steps": self.steps,
            "retrieval_calls": self.retrieval_calls,
            "lm_calls": self.lm_calls,
            "tokens": self.prompt_tokens + self.completion_tokens,
            "cost": round(self.cost, 4),
        }


def initial_state(question: str) -> EvidenceState:
    """s_0: the question and an empty evidence history."""
    return EvidenceState(question=question)
