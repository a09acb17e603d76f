"""The generator G's four jobs in DynaKrag, with token accounting: judge sufficiency, describe the missing
fact, compress the evidence into snippets, answer.

Every prompt starts with the same system turn and "Question / Passages" block, passages in evidence order, so the
backend's prefix cache reuses the evidence already run at the previous call. Decoding is greedy (deterministic).
`Usage` counts every backend call, its full prompt length (cache hits included) and its generated tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from evorag_core.config import AnswerConfig, DynaKragConfig
from evorag_core.lm.base import PolicyBackend
from evorag_core.policy.prompts import render_passage
from evorag_core.reader.answers import Reader
from evorag_core.reader.prompt import clean_answer
from evorag_core.types import Passage
from evorag_core.evidence.text import content_terms, sentences, uncovered_terms

__all__ = ["Usage", "EvidenceLM", "align_snippets", "clean_answer", "uncovered_terms"]

SYSTEM = (
    "You check and use evidence. Given a question and numbered passages, you judge whether the passages answer "
    "the question, name the missing fact, copy the useful sentences, or answer in a few words."
)
_JUDGE = "Is there enough evidence to answer the question? Reply 'enough_evidence: yes' or 'enough_evidence: no'."
_COMPRESS = "Copy the sentences from the passages that together answer the question, one per line."
_ANSWER = "Answer the question with a few words taken from the evidence. Reply with the answer only."


@dataclass(frozen=True)
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.calls + other.calls, self.prompt_tokens + other.prompt_tokens,
                     self.completion_tokens + other.completion_tokens)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def align_snippets(lines: Sequence[str], passages: Sequence[Passage], limit: int) -> tuple[str, ...]:
    """Map each generated line to the evidence sentence sharing most of its content terms; keep a line when at
    least half of its terms are in that sentence. Returns up to `limit` distinct real sentences, so the compressed
    evidence never contains text the passages do not."""
    pool = [(f"{p.title}: {s}", set(content_terms(s))) for p in passages for s in sentences(p.text)]
    kept: list[str] = []
    for line in lines:
        terms = set(content_terms(line))
        if not terms or not pool:
            continue
        best, overlap = max(((text, len(terms & sent)) for text, sent in pool), key=lambda x: x[1])
        if overlap / len(terms) >= 0.5 and best not in kept:
            kept.append(best)
        if len(kept) >= limit:
            break
    return tuple(kept)


class EvidenceLM:
    """`answer_cfg` (an `AnswerConfig`, None: its defaults) selects the answer step: span mode reads a span / yes /
    no / refusal from the final context's passages with the shared reader (`answers.Reader`; the compressed snippets
    then serve nothing but the trace), free mode generates from the snippets or passages as before."""

    def __init__(self, backend: PolicyBackend, cfg: DynaKragConfig, answer_cfg: AnswerConfig | None = None):
        self.backend = backend
        self.cfg = cfg
        self.reader = Reader(backend, answer_cfg, cfg.passage_chars, cfg.answer_tokens)

    def _counters(self) -> tuple[int, int]:
        """(prompt tokens run or served from the prefix cache, generated tokens) so far."""
        b = self.backend
        return b.prompt_tokens + getattr(b, "cached_prompt_tokens", 0), b.tokens_generated

    def _usage(self, before: tuple[int, int], calls: int) -> Usage:
        after = self._counters()
        return Usage(calls, after[0] - before[0], after[1] - before[1])

    def _prompt(self, question: str, passages: Sequence[Passage], task: str) -> str:
        shown = "\n".join(render_passage(i, p, self.cfg.passage_chars) for i, p in enumerate(passages, start=1))
        user = f"Question: {question}\nPassages:\n{shown or '(none)'}\n{task}"
        return self.backend.chat_prompt(SYSTEM, user)

    def judge(self, question: str, passages: Sequence[Passage]) -> tuple[bool, float, Usage]:
        """(sufficient, P(yes) / (P(yes) + P(no)), usage): one scoring call, nothing generated."""
        before = self._counters()
        prompt = self._prompt(question, passages, _JUDGE) + "enough_evidence:"
        yes, no = self.backend.score_choices(prompt, (" yes", " no"))
        p_yes = _sigmoid(yes - no)
        return p_yes >= self.cfg.sufficiency_threshold, p_yes, self._usage(before, 1)

    def missing_info(self, question: str, passages: Sequence[Passage]) -> tuple[str, Usage]:
        """The missing fact as a short search query, continuing the judge's prompt after its 'no'. When the LM writes
        nothing usable (no content word, e.g. just "no"), the gap is the question's content words that no passage
        contains (the question itself if every word is covered): still observable, never gold."""
        before = self._counters()
        prompt = self._prompt(question, passages, _JUDGE) + "enough_evidence: no\nSearch query for the missing fact:"
        gen = self.backend.generate(prompt, self.cfg.gap_tokens, stop=("\n",), temperature=0.0)[0]
        text = " ".join(gen.text.replace('"', " ").split()).strip(" '")
        if not set(content_terms(text)) - {"yes", "enough", "evidence"}:
            text = uncovered_terms(question, passages) or question
        return text, self._usage(before, 1)

    def compress(self, question: str, passages: Sequence[Passage]) -> tuple[tuple[str, ...], Usage]:
        """Up to `max_snippets` evidence sentences the LM selected (see `align_snippets`)."""
        before = self._counters()
        prompt = self._prompt(question, passages, _COMPRESS)
        gen = self.backend.generate(prompt, self.cfg.compress_tokens, temperature=0.0)[0]
        lines = [ln.strip(" -*0123456789.)\t") for ln in gen.text.splitlines()]
        return align_snippets([ln for ln in lines if ln], passages, self.cfg.max_snippets), self._usage(before, 1)

    def answer(self, question: str, passages: Sequence[Passage], snippets: Sequence[str] | None) -> tuple[str, Usage]:
        """Span mode: the shared reader over the passages. Free mode: greedy short answer from the snippets when
        there are any, else from the passages."""
        before = self._counters()
        if self.reader.span is not None:
            return self.reader.answer(question, passages), self._usage(before, 1)
        if snippets:
            evidence = "\n".join(f"- {s}" for s in snippets)
            user = f"Question: {question}\nEvidence:\n{evidence}\n{_ANSWER}"
            prompt = self.backend.chat_prompt(SYSTEM, user) + "Answer:"
        else:
            prompt = self._prompt(question, passages, _ANSWER) + "Answer:"
        gen = self.backend.generate(prompt, self.cfg.answer_tokens, stop=("\n",), temperature=0.0)[0]
        return clean_answer(gen.text), self._usage(before, 1)
