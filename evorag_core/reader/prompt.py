"""The reader prompt (a short answer from numbered passages, or closed book) and the clean-up of generated
answer text; shared by the span reader and the free reader."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

from evorag_core.types import Passage

if TYPE_CHECKING:
    from evorag_core.lm.base import PolicyBackend

__all__ = ["ANSWER_SYSTEM", "ANSWER_SYSTEM_CTX", "clean_answer", "reader_prompt", "render_passages"]

ANSWER_SYSTEM = "Answer the question with a short phrase (a name, a date, a number or a few words). No sentence."
ANSWER_SYSTEM_CTX = (
    "Answer the question with a short phrase (a name, a date, a number or a few words) taken from the passages. "
    "No sentence."
)

_PREFIX = re.compile(r"^(so\s+)?(the\s+)?(final\s+)?(answer\s*(is)?\s*[:\-]?)\s*", re.I)
_ENUMERATOR = re.compile(r"^\(?\d{1,2}[).]\s+(?=\D)")  # "1) ", "10. ", "(2) " before text (not "1996")
_EDGE = " .\"'“”‘’"


def clean_answer(text: str) -> str:
    """First line, without an 'Answer:' / 'So the final answer is:'-style prefix, surrounding quotes or a final
    period, or a list enumerator ("1) ", "10. "; a number that is the answer, "1996", stays).
    `clean_answer('So the final answer is: "Sable River".\\nmore') == 'Sable River'`."""
    stripped = text.strip()
    line = stripped.split("\n", 1)[0].strip() if stripped else ""
    line = _PREFIX.sub("", line).strip()
    line = _ENUMERATOR.sub("", line).strip()
    return line.strip(_EDGE)


def render_passages(passages: Sequence[Passage], chars: int) -> str:
    """`[i] title: text` lines, each text cut to `chars` characters."""
    return "\n".join(f"[{i}] {p.title}: {p.text[:chars]}" for i, p in enumerate(passages, 1))


def reader_prompt(backend: PolicyBackend, question: str, passages: Sequence[Passage], chars: int) -> str:
    """The reader's chat prompt: the passages (closed book when there are none), the question, "Answer:"."""
    if passages:
        user = f"{render_passages(passages, chars)}\n\nQuestion: {question}\nAnswer:"
        return backend.chat_prompt(ANSWER_SYSTEM_CTX, user)
    return backend.chat_prompt(ANSWER_SYSTEM, f"Question: {question}\nAnswer:")
