"""Episode records: what happened at each step, serializable to JSON and back without loss."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from evorag_core.env.actions import Action, Answer, Refuse, action_to_dict, parse_action
from evorag_core.env.judges import Verdict
from evorag_core.env.scheduler import step_reward
from evorag_core.env.signals import refusal_value

__all__ = ["StepRecord", "EpisodeRecord", "apply_override", "decision_notes", "step_info"]


@dataclass(frozen=True)
class StepRecord:
    t: int
    action: Action
    passages: tuple[str, ...]  # pids retrieved by this step (SEARCH), else ()
    signals: Mapping[str, float]
    weights: Mapping[str, float]
    reward: float
    verdict: Verdict | None = None  # sufficiency verdict used by `ref` (REFUSE steps)
    info: Mapping[str, Any] = field(default_factory=dict)  # e.g. policy log-probs, fallback reason, answer_source

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": self.t, **action_to_dict(self.action)}
        out.update(
            passages=list(self.passages),
            signals=dict(self.signals),
            weights=dict(self.weights),
            reward=self.reward,
            verdict=asdict(self.verdict) if self.verdict else None,
            info=dict(self.info),
        )
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "StepRecord":
        verdict = raw.get("verdict")
        return cls(
            t=int(raw["t"]),
            action=parse_action(raw),
            passages=tuple(raw.get("passages", ())),
            signals={k: float(v) for k, v in raw["signals"].items()},
            weights={k: float(v) for k, v in raw["weights"].items()},
            reward=float(raw["reward"]),
            verdict=Verdict(**verdict) if verdict else None,
            info=dict(raw.get("info", {})),
        )


@dataclass(frozen=True)
class EpisodeRecord:
    episode_id: str
    question_id: str
    dataset: str
    question: str
    stage: str
    schedule: str
    preset: str
    t_max: int
    top_k: int
    steps: tuple[StepRecord, ...] = ()
    gold_pids: tuple[str, ...] = ()
    gold_answers: tuple[str, ...] = ()
    truncated: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)  # policy / adapter name etc.

    @property
    def total_return(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def terminated(self) -> bool:
        return bool(self.steps) and isinstance(self.steps[-1].action, (Answer, Refuse))

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def answer(self) -> str | None:
        """The final answer; None when the agent refused or ran out of steps."""
        if self.steps and isinstance(self.steps[-1].action, Answer):
            return self.steps[-1].action.answer
        return None

    @property
    def refused(self) -> bool:
        return bool(self.steps) and isinstance(self.steps[-1].action, Refuse)

    @property
    def retrieved(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for s in self.steps:
            for pid in s.passages:
                seen.setdefault(pid, None)
        return tuple(seen)

    def to_dict(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "question_id": self.question_id,
            "dataset": self.dataset,
            "question": self.question,
            "stage": self.stage,
            "schedule": self.schedule,
            "preset": self.preset,
            "t_max": self.t_max,
            "top_k": self.top_k,
            "steps": [s.to_dict() for s in self.steps],
            "gold_pids": list(self.gold_pids),
            "gold_answers": list(self.gold_answers),
            "truncated": self.truncated,
            "meta": dict(self.meta),
            "answer": self.answer,
            "return": self.total_return,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "EpisodeRecord":
        return cls(
            episode_id=raw["episode_id"],
            question_id=raw["question_id"],
            dataset=raw["dataset"],
            question=raw["question"],
            stage=raw["stage"],
            schedule=raw["schedule"],
            preset=raw["preset"],
            t_max=int(raw["t_max"]),
            top_k=int(raw["top_k"]),
            steps=tuple(StepRecord.from_dict(s) for s in raw["steps"]),
            gold_pids=tuple(raw.get("gold_pids", ())),
            gold_answers=tuple(raw.get("gold_answers", ())),
            truncated=bool(raw.get("truncated", False)),
            meta=dict(raw.get("meta", {})),
        )

    @classmethod
    def from_json(cls, text: str) -> "EpisodeRecord":
        return cls.from_dict(json.loads(text))


def apply_override(record: EpisodeRecord, t: int, verdict: Verdict) -> EpisodeRecord:
    """Recompute step t's refusal signal and reward under a new verdict (e.g. a human override).

    Only REFUSE steps carry a refusal signal; other steps just store the verdict.
    """
    steps = list(record.steps)
    idx = next((i for i, s in enumerate(steps) if s.t == t), None)
    if idx is None:
        raise ValueError(f"episode {record.episode_id} has no step t={t}")
    step = steps[idx]
    signals = dict(step.signals)
    if isinstance(step.action, Refuse):
        signals["ref"] = refusal_value(verdict.answerable)
    steps[idx] = replace(step, signals=signals, reward=step_reward(signals, step.weights), verdict=verdict)
    return replace(record, steps=tuple(steps))


def decision_notes(decision: Any) -> dict[str, Any]:
    """The optional parts of a decision that a step records in its info, those it has: the fallback used, ARENA's
    cited reply (the answer view), the span answer's source passage (the studio marks it) and the span the reader
    withheld below `answer.min_confidence`, the hop planner's verdict. A decision of another policy type (no such
    attributes) gives {}."""
    notes: dict[str, Any] = {}
    if getattr(decision, "fallback", None):
        notes["fallback"] = decision.fallback
    if getattr(decision, "arena", None) is not None:
        notes["arena"] = decision.arena
    if getattr(decision, "answer_source", None):
        notes["answer_source"] = decision.answer_source
    if getattr(decision, "withheld", None):
        notes["withheld"] = decision.withheld
    if getattr(decision, "plan", None):
        notes["plan"] = decision.plan
    return notes


def step_info(decision: Any = None, **extra: Any) -> dict[str, Any]:
    """What a step records in its `info`, built in one place for every policy and the studio: for a policy's
    decision (a `policy.agent.PolicyDecision` or any object with `logprob` and `completion`) its log-probability
    (a float, None when it has none), its completion text and its `decision_notes`; then `extra` (e.g. the adapter,
    or for a person's step actor="human", annotator, proposal). E.g. a decision with logprob -1 and completion
    "REFUSE" and no notes, extra adapter="r3": {"logprob": -1.0, "completion": "REFUSE", "adapter": "r3"}."""
    info: dict[str, Any] = {}
    if decision is not None:
        logprob = getattr(decision, "logprob", None)
        info = {"logprob": None if logprob is None else float(logprob),
                "completion": getattr(decision, "completion", None), **decision_notes(decision)}
    info.update(extra)
    return info
