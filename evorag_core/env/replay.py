"""The states an episode went through, rebuilt from its record: what the agent saw before each step (`AgentView`),
as the environment built it (a SEARCH adds a hop with the passages it retrieved, a BACKTRACK drops the last hop and
its query joins the dropped ones). Used to score a finished episode's chosen actions again, under another model."""
from __future__ import annotations

from typing import Callable

from evorag_core.env.actions import Backtrack, Search
from evorag_core.env.episode import EpisodeRecord
from evorag_core.env.state import AgentView, Hop
from evorag_core.types import Passage

__all__ = ["step_views"]


def step_views(record: EpisodeRecord, passage: Callable[[str], Passage]) -> list[AgentView]:
    """The view before each step of `record`, in step order; `passage(pid)` looks a retrieved passage up (KeyError
    for one the corpus does not hold)."""
    chain: list[Hop] = []
    history: list[str] = []
    views = []
    for step in record.steps:
        dropped = list(history)
        for hop in chain:  # the history minus the active chain = the backtracked queries
            dropped.remove(hop.query)
        views.append(AgentView(record.question, tuple(chain), tuple(dropped), step.t, record.t_max))
        if isinstance(step.action, Search):
            chain.append(Hop(step.action.query, tuple(passage(pid) for pid in step.passages)))
            history.append(step.action.query)
        elif isinstance(step.action, Backtrack) and chain:
            chain.pop()
    return views
