"""An episode record as the store writes it: its steps as `Step` rows (`store_steps`, one step: `store_step`), its
graded end as an `Outcome` (`episode_outcome`, the grade: `episode_grade`) and its end as a `Finish`
(`episode_finish`: return, status, outcome). One home for every writer of episodes:
the studio's live episode, rollouts (pairs/persist.py) and evaluation traces (evaluation/traces.py).

A step row keeps the action's name and argument (SEARCH's query, ANSWER's answer), the passages, the seven signals,
the weights, R_t, the judge's verdict by name ("answerable" / "unanswerable"), who acted (`info["actor"]`, "policy"
unless a person did, `info["annotator"]`) and the sibling candidates sampled at the step's state.
The store is imported inside the functions: reading the environment does not load SQLAlchemy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from evorag_core.env.actions import Action, action_to_dict
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.metrics import Grade, grade
from evorag_core.types import Question

if TYPE_CHECKING:
    from evorag_core.store import Finish, Outcome, Sibling, Step

__all__ = ["verdict_name", "action_argument", "store_step", "store_steps", "episode_grade", "episode_outcome",
           "episode_finish"]


def verdict_name(answerable: bool) -> str:
    """How the store names a sufficiency verdict: "answerable" or "unanswerable"."""
    return "answerable" if answerable else "unanswerable"


def action_argument(action: Action) -> str | None:
    """SEARCH's query or ANSWER's answer; None for BACKTRACK and REFUSE."""
    act = action_to_dict(action)
    return act.get("query") or act.get("answer")


def store_step(step: StepRecord, siblings: Sequence[Sibling] = ()) -> Step:
    """`step` as a store row, with the sibling candidates sampled at its state."""
    from evorag_core.store import Step

    return Step(
        t=step.t, action=action_to_dict(step.action)["action"], argument=action_argument(step.action),
        passages=tuple(step.passages), signals=dict(step.signals), weights=dict(step.weights), reward=step.reward,
        judge_verdict=verdict_name(step.verdict.answerable) if step.verdict is not None else None,
        siblings=tuple(siblings), actor=str(step.info.get("actor", "policy")), annotator=step.info.get("annotator"),
    )


def store_steps(record: EpisodeRecord, siblings: Mapping[int, Sequence[Sibling]] | None = None) -> list[Step]:
    """Every step of `record` as a store row; `siblings[t]`: the candidates sampled before step t, if any."""
    siblings = siblings or {}
    return [store_step(s, siblings.get(s.t, ())) for s in record.steps]


def episode_grade(question: Question | None, record: EpisodeRecord) -> Grade | None:
    """`metrics.grade` of a finished episode: against `question`'s answers, a refusal right on an unanswerable one;
    without a question, against the record's gold answers as answerable (what rollouts store). None while it runs
    or without gold."""
    if not record.done:
        return None
    if question is None:
        return grade(record.answer, record.refused, record.gold_answers)
    return grade(record.answer, record.refused, question.answers, answerable=not question.unanswerable)


def episode_outcome(record: EpisodeRecord, question: Question | None = None) -> Outcome:
    """The store's outcome columns of a finished episode: the answer, EM and F1 (None without gold), refused."""
    from evorag_core.store import Outcome

    graded = episode_grade(question, record)
    return Outcome(record.answer, graded.em if graded else None, graded.f1 if graded else None, record.refused)


def episode_finish(record: EpisodeRecord, question: Question | None = None) -> Finish:
    """The store's end of a finished episode: its return, status ("truncated" when it ran out of steps, else
    "finished") and `episode_outcome`."""
    from evorag_core.store import Finish

    return Finish(record.total_return, "truncated" if record.truncated else "finished",
                  episode_outcome(record, question))
