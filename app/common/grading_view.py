"""The finished episode's grade and its answer's source passage, for the Episode tab.

The grade itself is the library's (`evorag_core.metrics.grade`, of a finished record `evorag_core.env.rows.
episode_grade`: the one grading every stored outcome uses); here it is drawn as a badge (`grade_html`).

`source_index` finds the passage a span answer was read from: the one the reader recorded (the ANSWER step's
`info["answer_source"]`, a pid), else - episodes stored before that record, answers not from the span reader - the
first passage whose title or text contains the span (case and whitespace folded); yes/no answers have none.
`highlight` writes a text as escaped HTML with every occurrence of the span wrapped in <mark>.
"""
from __future__ import annotations

import html
import re
from typing import Sequence

from evorag_core.env.episode import EpisodeRecord
from evorag_core.env.rows import episode_grade
from evorag_core.metrics import Grade, normalize_answer
from evorag_core.types import Passage, Question

__all__ = ["is_unanswerable", "gold_text", "span_pattern", "source_index", "highlight", "grade_html", "episode_grade",
           "recorded_source"]

_YES_NO = frozenset(("yes", "no"))


def is_unanswerable(question: Question) -> bool:
    """A question the corpus cannot answer (the demo's type "unanswerable")."""
    return question.type == "unanswerable"


def gold_text(question: Question) -> str:
    """What the page shows as the gold answer: "unanswerable", the answers, or "unknown (free question)"."""
    if is_unanswerable(question):
        return "unanswerable"
    return ", ".join(question.answers) if question.answers else "unknown (free question)"


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


def recorded_source(record: EpisodeRecord) -> str | None:
    """The pid the span reader recorded for the final answer (`info["answer_source"]` of the ANSWER step), if any."""
    if record.answer is None:
        return None
    value = record.steps[-1].info.get("answer_source")
    return str(value) if value else None
