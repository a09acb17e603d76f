"""What the agent, the judge and the trainers need from a language model: the `PolicyBackend` protocol.

Token boundary rule, shared by every backend and by training code: a (prompt, completion) pair is the token ids of
`prompt` followed by the token ids of `completion`, each encoded on its own without special tokens
(`encode_pair`). Scores and generations are consistent under this rule, so a completion's log-prob computed at
decision time equals `sequence_logprob(prompt, completion)` later (up to float rounding).
"""
from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, Sequence, runtime_checkable

__all__ = ["Generation", "PolicyBackend", "encode_pair", "interruptible", "chat_prompt", "grouped_sequence_logprobs"]

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Generation:
    """One sampled continuation. `text == tokenizer.decode(token_ids)`; `logprobs[i]` is the log-prob of token i
    under the model (temperature 1, whatever temperature was used to sample it). A stop string or end-of-turn token
    is never part of `text`/`token_ids`; `finish_reason` is "stop" then, "length" when max_new_tokens ran out."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason

    @property
    def logprob(self) -> float:
        return float(sum(self.logprobs))


@runtime_checkable
class PolicyBackend(Protocol):
    model_id: str
    device: str
    dtype: str
    tokens_generated: int
    prompt_tokens: int

    def chat_prompt(self, system: str, user: str, examples: Sequence[tuple[str, str]] = ()) -> str:
        """The model's chat template over a system turn, example (user, assistant) turns and the user turn, ready for
        the assistant's reply."""
        ...

    def score_choices(self, prompt: str, choices: Sequence[str]) -> list[float]:
        """log P(choice | prompt), summed over the choice's tokens, for each choice."""
        ...

    def generate(
        self,
        prompt: str,
        max_new_tokens: int,
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        n: int = 1,
        seed: int | None = None,
    ) -> list[Generation]: ...

    def generate_batch(
        self,
        prompts: Sequence[str],
        max_new_tokens: int | Sequence[int],
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> list[Generation]:
        """One continuation per prompt, decoded together (per-prompt token limits allowed)."""
        ...

    def sequence_logprob(self, prompt: str, completion: str) -> float: ...

    def sequence_logprobs(self, pairs: Sequence[tuple[str, str]]) -> list[float]: ...

    def load_adapter(self, name: str, path: Path | str) -> None: ...

    def list_adapters(self) -> list[str]: ...

    def activate(self, name: str | None) -> None: ...

    @property
    def active_adapter(self) -> str | None: ...


def encode_pair(tokenizer, prompt: str, completion: str) -> tuple[list[int], list[int]]:
    """Token ids of `prompt` and of `completion` under the project's boundary rule (see the module docstring)."""
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    c = tokenizer(completion, add_special_tokens=False)["input_ids"] if completion else []
    return list(p), list(c)


def interruptible(backend: object, event: threading.Event) -> AbstractContextManager[None]:
    """`backend.interruptible(event)` where the backend has it (the transformers backend: a generation stops before
    its next token once `event` is set, raising GenerationInterrupted); otherwise nothing, and calls run to their end."""
    enter = getattr(backend, "interruptible", None)
    return enter(event) if callable(enter) else nullcontext()


def chat_prompt(tokenizer, system: str, user: str, examples: Sequence[tuple[str, str]] = ()) -> str:
    """The chat template's prompt for a system message, few-shot (question, reply) turns and the user turn: the one
    body of every backend's `chat_prompt`."""
    messages = [{"role": "system", "content": system}]
    for question, reply in examples:
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
    messages.append({"role": "user", "content": user})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def grouped_sequence_logprobs(score_choices, pairs: Sequence[tuple[str, str]]) -> list[float]:
    """log P(completion | prompt) for each pair through `score_choices(prompt, completions)`; pairs sharing a prompt
    are scored together (the body of a backend's `sequence_logprobs`)."""
    out: list[float] = [0.0] * len(pairs)
    by_prompt: dict[str, list[int]] = {}
    for i, (prompt, _) in enumerate(pairs):
        by_prompt.setdefault(prompt, []).append(i)
    for prompt, idx in by_prompt.items():
        for i, s in zip(idx, score_choices(prompt, [pairs[i][1] for i in idx])):
            out[i] = s
    return out
