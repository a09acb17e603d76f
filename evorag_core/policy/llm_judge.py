"""LLM sufficiency judge: does the evidence so far suffice to answer the question? (SPEC §2, refusal reward.)

The judge shows the question and the passages to the policy LM and reads its answer to "enough_evidence:" as a
choice between the continuations " yes" and " no": p = P(yes) / (P(yes) + P(no)), answerable iff p >= threshold.
No text is generated, so the verdict is deterministic and always well-formed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from evorag_core.lm.base import PolicyBackend
from evorag_core.policy.prompts import render_passage
from evorag_core.types import Passage

__all__ = ["JUDGE_SYSTEM_PROMPT", "LLMVerdict", "LLMSufficiencyJudge", "judge_prompt"]

JUDGE_SYSTEM_PROMPT = (
    "You check evidence. Given a question and numbered passages, decide whether the passages contain enough "
    "information to answer the question. Reply with one line: 'enough_evidence: yes' or 'enough_evidence: no'."
)
_ANSWER_PREFIX = "enough_evidence:"
_CHOICES = (" yes", " no")


@dataclass(frozen=True)
class LLMVerdict:
    answerable: bool
    p_yes: float  # P(yes) / (P(yes) + P(no))
    logprob_yes: float
    logprob_no: float


def judge_prompt(backend: PolicyBackend, question: str, passages: Sequence[Passage], passage_chars: int) -> str:
    shown = "\n".join(render_passage(i, p, passage_chars) for i, p in enumerate(passages, start=1))
    user = f"Question: {question}\nPassages:\n{shown or '(none)'}\nIs there enough evidence to answer the question?"
    return backend.chat_prompt(JUDGE_SYSTEM_PROMPT, user) + _ANSWER_PREFIX


class LLMSufficiencyJudge:
    """`judge_passages(question, passages) -> (answerable, p_yes)`; `judge(...)` gives the full `LLMVerdict`."""

    name = "llm"

    def __init__(self, backend: PolicyBackend, threshold: float = 0.5, passage_chars: int = 300) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
        self.backend = backend
        self.threshold = threshold
        self.passage_chars = passage_chars

    def judge(self, question: str, passages: Sequence[Passage]) -> LLMVerdict:
        prompt = judge_prompt(self.backend, question, passages, self.passage_chars)
        yes, no = self.backend.score_choices(prompt, _CHOICES)
        p_yes = _sigmoid(yes - no)  # = e^yes / (e^yes + e^no)
        return LLMVerdict(p_yes >= self.threshold, p_yes, yes, no)

    def judge_passages(self, question: str, passages: Sequence[Passage]) -> tuple[bool, float]:
        verdict = self.judge(question, passages)
        return verdict.answerable, verdict.p_yes


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)
