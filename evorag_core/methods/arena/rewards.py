"""ARENA's rewards (seed 004, §3.3) as pure functions; the training reward is their plain sum.

- format: 1 when the reply is well-formed (`arena_parse`: three parts, in order, nothing else), else 0;
- accuracy: normalized exact match of the `<answer>` part against any gold alias, 1/0 (ablation: token F1);
- relevance: the `<relevance>` ids against the gold reference ids: 1 for the same set, 0.5 for a partial overlap,
  0 for none (also when the list is missing or unreadable);
- bonus: `bonus` (10) when format, accuracy and relevance are all exactly 1, else 0 (ablation: bonus = 0).
Accuracy and relevance are computed from their own parts even when the format fails, as in the paper's reward
code; only the bonus needs all three.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from evorag_core.metrics import exact_match, f1_score
from evorag_core.reader.arena.parse import ArenaParse

__all__ = [
    "ArenaReward",
    "format_reward",
    "accuracy_reward",
    "relevance_reward",
    "bonus_reward",
    "arena_reward",
    "gold_reference_ids",
]


@dataclass(frozen=True)
class ArenaReward:
    format: float
    accuracy: float
    relevance: float
    bonus: float

    @property
    def total(self) -> float:
        return self.format + self.accuracy + self.relevance + self.bonus

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "total": self.total}


def format_reward(parsed: ArenaParse) -> float:
    return 1.0 if parsed.ok else 0.0


def accuracy_reward(answer: str | None, golds: Sequence[str], mode: str = "em") -> float:
    """Normalized EM (mode "em") or token F1 (mode "f1") of `answer` against the gold aliases; 0 without answer."""
    if mode not in ("em", "f1"):
        raise ValueError(f"accuracy mode must be 'em' or 'f1', got {mode!r}")
    if not answer:
        return 0.0
    return exact_match(answer, golds) if mode == "em" else f1_score(answer, golds)


def relevance_reward(predicted: Iterable[int] | None, gold: Iterable[int]) -> float:
    """1 if set(predicted) == set(gold), 0.5 if they share an id, else 0 (None: no readable list -> 0)."""
    if predicted is None:
        return 0.0
    pred, want = set(predicted), set(gold)
    if pred == want:
        return 1.0
    return 0.5 if pred & want else 0.0


def bonus_reward(format_score: float, accuracy: float, relevance: float, bonus: float = 10.0) -> float:
    return bonus if format_score == 1.0 and accuracy == 1.0 and relevance == 1.0 else 0.0


def arena_reward(
    parsed: ArenaParse, golds: Sequence[str], gold_ids: Iterable[int], *, accuracy: str = "em", bonus: float = 10.0
) -> ArenaReward:
    fmt = format_reward(parsed)
    acc = accuracy_reward(parsed.answer, golds, accuracy)
    rel = relevance_reward(parsed.relevance, gold_ids)
    return ArenaReward(fmt, acc, rel, bonus_reward(fmt, acc, rel, bonus))


def gold_reference_ids(pids: Sequence[str], gold_pids: Iterable[str]) -> tuple[int, ...]:
    """1-based numbers of the references (in order `pids`) that are gold."""
    gold = set(gold_pids)
    return tuple(i for i, pid in enumerate(pids, start=1) if pid in gold)
