"""`script`: replays a fixed list of actions (JSON), one list for all questions or one per question id."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from evorag_core.env.actions import Action, Refuse, parse_action
from evorag_core.errors import ActionParseError
from evorag_core.env.state import AgentView
from evorag_core.types import Question

__all__ = ["ScriptPolicy", "load_script"]

Script = list[Action] | dict[str, list[Action]]


def load_script(source: str | Path | list | dict) -> Script:
    """A JSON list of actions, or an object mapping question ids to such lists."""
    raw: Any = source
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ActionParseError(f"script file not found: {path}") from None
        except json.JSONDecodeError as exc:
            raise ActionParseError(f"{path}: invalid JSON: {exc}") from None
    if isinstance(raw, list):
        return [_parse(a, i) for i, a in enumerate(raw)]
    if isinstance(raw, dict):
        return {qid: [_parse(a, i, qid) for i, a in enumerate(acts)] for qid, acts in raw.items()}
    raise ActionParseError("a script is a JSON list of actions or an object of lists keyed by question id")


def _parse(raw: Any, index: int, qid: str | None = None) -> Action:
    try:
        return parse_action(raw)
    except ActionParseError as exc:
        where = f"action {index}" + (f" of question {qid!r}" if qid else "")
        raise ActionParseError(f"{where}: {exc}") from None


class ScriptPolicy:
    """Plays the script; when it runs out before the episode ends, it REFUSEs (recorded as a fallback)."""

    name = "script"

    def __init__(self, script: Script):
        self.script = script
        self._queue: list[Action] = []

    def begin(self, question: Question) -> None:
        if isinstance(self.script, dict):
            self._queue = list(self.script.get(question.id, []))
        else:
            self._queue = list(self.script)

    def act(self, view: AgentView) -> tuple[Action, Mapping[str, Any]]:
        if self._queue:
            return self._queue.pop(0), {}
        return Refuse(), {"fallback": "script_exhausted"}
