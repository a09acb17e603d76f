"""What the policy may see of an episode: the question, the active chain and the dropped queries.

Gold support and gold answers never appear here; they are for rewards only.
"""
from __future__ import annotations

from dataclasses import dataclass

from evorag_core.types import Passage

__all__ = ["Hop", "AgentView"]


@dataclass(frozen=True)
class Hop:
    query: str
    passages: tuple[Passage, ...]


@dataclass(frozen=True)
class AgentView:
    question: str
    chain: tuple[Hop, ...]  # the active chain of sub-queries with their passages
    dropped: tuple[str, ...]  # queries removed by BACKTRACK (earlier attempts)
    t: int  # index of the step about to be taken, 1-based
    t_max: int

    @property
    def passages(self) -> tuple[Passage, ...]:
        """Passages of the active chain in order, without repeats."""
        seen: dict[str, Passage] = {}
        for hop in self.chain:
            for p in hop.passages:
                seen.setdefault(p.pid, p)
        return tuple(seen.values())
