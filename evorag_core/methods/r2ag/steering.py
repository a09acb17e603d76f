"""Who proposes the queries of an expansion: the `Steering` protocol and the LM implementation.

`propose(requests)` answers one reply per request (the frontier branches of an iteration, decoded as one batch);
`sample(request, n, temperature, seed)` draws a group of replies for one state (GRPO). Every reply is parsed
leniently (`parse.parse_expansion`); a reply cut by the token limit is marked `truncated` (reward 0 by rule).
`ScriptedSteering` (`scripted.py`) is the deterministic implementation used without a language model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from evorag_core.types import Passage
from evorag_core.methods.r2ag.parse import Expansion, parse_expansion
from evorag_core.methods.r2ag.prompt import build_prompt

if TYPE_CHECKING:
    from evorag_core.config import R2agConfig
    from evorag_core.lm.base import Generation, PolicyBackend

__all__ = ["SteerRequest", "Proposal", "Steering", "LMSteering"]


@dataclass(frozen=True)
class SteerRequest:
    question: str
    context: tuple[Passage, ...]  # the passages on the branch, root first


@dataclass(frozen=True)
class Proposal:
    text: str
    expansion: Expansion
    truncated: bool = False
    prompt: str = ""
    token_ids: tuple[int, ...] = ()
    finish_reason: str = "stop"
    logprob: float = 0.0
    tokens: int = 0


class Steering(Protocol):
    name: str

    def propose(self, requests: Sequence[SteerRequest]) -> list[Proposal]: ...


class LMSteering:
    """Steering by a `PolicyBackend` (chat_prompt, generate, generate_batch), greedy unless temperature > 0."""

    name = "lm"

    def __init__(self, backend: PolicyBackend, *, max_new_tokens: int = 160, temperature: float = 0.0,
                 passage_chars: int = 300, demo: bool = True, max_queries: int = 6, seed: int = 0) -> None:
        self.backend = backend
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.passage_chars, self.demo, self.max_queries, self.seed = passage_chars, demo, max_queries, seed

    @classmethod
    def from_config(cls, backend: PolicyBackend, cfg: R2agConfig, seed: int = 0) -> "LMSteering":
        return cls(backend, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                   passage_chars=cfg.passage_chars, demo=cfg.demo, max_queries=cfg.max_queries, seed=seed)

    def prompt(self, request: SteerRequest) -> str:
        return build_prompt(self.backend, request.question, request.context, self.passage_chars, self.demo)

    def _proposal(self, prompt: str, gen: Generation) -> Proposal:
        return Proposal(gen.text, parse_expansion(gen.text, self.max_queries), gen.finish_reason == "length", prompt,
                        tuple(gen.token_ids), gen.finish_reason, gen.logprob, len(gen.token_ids))

    def propose(self, requests: Sequence[SteerRequest]) -> list[Proposal]:
        if not requests:
            return []
        prompts = [self.prompt(r) for r in requests]
        gens = self.backend.generate_batch(prompts, self.max_new_tokens, temperature=self.temperature,
                                           seed=self.seed if self.temperature > 0 else None)
        return [self._proposal(p, g) for p, g in zip(prompts, gens)]

    def sample(self, request: SteerRequest, n: int, temperature: float, seed: int | None = None) -> list[Proposal]:
        """`n` replies to one state, decoded together (the prompt runs once)."""
        prompt = self.prompt(request)
        gens = self.backend.generate(prompt, self.max_new_tokens, temperature=temperature, n=n, seed=seed)
        return [self._proposal(prompt, g) for g in gens]
