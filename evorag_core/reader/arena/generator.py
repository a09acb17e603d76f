"""ARENA's traceable generator (seed 004): a reply over numbered references that lists the relevant ones, cites
them as [i] in its analysis and gives the answer; parsed strictly, with a lenient answer extraction.

- `ArenaGenerator(backend, cfg).generate(question, passages) -> ArenaOutput`: prompt (`reader.arena.prompt`), one
  reply from the policy LM (greedy unless cfg.temperature > 0; no stop string, the reply ends at the end-of-turn
  token, so text after `</answer>` makes the format fail as the paper's format reward does), strict parse
  (`reader.arena.parse`) and the answer used for evaluation (the `<answer>` part, else a lenient extraction, flagged).
- `arena_answer(backend, question, passages)`: the EVO-RAG agent's ANSWER step (`agent --answerer arena`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from evorag_core.reader.arena.parse import ArenaParse, lenient_answer, parse_arena
from evorag_core.reader.arena.prompt import ArenaConfig, build_prompt
from evorag_core.types import Passage

if TYPE_CHECKING:
    from evorag_core.lm.base import PolicyBackend

__all__ = ["ArenaOutput", "ArenaGenerator", "arena_answer"]


@dataclass(frozen=True)
class ArenaOutput:
    prompt: str
    text: str  # the raw reply
    references: tuple[Passage, ...]  # reference i is references[i - 1]
    parsed: ArenaParse
    answer: str | None  # the <answer> part, else the lenient extraction; None when nothing was found
    fallback: bool  # the answer came from the lenient extraction (or is missing)
    finish_reason: str  # stop | length
    logprob: float  # log P(reply | prompt) under the model
    tokens: int
    token_ids: tuple[int, ...] = ()  # the reply's token ids as sampled (end-of-turn token not included)

    @property
    def selected(self) -> tuple[Passage, ...]:
        """References listed in <relevance> that exist (1..n), in the listed order."""
        return tuple(self.references[i - 1] for i in (self.parsed.relevance or ()) if 1 <= i <= len(self.references))

    @property
    def cited(self) -> tuple[Passage, ...]:
        """References cited as [i] in the analysis that exist."""
        return tuple(self.references[i - 1] for i in self.parsed.citations if 1 <= i <= len(self.references))

    @property
    def supporting(self) -> tuple[Passage, ...]:
        """The references the reply rests on: those listed in <relevance> when that list is readable, else those
        cited as [i] in the analysis."""
        return self.selected if self.parsed.relevance is not None else self.cited

    def details(self) -> dict[str, Any]:
        """JSON-ready record of the reply (kept with an evaluation result or an agent's ANSWER step): the raw
        text, the references' pids in their numbering, the parsed parts, the supporting pids, and where the
        format failed (None: well-formed)."""
        p = self.parsed
        return {
            "text": self.text,
            "references": [r.pid for r in self.references],
            "relevance": list(p.relevance) if p.relevance is not None else None,
            "analysis": p.analysis,
            "citations": list(p.citations),
            "answer_part": p.answer,
            "selected": [r.pid for r in self.supporting],
            "format_ok": p.ok,
            "failure": {"part": p.failure.part, "reason": p.failure.reason} if p.failure else None,
            "lenient_answer": self.fallback,
            "finish_reason": self.finish_reason,
            "tokens": self.tokens,
        }


class ArenaGenerator:
    def __init__(self, backend: PolicyBackend, cfg: ArenaConfig | None = None) -> None:
        self.backend = backend  # a PolicyBackend (chat_prompt + generate)
        self.cfg = cfg if cfg is not None else ArenaConfig()

    def prompt(self, question: str, passages: Sequence[Passage]) -> str:
        return build_prompt(self.backend, question, passages, self.cfg)

    def generate(self, question: str, passages: Sequence[Passage], *, seed: int | None = None) -> ArenaOutput:
        """One reply at cfg.temperature (0: greedy)."""
        return self.sample(question, passages, 1, self.cfg.temperature, seed=seed)[0]

    def sample(
        self, question: str, passages: Sequence[Passage], n: int, temperature: float, *, seed: int | None = None
    ) -> list[ArenaOutput]:
        """`n` replies decoded as one batch (the prompt runs once)."""
        refs = tuple(passages)
        prompt = self.prompt(question, refs)
        gens = self.backend.generate(prompt, self.cfg.max_new_tokens, temperature=temperature, n=n, seed=seed)
        return [self.output(prompt, refs, g.text, g.finish_reason, g.logprob, g.token_ids) for g in gens]

    @staticmethod
    def output(prompt: str, refs: tuple[Passage, ...], text: str, finish: str = "stop", logprob: float = 0.0,
               token_ids: Sequence[int] = ()) -> ArenaOutput:
        """Parse a reply `text` to `prompt` over `refs` (also for replies produced elsewhere, e.g. stored ones)."""
        parsed = parse_arena(text, len(refs))
        answer, fallback = lenient_answer(text)
        return ArenaOutput(prompt, text, refs, parsed, answer, fallback, finish, logprob, len(token_ids),
                           tuple(token_ids))


def arena_answer(
    backend: PolicyBackend, question: str, passages: Sequence[Passage], cfg: ArenaConfig | None = None
) -> tuple[str | None, tuple[str, ...], ArenaOutput]:
    """The agent's ANSWER step: (answer, cited pids, output).

    The pids are those of the references listed in <relevance> (valid numbers only); when that list is missing or
    unreadable, those cited as [i] in the analysis. `answer` is None when the reply holds no answer at all; the
    caller decides what to do then (e.g. REFUSE). `passages` are the ones the agent gathered, numbered 1..n.
    """
    output = ArenaGenerator(backend, cfg).generate(question, passages)
    return output.answer, tuple(p.pid for p in output.supporting), output
