"""Corpus modes: which passages an episode retrieves from.

- ``"pooled"``: every passage of the data file, de-duplicated by (title, text). Passages are kept in
  file order (question by question, passage by passage); the first pid seen for a (title, text) pair
  is canonical and every later pid of the same pair goes into ``Corpus.aliases``.
- ``"per-question"``: the question's own passages, in their order, untouched (no de-duplication).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Iterable

from evorag_core.errors import ConfigError
from evorag_core.types import Corpus, Dataset, Passage, Question

__all__ = ["CORPUS_MODES", "build_corpus", "pool_passages"]

CORPUS_MODES: tuple[str, ...] = ("pooled", "per-question")


def build_corpus(dataset: Dataset, mode: str, question: Question | None = None) -> Corpus:
    """The corpus for `mode`; `question` is required by "per-question" and ignored by "pooled"."""
    if mode == "pooled":
        return pool_passages(p for q in dataset.questions for p in q.passages)
    if mode == "per-question":
        if question is None:
            raise ConfigError("corpus mode 'per-question' needs the question whose passages to use")
        return Corpus(passages=tuple(question.passages))
    raise ConfigError(f"unknown corpus mode {mode!r}; expected one of {', '.join(CORPUS_MODES)}")


def pool_passages(passages: Iterable[Passage]) -> Corpus:
    """De-duplicate by (title, text), keeping the first pid of each pair and aliasing the rest to it."""
    canonical: dict[tuple[str, str], str] = {}
    kept: list[Passage] = []
    aliases: dict[str, str] = {}
    for passage in passages:
        key = (passage.title, passage.text)
        first = canonical.get(key)
        if first is None:
            canonical[key] = passage.pid
            kept.append(passage)
        elif first != passage.pid:
            aliases[passage.pid] = first
    return Corpus(passages=tuple(kept), aliases=MappingProxyType(aliases))
