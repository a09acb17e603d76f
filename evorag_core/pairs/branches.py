"""The values a sibling-branch rollout produces (pairs/rollout.py runs it, pairs/selection.py picks its pairs,
pairs/persist.py stores it): a `Branch` (one distinct candidate at a state, scored by its return-to-go G_t and the
per-signal parts G_t^(k), with the raw per-step signals and schedule positions they came from: its `trace` of
`BranchStep`s, so that pairs/rescore.py can score it again under another schedule), a `BranchState` (a visited state of the main trajectory with its K sampled siblings and
their branches), a `RolloutPair` (two branches of one state, higher return chosen) and an `EpisodeRollout` (the main
greedy episode, its branch states and their pairs).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from evorag_core.env.actions import Action, action_to_dict, parse_action
from evorag_core.env.episode import EpisodeRecord
from evorag_core.types import Question

__all__ = ["BranchStep", "Branch", "BranchState", "RolloutPair", "EpisodeRollout"]


@dataclass(frozen=True)
class BranchStep:
    """One step of a branch as the scheduler saw it: the raw signals r_u^(k) and the step's position in the schedule
    (t of T_max in `stage`). Weights are not kept: they are a function of these and of the schedule variant."""

    t: int
    t_max: int
    stage: str
    signals: Mapping[str, float]  # raw r_u^(k) by signal name

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "t_max": self.t_max, "stage": self.stage, "signals": dict(self.signals)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "BranchStep":
        return cls(int(raw["t"]), int(raw["t_max"]), str(raw["stage"]),
                   {k: float(v) for k, v in raw["signals"].items()})


@dataclass(frozen=True)
class Branch:
    """One distinct candidate at a state and the branch continued from it."""

    completion: str
    action: Action
    logprob: float | None
    greedy: bool  # the policy's greedy choice (its branch is the main trajectory's remainder)
    samples: int  # how many of the K sampled siblings produced this completion
    ret: float  # G_t: sum of the weighted step rewards from the branch point on
    signals: Mapping[str, float]  # G_t^(k) by signal name (weighted); they add up to `ret`
    steps: int  # steps in the branch, the candidate's own step included
    complete: bool  # ended by ANSWER / REFUSE / T_max, not cut by max_branch_steps
    outcome: str  # "answer: ...", "refuse", "truncated" (T_max) or "cut"
    observation: str = ""  # a SEARCH candidate: what it retrieved, as the next prompt shows it ("" otherwise)
    trace: tuple[BranchStep, ...] = ()  # the branch's steps (raw signals, positions); () in rollouts stored before

    def summary(self) -> dict[str, Any]:
        return {
            "completion": self.completion, "return": self.ret, "signals": dict(self.signals), "steps": self.steps,
            "complete": self.complete, "outcome": self.outcome, "greedy": self.greedy, "samples": self.samples,
            "logprob": self.logprob, "observation": self.observation, "action": action_to_dict(self.action),
            "trace": [s.to_dict() for s in self.trace],
        }

    @classmethod
    def from_summary(cls, raw: Mapping[str, Any]) -> "Branch":
        """The inverse of `summary()` (a stored episode's config["branches"] entries)."""
        return cls(
            completion=raw["completion"], action=parse_action(raw["action"]), logprob=raw.get("logprob"),
            greedy=bool(raw["greedy"]), samples=int(raw["samples"]), ret=float(raw["return"]),
            signals={k: float(v) for k, v in raw["signals"].items()}, steps=int(raw["steps"]),
            complete=bool(raw["complete"]), outcome=raw["outcome"], observation=raw.get("observation", ""),
            trace=tuple(BranchStep.from_dict(s) for s in raw.get("trace", ())),
        )


@dataclass(frozen=True)
class BranchState:
    """A visited state of the main trajectory with its sampled siblings and their branches."""

    t: int
    prompt: str
    sampled: tuple[tuple[Action, str, float], ...]  # the K raw samples: (action, completion, log-prob)
    branches: tuple[Branch, ...]  # distinct candidates; the greedy one first

    def branch(self, completion: str) -> Branch:
        return next(b for b in self.branches if b.completion == completion)


@dataclass(frozen=True)
class RolloutPair:
    prompt: str
    chosen: Branch
    rejected: Branch
    t: int
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)  # what goes to the store's metadata

    @property
    def margin(self) -> float:
        return self.chosen.ret - self.rejected.ret

    @property
    def key(self) -> str:
        """Identity for duplicate detection: the prompt and the unordered pair of completions."""
        a, b = sorted((self.chosen.completion, self.rejected.completion))
        return hashlib.sha1("\0".join((self.prompt, a, b)).encode()).hexdigest()

    @property
    def greedy_side(self) -> bool | None:
        """True: the chosen side is the greedy action; False: the rejected side is; None: neither."""
        if self.chosen.greedy:
            return True
        if self.rejected.greedy:
            return False
        return None


@dataclass(frozen=True)
class EpisodeRollout:
    question: Question
    record: EpisodeRecord  # the main (greedy) trajectory
    states: tuple[BranchState, ...]
    pairs: tuple[RolloutPair, ...]  # comparable pairs over the margin, before dedup and balance
    decisions: int  # policy decisions made (greedy + sampled + branch continuations)
