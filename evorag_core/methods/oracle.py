"""`oracle`: searches each gold passage's title, then answers with the gold answer.

It reads gold data, so it is an UPPER BOUND and an environment check, never a method to compare against.
Questions without gold support get REFUSE (the right behaviour when the corpus cannot answer).
"""
from __future__ import annotations

from typing import Any, Mapping

from evorag_core.env.actions import Action, Answer, Refuse, Search
from evorag_core.env.state import AgentView
from evorag_core.types import Question

__all__ = ["OraclePolicy", "ORACLE_LABEL"]

ORACLE_LABEL = "oracle (upper bound: reads gold passages and answers)"


class OraclePolicy:
    name = "oracle"
    label = ORACLE_LABEL

    def __init__(self) -> None:
        self._plan: list[Action] = []

    def begin(self, question: Question) -> None:
        titles = [p.title for p in question.passages if p.pid in question.gold_pids]
        if titles and question.answers:
            self._plan = [Search(t) for t in dict.fromkeys(titles)] + [Answer(question.answers[0])]
        else:
            self._plan = [Refuse()]

    def act(self, view: AgentView) -> tuple[Action, Mapping[str, Any]]:
        return (self._plan.pop(0) if self._plan else Refuse()), {"oracle": True}
