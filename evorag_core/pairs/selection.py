"""Pair selection from sibling returns: `build_pairs` (the comparable pairs of one branch state over a margin) and
`PairSelector` (dedup and greedy-side balance over a whole run, with its `RolloutStats`).

Pairs: every two distinct candidates of one state whose branches are comparable (both ran to their end, or both
were cut at the same horizon) and whose returns differ by at least `min(policy_margin, preference_margin)` become a
pair (higher return = chosen). The `margin` column holds |dG| so that consumers filter by their own threshold:
DPO uses margin >= policy_margin (0.2), the preference model margin >= preference_margin (0.3). `PairSelector`
then drops exact duplicates (same prompt and the same two completions, in either order) and balances the pairs
that involve the greedy action so that "the chosen side is the policy's greedy choice" holds in about half of them
(majority side down-sampled: it may exceed the minority by at most a factor `balance_ratio`, plus one; the excess is
held back and released as soon as the other side catches up, the rest is dropped at the end of the run). Pairs
between two sampled siblings carry no such shortcut and are never held back.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from evorag_core.pairs.branches import Branch, BranchState, RolloutPair

__all__ = ["build_pairs", "RolloutStats", "PairSelector"]


def _comparable(a: Branch, b: Branch) -> bool:
    return (a.complete and b.complete) or (not a.complete and not b.complete and a.steps == b.steps)


def build_pairs(state: BranchState, min_margin: float) -> list[RolloutPair]:
    """All pairs of distinct, comparable branches of one state with |dG| >= min_margin, higher return chosen."""
    out: list[RolloutPair] = []
    branches = state.branches
    for i in range(len(branches)):
        for j in range(i + 1, len(branches)):
            a, b = branches[i], branches[j]
            if a.completion == b.completion or not _comparable(a, b):
                continue
            if abs(a.ret - b.ret) + 1e-12 < min_margin:
                continue
            hi, lo = (a, b) if a.ret > b.ret else (b, a)
            out.append(RolloutPair(state.prompt, hi, lo, state.t))
    return out


@dataclass
class RolloutStats:
    episodes: int = 0
    steps: int = 0
    candidates: int = 0  # sibling rows stored (K per branch state)
    branches: int = 0  # distinct branches scored (greedy included)
    decisions: int = 0
    pairs_built: int = 0  # comparable pairs over the margin
    pairs_kept: int = 0
    dropped_duplicate: int = 0
    dropped_balance: int = 0
    greedy_chosen: int = 0  # kept pairs whose chosen side is the greedy action
    greedy_rejected: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class PairSelector:
    """Dedup and greedy-side balance over a whole run (see the module docstring); feed it pairs with `offer`."""

    balance_ratio: float = 1.0  # 0 disables balancing
    stats: RolloutStats = field(default_factory=RolloutStats)
    _seen: set[str] = field(default_factory=set)
    _held: dict[bool, deque] = field(default_factory=lambda: {True: deque(), False: deque()})

    def offer(self, pairs: Iterable[RolloutPair]) -> list[RolloutPair]:
        """The pairs to store now: new ones that pass, plus held-back ones the balance now admits."""
        out: list[RolloutPair] = []
        for pair in pairs:
            self.stats.pairs_built += 1
            if pair.key in self._seen:
                self.stats.dropped_duplicate += 1
                continue
            self._seen.add(pair.key)
            side = pair.greedy_side
            if side is None or self.balance_ratio <= 0:
                self._emit(pair, out)
            else:
                self._held[side].append(pair)
                self._drain(out)
        return out

    def finish(self) -> int:
        """Drop what is still held back (the majority side's excess); returns how many."""
        dropped = len(self._held[True]) + len(self._held[False])
        self._held[True].clear()
        self._held[False].clear()
        self.stats.dropped_balance += dropped
        return dropped

    def _count(self, side: bool) -> int:
        return self.stats.greedy_chosen if side else self.stats.greedy_rejected

    def _admits(self, side: bool) -> bool:
        return self._count(side) + 1 <= self.balance_ratio * self._count(not side) + 1

    def _drain(self, out: list[RolloutPair]) -> None:
        moved = True
        while moved:
            moved = False
            for side in (True, False):
                if self._held[side] and self._admits(side):
                    self._emit(self._held[side].popleft(), out)
                    moved = True

    def _emit(self, pair: RolloutPair, out: list[RolloutPair]) -> None:
        side = pair.greedy_side
        if side is True:
            self.stats.greedy_chosen += 1
        elif side is False:
            self.stats.greedy_rejected += 1
        self.stats.pairs_kept += 1
        out.append(pair)
