"""Answers, one place for every method: `Reader`, the answer step every method shares (its prompt and the
clean-up of generated text are in `reader.prompt`).

`Reader(backend, answer_cfg, chars, max_tokens).answer(question, passages) -> str` ("" = refusal); `read(...)` gives
the same answers as `span_reader.SpanAnswer`s, with the pid of the passage a span was read from (`source_pid`):
`answer.mode = "span"` gives a span of the passages, yes/no, or a refusal (`span_reader.SpanReader`, where the
measured alternatives are); `"free"` is greedy generation from `reader_prompt`, cleaned (`clean_answer`) - the reader
of every method before grounded answers, kept for larger models that answer well on their own.

`answer.adapter` gives the reader LoRA weights of its own: the answer is read with that adapter active on the shared
backend, and whatever adapter was active before (the policy's, or none) is active again afterwards, so a policy
trained on rollouts and a reader trained on answer pairs (`bench.learning --no-rollouts`) run in one agent. The
studio calls a policy under its provider's lock, so the switch and the switch back happen inside one locked call."""
from __future__ import annotations

import hashlib
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from evorag_core.config import AnswerConfig
from evorag_core.reader.prompt import clean_answer, reader_prompt
from evorag_core.reader.span import SpanAnswer, SpanReader
from evorag_core.types import Passage

if TYPE_CHECKING:
    from evorag_core.lm.base import PolicyBackend

__all__ = ["Reader"]


class Reader:
    """The answer step of every method (see the module docstring). `cfg` is a `config.AnswerConfig` (None: the
    defaults); `chars` the method's passage cut; `max_tokens` the free mode's generation budget. The span mode's
    `SpanReader` (its refusal reasons and answer kinds counted) is `span`, None in free mode."""

    def __init__(self, backend: PolicyBackend, cfg: AnswerConfig | None = None, chars: int = 300,
                 max_tokens: int = 24) -> None:
        self.backend, self.cfg = backend, cfg if cfg is not None else AnswerConfig()
        self.chars, self.max_tokens = chars, max_tokens
        self.span = SpanReader(backend, self.cfg, chars) if self.cfg.mode == "span" else None
        self.adapter = load_reader_adapter(backend, self.cfg.adapter) if self.cfg.adapter else None

    @contextmanager
    def _weights(self) -> Iterator[None]:
        """The reader's own adapter active for the block (nothing to do without one); the previous one after."""
        if self.adapter is None:
            yield
            return
        before = self.backend.active_adapter
        self.backend.activate(self.adapter)
        try:
            yield
        finally:
            self.backend.activate(before)

    def prompt(self, question: str, passages: Sequence[Passage]) -> str:
        """The prompt the answer is read under (the free mode's generation prompt)."""
        if self.span is not None and passages:
            return self.span.prompt(question, passages)
        return reader_prompt(self.backend, question, passages, self.chars)

    def read(self, question: str, passages: Sequence[Passage], *, n: int = 1, temperature: float = 0.0,
             seed: int | None = None) -> list[SpanAnswer]:
        """`n` answers (greedy: the same one n times) with where each came from: the span mode's `SpanAnswer`s
        (a span's source passage in `source` / `source_pid`); in free mode kind "free" (or "refusal" when the
        cleaned text is empty) and no source."""
        with self._weights():
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


def load_reader_adapter(backend: PolicyBackend, path: str) -> str:
    """The name under which `path`'s adapter is loaded on `backend` (loaded now unless a Reader already did; not
    activated). The name is derived from the resolved path, so every Reader of one backend shares one copy. A missing
    or corrupt adapter raises the backend's AdapterError, naming the path."""
    folder = Path(path).expanduser().resolve()
    name = "reader-" + hashlib.sha256(str(folder).encode()).hexdigest()[:12]
    if name not in backend.list_adapters():
        from evorag_core.adapters.load import load_verified

        load_verified(backend, name, folder)
    return name
