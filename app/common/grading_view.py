"""The finished episode's grade and its answer's source passage, for the Episode tab.

`grade_episode` grades the final outcome with the project's metrics (`evorag_core.metrics.exact_match` /
`f1_score`, as every evaluation does):
- an answerable question (gold answers known): the answer is "correct" when EM = 1, "partly correct" when
  0 < F1 and EM = 0, "wrong" when F1 = 0; a refusal, or running out of steps, is "wrong" (EM 0, F1 0);
- an unanswerable question (type "unanswerable": its stored answer is a plausible falsehood, never shown): a refusal
  is "correct" (EM 1, F1 1: the expected outcome), an answer or running out of steps "wrong" (EM 0, F1 0);
- a question without gold (a typed free question): no grade.

`source_index` finds the passage a span answer was read from: the one the reader recorded (the ANSWER step's
`info["answer_source"]`, a pid), else - episodes stored before that record, answers not from the span reader - the
first passage whose title or text contains the span (case and whitespace folded); yes/no answers have none.
`highlight` writes a text as escaped HTML with every occurrence of the span wrapped in <mark>.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Sequence

from evorag_core.env.episode import EpisodeRecord
from evorag_core.metrics import exact_match, f1_score, normalize_answer
from evorag_core.types import Passage, Question

__all__ = ["Grade", "VERDICT_LABELS", "is_unanswerable", "gold_text", "grade_episode", "span_pattern",
           "source_index", "highlight", "grade_html", "episode_grade", "recorded_source"]

VERDICT_LABELS = {"correct": "correct", "partial": "partly correct", "wrong": "wrong"}
_YES_NO = frozenset(("yes", "no"))


@dataclass(frozen=True)
class Grade:
    verdict: str  # "correct" | "partial" | "wrong"
    em: float
    f1: float
    answerable: bool  # False: an unanswerable question (a refusal is the right outcome)
    reason: str  # one short phrase: what was graded

    @property
    def label(self) -> str:
        return VERDICT_LABELS[self.verdict]


def is_unanswerable(question: Question) -> bool:
    """A question the corpus cannot answer (the demo's type "unanswerable")."""
    return question.type == "unanswerable"


def gold_text(question: Question) -> str:
    """What the page shows as the gold answer: "unanswerable", the answers, or "unknown (free question)"."""
    if is_unanswerable(question):
        return "unanswerable"
    return ", ".join(question.answers) if question.answers else "unknown (free question)"


def grade_episode(answer: str | None, refused: bool, golds: Sequence[str], answerable: bool = True) -> Grade | None:
    """The grade of a finished episode's outcome (see the module docstring): `answer` None when it refused
    (`refused`) or ran out of steps. None when an answerable question has no gold answers."""
    if not answerable:
        if refused:
            return Grade("correct", 1.0, 1.0, False, "refused an unanswerable question")
        what = "answered an unanswerable question" if answer is not None else "ran out of steps"
        return Grade("wrong", 0.0, 0.0, False, what)
    if not golds:
        return None
    if answer is None:
        return Grade("wrong", 0.0, 0.0, True, "refused an answerable question" if refused else "ran out of steps")
    em, f1 = exact_match(answer, golds), f1_score(answer, golds)
    verdict = "correct" if em >= 1.0 else "partial" if f1 > 0.0 else "wrong"
    reason = {"correct": "exact match", "partial": "overlaps the gold answer", "wrong": "no overlap with the gold answer"}
    return Grade(verdict, em, f1, True, reason[verdict])


def span_pattern(span: str | None) -> re.Pattern[str] | None:
    """The span as a case-insensitive pattern whose spaces match any whitespace; None for an empty span or yes/no."""
    words = (span or "").split()
    if not words or normalize_answer(span or "") in _YES_NO:
        return None
    return re.compile(r"\s+".join(re.escape(w) for w in words), re.I)


def source_index(span: str | None, passages: Sequence[Passage], recorded: str | None = None) -> int | None:
    """The 0-based index in `passages` of the span's source passage: the recorded pid when it is among them, else
    the first passage whose title or text contains the span; None for yes/no, an empty span, or no match."""
    pattern = span_pattern(span)
    if pattern is None:
        return None
    if recorded:
        found = next((i for i, p in enumerate(passages) if p.pid == recorded), None)
        if found is not None:
            return found
    return next((i for i, p in enumerate(passages) if pattern.search(p.title) or pattern.search(p.text)), None)


def highlight(text: str, span: str | None) -> str:
    """`text` as escaped HTML text with every occurrence of `span` (case and whitespace folded) in <mark>."""
    pattern = span_pattern(span)
    if pattern is None:
        return html.escape(text, quote=True)
    out, at = [], 0
    for m in pattern.finditer(text):
        out += [html.escape(text[at:m.start()], quote=True), "<mark>", html.escape(m.group(0), quote=True), "</mark>"]
        at = m.end()
    out.append(html.escape(text[at:], quote=True))
    return "".join(out)


def grade_html(grade: Grade | None) -> str:
    """The badge (verdict, EM, F1) and, beside it, what was graded ("refused an unanswerable question");
    "" without a grade."""
    if grade is None:
        return ""
    return (f'<span class="badge grade {grade.verdict}" id="evo-grade" data-verdict="{grade.verdict}">'
            f"{grade.label} · EM {grade.em:.0f} · F1 {grade.f1:.2f}</span>"
            f' <span class="evo-grade-why">({html.escape(grade.reason, quote=True)})</span>')


def episode_grade(question: Question, record: EpisodeRecord) -> Grade | None:
    """`grade_episode` of a finished episode on `question`; None while it runs or when the question has no gold."""
    if not record.done:
        return None
    return grade_episode(record.answer, record.refused, question.answers, answerable=not is_unanswerable(question))


def recorded_source(record: EpisodeRecord) -> str | None:
    """The pid the span reader recorded for the final answer (`info["answer_source"]` of the ANSWER step), if any."""
    if record.answer is None:
        return None
    value = record.steps[-1].info.get("answer_source")
    return str(value) if value else None
