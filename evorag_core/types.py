"""Dataset records shared by every module: passages, questions, data sets and corpora."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

__all__ = ["Passage", "Question", "Dataset", "Corpus"]


@dataclass(frozen=True)
class Passage:
    pid: str
    title: str
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    dataset: str
    question: str
    answers: tuple[str, ...]
    type: str | None = None
    hops: int | None = None
    passages: tuple[Passage, ...] = ()
    gold_pids: frozenset[str] = frozenset()

    @property
    def has_passages(self) -> bool:
        return bool(self.passages)

    @property
    def unanswerable(self) -> bool:
        """The data marks it unanswerable (`type: "unanswerable"`, as the demo set's 12): the corpus holds no answer
        and the right action is REFUSE."""
        return self.type == "unanswerable"


@dataclass(frozen=True)
class Dataset:
    name: str
    path: str
    questions: tuple[Question, ...]

    def get(self, qid: str) -> Question:
        for q in self.questions:
            if q.id == qid:
                return q
        raise KeyError(f"question id {qid!r} is not in {self.path}")


@dataclass(frozen=True)
class Corpus:
    """A passage collection to retrieve from.

    `aliases` maps every pid that was folded into another (pooled mode de-duplicates by title+text)
    to the canonical pid kept in `passages`; canonical pids map to themselves implicitly.
    """

    passages: tuple[Passage, ...]
    aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def canonical(self, pid: str) -> str:
        return self.aliases.get(pid, pid)

    def gold_for(self, question: Question) -> frozenset[str]:
        return frozenset(self.canonical(p) for p in question.gold_pids)

    def __len__(self) -> int:
        return len(self.passages)
