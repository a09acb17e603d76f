"""The four agent actions as frozen dataclasses, with one parser for their JSON form."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Union

from evorag_core.errors import ActionParseError

__all__ = ["Search", "Backtrack", "Answer", "Refuse", "Action", "ACTION_NAMES", "parse_action", "action_to_dict"]


@dataclass(frozen=True)
class Search:
    query: str


@dataclass(frozen=True)
class Backtrack:
    pass


@dataclass(frozen=True)
class Answer:
    answer: str


@dataclass(frozen=True)
class Refuse:
    pass


Action = Union[Search, Backtrack, Answer, Refuse]
ACTION_NAMES: tuple[str, ...] = ("SEARCH", "BACKTRACK", "ANSWER", "REFUSE")


def action_name(action: Action) -> str:
    return {Search: "SEARCH", Backtrack: "BACKTRACK", Answer: "ANSWER", Refuse: "REFUSE"}[type(action)]


def parse_action(raw: Mapping[str, Any]) -> Action:
    """Build an action from `{"action": "SEARCH", "query": "..."}`-style JSON."""
    if not isinstance(raw, Mapping):
        raise ActionParseError(f"an action must be a JSON object, got {type(raw).__name__}")
    name = str(raw.get("action", "")).strip().upper()
    if name == "SEARCH":
        query = raw.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ActionParseError("SEARCH needs a non-empty 'query' string")
        return Search(query.strip())
    if name == "ANSWER":
        answer = raw.get("answer")
        if not isinstance(answer, str):
            raise ActionParseError("ANSWER needs an 'answer' string")
        return Answer(answer.strip())
    if name == "BACKTRACK":
        return Backtrack()
    if name == "REFUSE":
        return Refuse()
    raise ActionParseError(f"unknown action {raw.get('action')!r}; expected one of {', '.join(ACTION_NAMES)}")


def action_to_dict(action: Action) -> dict[str, str]:
    out = {"action": action_name(action)}
    if isinstance(action, Search):
        out["query"] = action.query
    elif isinstance(action, Answer):
        out["answer"] = action.answer
    return out
