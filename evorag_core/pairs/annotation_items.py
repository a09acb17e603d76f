"""Items of the annotation queue: their payload, reading them from JSON lines, and making them from rollouts.

A preference item (kind "preference") is an agent state with K candidate actions:

    {"kind": "preference", "question": "...", "prompt": "<the exact text the policy saw; pairs train on it>",
     "candidates": [{"completion": "SEARCH: ...", "preview": "Found: [3] ...", "branch_return": 0.4}, ...],
     "chain": [{"t": 1, "action": "SEARCH", "argument": "...", "passages": [{"pid": ..., "title": ..., "text": ...}]}],
     "t": 2, "stage": "discovery", "question_id": "...", "dataset": "...", "episode_db_id": 12}

`candidates` holds 2 to 9 of them (the keys 1-9 pick them) with distinct completions; `preview` (what a SEARCH would
retrieve, as the preference model reads it), `branch_return` (when scored) and everything after `candidates` are
optional. A refusal item (kind "refusal") is an evidence set to judge answerable or unanswerable:

    {"kind": "refusal", "question": "...", "passages": [{"title": ..., "text": ...}, ...],
     "episode_db_id": 12, "t": 4}

With `episode_db_id` and `t` (both or neither), its label is stored as a human override of that step's verdict:
`import_items` refuses an item whose step is not in the store.
`read_items` validates every line before anything is queued: a malformed line raises DatasetFormatError naming the
file, the line and the field, and nothing is imported (lines are limited as `evorag pairs import` limits them:
evorag_core/pairs/io.py, MAX_LINE_BYTES and MAX_DEPTH; `stage` is a curriculum stage, `branch_return` finite).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evorag_core.errors import DatasetFormatError
from evorag_core.pairs.io import check_number, check_stage, json_lines
from evorag_core.store.records import NewAnnotationItem

if TYPE_CHECKING:
    from evorag_core.store import Episode, Store
    from evorag_core.types import Passage

__all__ = ["MAX_CANDIDATES", "item_from_record", "read_items", "import_items", "rollout_items"]

MAX_CANDIDATES = 9  # the keys 1-9
_OPTIONAL_TEXT = ("question_id", "dataset")


def _fail(path: str, line: int, field: str | None, problem: str) -> DatasetFormatError:
    return DatasetFormatError(path, f"line {line}", field, problem)


def _passages(raw: Any, path: str, line: int, field: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise _fail(path, line, field, "must be a list of passages {title, text}")
    for i, p in enumerate(raw):
        if not isinstance(p, Mapping) or not isinstance(p.get("text"), str) or not isinstance(p.get("title", ""), str):
            raise _fail(path, line, f"{field}[{i}]", "must be an object with a string text (and title)")
    return [dict(p) for p in raw]


def _candidates(raw: Any, path: str, line: int) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not 2 <= len(raw) <= MAX_CANDIDATES:
        raise _fail(path, line, "candidates", f"must be a list of 2 to {MAX_CANDIDATES} candidates")
    for i, c in enumerate(raw):
        where = f"candidates[{i}]"
        if not isinstance(c, Mapping) or not isinstance(c.get("completion"), str) or not c["completion"].strip():
            raise _fail(path, line, where, "needs a non-empty completion, e.g. \"SEARCH: Mirrow\"")
        check_number(c.get("branch_return"), path, line, f"{where}.branch_return")
        if not isinstance(c.get("preview", ""), str):
            raise _fail(path, line, f"{where}.preview", "must be a string")
    if len({c["completion"] for c in raw}) != len(raw):
        raise _fail(path, line, "candidates", "two candidates have the same completion")
    return [dict(c) for c in raw]


def item_from_record(raw: Any, path: str = "<items>", line: int = 1) -> NewAnnotationItem:
    """A queue item from one JSON line (see the module docstring); DatasetFormatError naming what is wrong."""
    if not isinstance(raw, Mapping):
        raise _fail(path, line, None, f"expected a JSON object, got {type(raw).__name__}")
    kind = raw.get("kind", "preference")
    if kind not in ("preference", "refusal"):
        raise _fail(path, line, "kind", f"must be preference or refusal, got {kind!r}")
    if not isinstance(raw.get("question"), str) or not raw["question"].strip():
        raise _fail(path, line, "question", "is missing or empty")
    for name in _OPTIONAL_TEXT:
        if raw.get(name) is not None and not isinstance(raw[name], str):
            raise _fail(path, line, name, "must be a string or null")
    check_stage(raw.get("stage"), path, line)
    for name in ("t", "episode_db_id"):
        value = raw.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise _fail(path, line, name, "must be a non-negative integer or null")
    payload = dict(raw)
    payload.pop("kind", None)
    if kind == "refusal":
        if (raw.get("episode_db_id") is None) != (raw.get("t") is None):
            raise _fail(path, line, "t" if raw.get("t") is None else "episode_db_id",
                        "episode_db_id and t go together: the stored step whose verdict the label overrides")
        payload["passages"] = _passages(raw.get("passages"), path, line, "passages")
        return NewAnnotationItem("refusal", payload, "import")
    if not isinstance(raw.get("prompt"), str) or not raw["prompt"].strip():
        raise _fail(path, line, "prompt", "is missing: the text the policy saw at this state (pairs train on it)")
    payload["candidates"] = _candidates(raw.get("candidates"), path, line)
    chain = raw.get("chain", [])
    if not isinstance(chain, list) or not all(isinstance(s, Mapping) for s in chain):
        raise _fail(path, line, "chain", "must be a list of steps {action, argument, passages}")
    payload["chain"] = [{**s, "passages": _passages(s.get("passages", []), path, line, f"chain[{i}].passages")}
                        for i, s in enumerate(chain)]
    return NewAnnotationItem("preference", payload, "import")


def read_items(path: Path | str) -> list[NewAnnotationItem]:
    """Every line of a JSON-lines file as an item; the first malformed line raises DatasetFormatError."""
    return [item for _, item in _numbered_items(path)]


def import_items(store: Store, path: Path | str) -> list[int]:
    """Queue every item of the file in one transaction (all or nothing); returns the new ids. A refusal item whose
    episode_db_id and t name no stored step is refused (DatasetFormatError naming the line): its label would
    override nothing."""
    numbered = _numbered_items(path)
    steps: dict[int, set[int] | None] = {}  # episode id -> its steps' t (None: no such episode)
    for number, item in numbered:
        if item.kind == "refusal" and item.payload.get("episode_db_id") is not None:
            _check_step(store, steps, item.payload, str(path), number)
    return store.add_annotation_items([item for _, item in numbered])


def _numbered_items(path: Path | str) -> list[tuple[int, NewAnnotationItem]]:
    out = [(number, item_from_record(raw, str(path), number)) for number, raw in json_lines(path)]
    if not out:
        raise DatasetFormatError(str(path), None, None, "no items in the file")
    return out


def _check_step(store: Store, steps: dict[int, set[int] | None], payload: Mapping[str, Any], path: str,
                line: int) -> None:
    episode_id, t = int(payload["episode_db_id"]), int(payload["t"])
    if episode_id not in steps:
        try:
            steps[episode_id] = {s.t for s in store.get_episode(episode_id).steps}
        except KeyError:
            steps[episode_id] = None
    found = steps[episode_id]
    if found is None:
        raise _fail(path, line, "episode_db_id", f"no stored episode {episode_id} (leave episode_db_id and t out to "
                                                 "label the evidence alone)")
    if t not in found:
        raise _fail(path, line, "t", f"episode {episode_id} has no step t={t}")


def _passage_dicts(pids: Any, passages: Mapping[str, Passage]) -> list[dict[str, Any]]:
    out = []
    for p in pids or ():
        if isinstance(p, Mapping):
            out.append(dict(p))
        elif str(p) in passages:
            found = passages[str(p)]
            out.append({"pid": found.pid, "title": found.title, "text": found.text})
        else:
            out.append({"pid": str(p), "title": str(p), "text": "(passage text not in the given data file)"})
    return out


def _rollout_prompts(store: Store) -> dict[tuple[int, int], str]:
    """(episode id, t) -> the prompt a stored rollout pair was made after (rollouts stored before their prompts were
    kept in the episode)."""
    found: dict[tuple[int, int], str] = {}
    for pair in store.list_pairs(source="rollout", limit=None):
        ep, t = pair.metadata.get("episode_db_id"), pair.metadata.get("t")
        if ep is not None and t is not None:
            found.setdefault((int(ep), int(t)), pair.prompt)
    return found


def _episode_items(ep: Episode, passages: Mapping[str, Passage], prompts: Mapping[tuple[int, int], str]
                   ) -> list[NewAnnotationItem]:
    steps = ep.steps or ()
    branches = ep.config.get("branches") or {}
    kept = ep.config.get("prompts") or {}
    context = {"question": ep.question, "question_id": ep.question_id, "dataset": ep.dataset, "stage": ep.stage,
               "episode_db_id": ep.id}
    out = []
    for step in steps:
        chain = [{"t": s.t, "action": s.action, "argument": s.argument, "passages": _passage_dicts(s.passages, passages)}
                 for s in steps if s.t < step.t]
        found = [b for b in branches.get(str(step.t), []) if b.get("completion")][:MAX_CANDIDATES]
        prompt = kept.get(str(step.t)) or prompts.get((ep.id, step.t))
        if len(found) >= 2 and prompt:
            cands = [{"completion": b["completion"], "preview": b.get("observation") or "",
                      "branch_return": b.get("return"), "outcome": b.get("outcome")} for b in found]
            out.append(NewAnnotationItem("preference", {**context, "prompt": prompt, "t": step.t, "chain": chain,
                                                        "candidates": cands}, "rollout", f"rollout:{ep.id}:{step.t}"))
        if step.judge_verdict is not None:
            seen = [p for s in steps if s.t <= step.t for p in _passage_dicts(s.passages, passages)]
            unique = list({p.get("pid") or p["text"]: p for p in seen}.values())
            out.append(NewAnnotationItem("refusal", {**context, "t": step.t, "passages": unique,
                                                     "judge_verdict": step.judge_verdict},
                                         "rollout", f"rollout-refusal:{ep.id}:{step.t}"))
    return out


def rollout_items(store: Store, passages: Mapping[str, Passage], *, run: str | None = None, limit: int = 1000
                  ) -> list[NewAnnotationItem]:
    """Items from the stored rollouts (`evorag rollout`): a preference item for each state with 2 or more distinct
    sibling candidates (their branch returns and SEARCH previews as the rollout stored them), a refusal item for each
    judged step (the evidence gathered up to it). `passages` (pid -> Passage, from the data file) fills in the
    chain's passage texts. Keys name episode and step, so running it again adds only new states."""
    prompts = _rollout_prompts(store)
    out: list[NewAnnotationItem] = []
    for listed in store.list_episodes(limit=limit):
        if listed.source != "rollout" or (run is not None and listed.run != run):
            continue
        out.extend(_episode_items(store.get_episode(listed.id), passages, prompts))
    return out
