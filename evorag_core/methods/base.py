"""What every method returns per question, and the loop that runs an episode policy in the environment."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from evorag_core.env.actions import Action, action_to_dict
from evorag_core.env.env import RagEnv
from evorag_core.env.episode import EpisodeRecord
from evorag_core.metrics import grade, support_recall
from evorag_core.env.state import AgentView
from evorag_core.types import Question

__all__ = ["EpisodePolicy", "EpisodeMethod", "MethodOptions", "QuestionResult", "run_episode", "result_from_episode"]


@dataclass(frozen=True)
class MethodOptions:
    """What a user chooses beside the settings: the LoRA adapter for LM methods (store name or folder), the script
    method's actions file, and the agent's preference model for best-of-K (`policy.siblings` candidates)."""

    adapter: str | None = None
    script: Path | None = None
    rank_with_rm: Path | None = None


class EpisodePolicy(Protocol):
    """Chooses the next action from what the agent may see. `begin` is called once per question."""

    name: str

    def begin(self, question: Question) -> None: ...

    def act(self, view: AgentView) -> tuple[Action, Mapping[str, Any]]: ...


@dataclass(frozen=True)
class QuestionResult:
    """One evaluated question (one JSON line of an eval results file)."""

    question_id: str
    dataset: str
    question: str
    prediction: str | None  # None: refused or no answer
    gold: tuple[str, ...]
    em: float
    f1: float
    steps: int
    passages: tuple[str, ...]  # pids retrieved, in order of first retrieval
    support_recall: float | None
    refused: bool
    trace: tuple[Mapping[str, Any], ...] = ()  # actions (with arguments)
    total_return: float | None = None  # weighted return, for environment episodes
    format_valid: bool = True
    fallback: int = 0  # number of policy fallbacks used
    seconds: float = 0.0
    extras: Mapping[str, Any] = field(default_factory=dict)
    unanswerable: bool | None = None  # the question is marked unanswerable (set by evaluation.runner.evaluate)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["gold"] = list(self.gold)
        out["passages"] = list(self.passages)
        out["trace"] = [dict(t) for t in self.trace]
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "QuestionResult":
        data = dict(raw)
        data["gold"] = tuple(data["gold"])
        data["passages"] = tuple(data["passages"])
        data["trace"] = tuple(data.get("trace", ()))
        return cls(**data)


def score(question: Question, prediction: str | None) -> tuple[float, float]:
    """(EM, F1) of a method's prediction as `metrics.grade` grades an answer (0, 0 without one, or without gold)."""
    graded = grade(prediction, prediction is None, question.answers)
    return (graded.em, graded.f1) if graded is not None else (0.0, 0.0)


def result_from_episode(question: Question, record: EpisodeRecord, seconds: float) -> QuestionResult:
    em, f1 = score(question, record.answer)
    fallbacks = sum(1 for s in record.steps if s.info.get("fallback"))
    return QuestionResult(
        question_id=question.id,
        dataset=question.dataset,
        question=question.question,
        prediction=record.answer,
        gold=question.answers,
        em=em,
        f1=f1,
        steps=len(record.steps),
        passages=record.retrieved,
        support_recall=support_recall(record.retrieved, record.gold_pids),
        refused=record.refused,
        trace=tuple({"t": s.t, **action_to_dict(s.action)} for s in record.steps),
        total_return=record.total_return,
        fallback=fallbacks,
        seconds=seconds,
        extras={"episode": record.to_dict()},
    )


def run_episode(env: RagEnv, policy: EpisodePolicy, question: Question, **reset_kwargs: Any) -> EpisodeRecord:
    """reset -> act/step until ANSWER, REFUSE or T_max. A policy with `attach_env(env)` gets the environment first
    (read-only use: e.g. best-of-K ranking previews what each SEARCH candidate would retrieve)."""
    policy.begin(question)
    if hasattr(policy, "attach_env"):
        policy.attach_env(env)
    obs = env.reset(question, **reset_kwargs)
    while not env.done:
        action, info = policy.act(obs.view)
        obs = env.step(action, info=info).observation
    return env.record


class EpisodeMethod:
    """Adapts an episode policy to the per-question method interface used by the evaluator.

    `make_env(question)` builds the environment for a question (its corpus and retriever)."""

    def __init__(self, policy: EpisodePolicy, make_env: Callable[[Question], RagEnv], label: str | None = None):
        self.policy = policy
        self.make_env = make_env
        self.name = policy.name
        self.label = label or getattr(policy, "label", policy.name)

    def run_question(self, question: Question) -> QuestionResult:
        start = time.perf_counter()
        record = run_episode(self.make_env(question), self.policy, question)
        return result_from_episode(question, record, time.perf_counter() - start)

