"""Sufficiency judgments for the refusal signal: one interface, a gold-coverage judge and a human-override layer.

The LLM judge (`evorag_core.policy.llm_judge`) implements the same interface.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import MutableMapping, Protocol

from evorag_core.types import Passage

__all__ = ["JudgeRequest", "Verdict", "SufficiencyJudge", "GoldCoverageJudge", "OverrideJudge"]


@dataclass(frozen=True)
class JudgeRequest:
    episode_id: str
    t: int
    question: str
    evidence: tuple[Passage, ...]  # passages of the active chain at step t
    gold_pids: frozenset[str]
    gold_known: bool  # the data set has passages with gold flags


@dataclass(frozen=True)
class Verdict:
    answerable: bool  # True: the evidence suffices ("enough_evidence: yes")
    judge: str  # "gold", "llm", "human"
    score: float | None = None  # judge confidence, e.g. P(yes) for the LLM judge
    who: str | None = None  # annotator, for human overrides


class SufficiencyJudge(Protocol):
    name: str

    def judge(self, request: JudgeRequest) -> Verdict: ...


class GoldCoverageJudge:
    """Answerable iff the question has gold support and every gold passage is in the evidence.

    Data without passages (e.g. Bamboogle) and questions without gold support are unanswerable from the corpus.
    """

    name = "gold"

    def judge(self, request: JudgeRequest) -> Verdict:
        evidence = {p.pid for p in request.evidence}
        answerable = request.gold_known and bool(request.gold_pids) and request.gold_pids <= evidence
        covered = len(request.gold_pids & evidence) / len(request.gold_pids) if request.gold_pids else 0.0
        return Verdict(answerable=answerable, judge=self.name, score=covered)


class OverrideJudge:
    """Wraps a judge; a human override stored for (episode, step) wins over it."""

    name = "override"

    def __init__(self, inner: SufficiencyJudge, overrides: MutableMapping[tuple[str, int], Verdict] | None = None):
        self.inner = inner
        self.overrides: MutableMapping[tuple[str, int], Verdict] = overrides if overrides is not None else {}

    def set_override(self, episode_id: str, t: int, answerable: bool, who: str | None = None) -> Verdict:
        verdict = Verdict(answerable=answerable, judge="human", score=None, who=who)
        self.overrides[(episode_id, t)] = verdict
        return verdict

    def judge(self, request: JudgeRequest) -> Verdict:
        override = self.overrides.get((request.episode_id, request.t))
        return override if override is not None else self.inner.judge(request)
