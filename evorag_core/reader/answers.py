"""Answers, one place for every method: the reader prompt (a short answer from numbered passages, or closed book),
the clean-up of generated answer text, and `Reader`, the answer step every method shares.

`Reader(backend, answer_cfg, chars, max_tokens).answer(question, passages) -> str` ("" = refusal); `read(...)` gives
the same answers as `span_reader.SpanAnswer`s, with the pid of the passage a span was read from (`source_pid`):
`answer.mode = "span"` gives a span of the passages, yes/no, or a refusal (`span_reader.SpanReader`, where the
measured alternatives are); `"free"` is greedy generation from `reader_prompt`, cleaned (`clean_answer`) - the reader
of every method before grounded answers, kept for larger models that answer well on their own."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Sequence

from evorag_core.types import Passage

if TYPE_CHECKING:
    from evorag_core.reader.span import SpanAnswer

__all__ = ["ANSWER_SYSTEM", "ANSWER_SYSTEM_CTX", "Reader", "clean_answer", "reader_prompt", "render_passages"]

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


def reader_prompt(backend: Any, question: str, passages: Sequence[Passage], chars: int) -> str:
    """The reader's chat prompt: the passages (closed book when there are none), the question, "Answer:"."""
    if passages:
        user = f"{render_passages(passages, chars)}\n\nQuestion: {question}\nAnswer:"
        return backend.chat_prompt(ANSWER_SYSTEM_CTX, user)
    return backend.chat_prompt(ANSWER_SYSTEM, f"Question: {question}\nAnswer:")


class Reader:
    """The answer step of every method (see the module docstring). `cfg` is a `config.AnswerConfig` (None: the
    defaults); `chars` the method's passage cut; `max_tokens` the free mode's generation budget. The span mode's
    `SpanReader` (its refusal reasons and answer kinds counted) is `span`, None in free mode."""

    def __init__(self, backend: Any, cfg: Any = None, chars: int = 300, max_tokens: int = 24) -> None:
        from evorag_core.config import AnswerConfig
        from evorag_core.reader.span import SpanReader

        self.backend, self.cfg = backend, cfg if cfg is not None else AnswerConfig()
        self.chars, self.max_tokens = chars, max_tokens
        self.span = SpanReader(backend, self.cfg, chars) if self.cfg.mode == "span" else None

    def prompt(self, question: str, passages: Sequence[Passage]) -> str:
        """The prompt the answer is read under (the free mode's generation prompt)."""
        if self.span is not None and passages:
            from evorag_core.reader.span import span_prompt

            return span_prompt(self.backend, question, passages, self.span.chars, self.cfg.demos)
        return reader_prompt(self.backend, question, passages, self.chars)

    def read(self, question: str, passages: Sequence[Passage], *, n: int = 1, temperature: float = 0.0,
             seed: int | None = None) -> list[SpanAnswer]:
        """`n` answers (greedy: the same one n times) with where each came from: the span mode's `SpanAnswer`s
        (a span's source passage in `source` / `source_pid`); in free mode kind "free" (or "refusal" when the
        cleaned text is empty) and no source."""
        from evorag_core.reader.span import SpanAnswer

        if self.span is not None:
            return self.span.read(question, passages, temperature=temperature, n=n, seed=seed)
        outs = self.backend.generate(reader_prompt(self.backend, question, passages, self.chars), self.max_tokens,
                                     stop=("\n",), temperature=temperature, n=n, seed=seed)
        texts = [clean_answer(o.text) for o in outs]
        return [SpanAnswer(t, "free" if t else "refusal") for t in texts]

    def answers(self, question: str, passages: Sequence[Passage], *, n: int = 1, temperature: float = 0.0,
                seed: int | None = None) -> list[str]:
        """`n` answer texts (greedy: the same one n times)."""
        return [a.text for a in self.read(question, passages, n=n, temperature=temperature, seed=seed)]

    def answer(self, question: str, passages: Sequence[Passage]) -> str:
        return self.answers(question, passages)[0]
