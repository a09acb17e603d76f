"""Preference pairs as JSON lines in TRL's conversational DPO format, plus our metadata columns.

One line per pair:

    {"prompt": [{"role": "system", "content": ...}, {"role": "user", ...}, {"role": "assistant", ...}, ...],
     "chosen": [{"role": "assistant", "content": "SEARCH: ..."}],
     "rejected": [{"role": "assistant", "content": "ANSWER: ..."}],
     "id": 12, "source": "rollout", "stage": "discovery", "margin": 0.42, "annotator": null, "status": "queued",
     "round_id": null, "created_at": "2025-...", "signals_chosen": {...}, "signals_rejected": {...},
     "metadata": {...}}

`prompt` is the ChatML text of the agent prompt split into its turns (the policy's chat template writes
`<|im_start|>role\\ncontent<|im_end|>\\n` per turn and ends with `<|im_start|>assistant\\n`); importing joins them back
the same way, so a ChatML prompt survives export -> import unchanged. A prompt that is not ChatML (a base model
without a chat template) is exported as a single user message holding the raw text and flagged with
`"prompt_format": "raw"`; importing such a line restores the raw text. TRL reads `prompt`/`chosen`/`rejected` and
ignores the other columns.

Import validates every line before writing anything and then inserts all pairs in one transaction: a malformed
line raises `DatasetFormatError` naming the file, the line and the field, and nothing is imported. A line longer than
MAX_LINE_BYTES or nested deeper than MAX_DEPTH is malformed (it is refused before it is read whole, or decoded
further); `stage` is one of the curriculum's stages or null and `margin` a finite number or null.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from evorag_core.env.scheduler import STAGES
from evorag_core.errors import DatasetFormatError

if TYPE_CHECKING:
    from evorag_core.store import NewPair, Store

__all__ = ["MAX_LINE_BYTES", "MAX_DEPTH", "json_lines", "check_stage", "check_number", "pair_record",
           "new_pair_record", "new_pair_from_record", "write_pairs", "read_pairs", "export_pairs", "import_pairs",
           "split_chatml", "join_chatml"]

MAX_LINE_BYTES = 1 << 20  # 1 MiB: a pair's prompt or an item's chain of passages is ~10-100 kB
MAX_DEPTH = 32  # nesting of objects and lists in one line (a record needs ~6)
_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>\n", re.DOTALL)
_OPENER = "<|im_start|>assistant\n"
_ROLES = ("system", "user", "assistant")


def split_chatml(prompt: str) -> list[dict[str, str]] | None:
    """The turns of a ChatML prompt ending with the assistant opener; None if it is not exactly that."""
    if not prompt.endswith(_OPENER):
        return None
    body, pos, turns = prompt[: -len(_OPENER)], 0, []
    for match in _TURN.finditer(body):
        if match.start() != pos:
            return None
        turns.append({"role": match.group(1), "content": match.group(2)})
        pos = match.end()
    return turns if turns and pos == len(body) else None


def join_chatml(turns: Iterable[Mapping[str, str]]) -> str:
    return "".join(f"<|im_start|>{t['role']}\n{t['content']}<|im_end|>\n" for t in turns) + _OPENER


def _record(prompt: str, chosen: str, rejected: str, meta: dict[str, Any], **columns: Any) -> dict[str, Any]:
    turns = split_chatml(prompt)
    record: dict[str, Any] = {
        "prompt": turns if turns is not None else [{"role": "user", "content": prompt}],
        "chosen": [{"role": "assistant", "content": chosen}],
        "rejected": [{"role": "assistant", "content": rejected}],
        **columns,
        "signals_chosen": meta.get("signals_chosen"),
        "signals_rejected": meta.get("signals_rejected"),
        "metadata": meta,
    }
    if turns is None:
        record["prompt_format"] = "raw"
    return record


def pair_record(pair) -> dict[str, Any]:
    """One export line for a store `Pair`."""
    return _record(
        pair.prompt, pair.chosen, pair.rejected, dict(pair.metadata or {}), id=pair.id, source=pair.source,
        stage=pair.stage, margin=pair.margin, annotator=pair.annotator, status=pair.status, round_id=pair.round_id,
        created_at=pair.created_at.isoformat() if pair.created_at else None,
    )


def new_pair_record(pair: NewPair) -> dict[str, Any]:
    """One export line for a pair not in the store (the annotation queue's, evorag_core/pairs/annotation_export.py):
    the same columns without id, status, round and date; `evorag pairs import` reads it."""
    return _record(pair.prompt, pair.chosen, pair.rejected, dict(pair.metadata), source=pair.source,
                   stage=pair.stage, margin=pair.margin, annotator=pair.annotator)


def check_stage(stage: Any, path: str, line: int) -> None:
    """DatasetFormatError unless `stage` is one of the curriculum's STAGES or None."""
    if stage is not None and stage not in STAGES:
        raise DatasetFormatError(path, f"line {line}", "stage", f"must be one of {', '.join(STAGES)} or null, "
                                                              f"got {str(stage)[:40]!r}")


def check_number(value: Any, path: str, line: int, field: str) -> float | None:
    """`value` as a float if it is a finite number, None if it is None, else DatasetFormatError (JSON lines may
    hold NaN and Infinity, which Python's json reads)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DatasetFormatError(path, f"line {line}", field, f"must be a finite number or null, got {value!r}")
    return float(value)


def _messages(raw: Any, path: str, line: int, field: str, *, roles: tuple[str, ...]) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise DatasetFormatError(path, f"line {line}", field, "must be a non-empty list of chat messages")
    for i, m in enumerate(raw):
        if not isinstance(m, Mapping) or set(m) != {"role", "content"}:
            raise DatasetFormatError(path, f"line {line}", f"{field}[{i}]", "must be {\"role\": ..., \"content\": ...}")
        if m["role"] not in roles or not isinstance(m["content"], str):
            raise DatasetFormatError(
                path, f"line {line}", f"{field}[{i}]", f"role must be one of {', '.join(roles)} and content a string"
            )
    return [dict(m) for m in raw]


def new_pair_from_record(raw: Any, path: str = "<pairs>", line: int = 1) -> NewPair:
    """A store `NewPair` from one export line (its id and status are not imported: the pair is queued anew)."""
    from evorag_core.store import PAIR_SOURCES, NewPair

    if not isinstance(raw, Mapping):
        raise DatasetFormatError(path, f"line {line}", None, f"expected a JSON object, got {type(raw).__name__}")
    for name in ("prompt", "chosen", "rejected"):
        if name not in raw:
            raise DatasetFormatError(path, f"line {line}", name, "is missing")
    turns = _messages(raw["prompt"], path, line, "prompt", roles=_ROLES)
    if raw.get("prompt_format", "chatml") == "raw":
        if len(turns) != 1:
            raise DatasetFormatError(path, f"line {line}", "prompt", "a raw prompt is a single message")
        prompt = turns[0]["content"]
    else:
        prompt = join_chatml(turns)
    texts = {}
    for name in ("chosen", "rejected"):
        msgs = _messages(raw[name], path, line, name, roles=("assistant",))
        texts[name] = msgs[-1]["content"]
        if not texts[name].strip():
            raise DatasetFormatError(path, f"line {line}", name, "the completion is empty")
    if texts["chosen"] == texts["rejected"]:
        raise DatasetFormatError(path, f"line {line}", "rejected", "chosen and rejected completions are identical")
    source = raw.get("source", "rollout")
    if source not in PAIR_SOURCES:
        raise DatasetFormatError(path, f"line {line}", "source", f"must be one of {', '.join(PAIR_SOURCES)}")
    margin = check_number(raw.get("margin"), path, line, "margin")
    check_stage(raw.get("stage"), path, line)
    if raw.get("annotator") is not None and not isinstance(raw["annotator"], str):
        raise DatasetFormatError(path, f"line {line}", "annotator", "must be a string or null")
    meta = raw.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise DatasetFormatError(path, f"line {line}", "metadata", "must be a JSON object")
    meta = dict(meta)
    for name in ("signals_chosen", "signals_rejected"):  # the top-level columns win over stale metadata copies
        if raw.get(name) is not None:
            meta[name] = raw[name]
    if raw.get("id") is not None:
        meta.setdefault("imported_from_id", raw["id"])
    return NewPair(prompt, texts["chosen"], texts["rejected"], source, raw.get("annotator"), margin,
                   raw.get("stage"), meta)


def write_pairs(pairs: Iterable, path: Path | str) -> int:
    """Write store `Pair`s as JSON lines (atomically: a temporary file renamed into place); returns how many."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for pair in pairs:
            fh.write(json.dumps(pair_record(pair), ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n


def json_lines(path: Path | str) -> list[tuple[int, Any]]:
    """(line number, decoded value) of every non-blank line of a JSON-lines file; an unreadable file or the first
    line that is not JSON, is longer than MAX_LINE_BYTES or nests deeper than MAX_DEPTH raises `DatasetFormatError`
    naming the file (and the line)."""
    path = Path(path)
    out = []
    try:
        with path.open("rb") as fh:
            for number, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 2), b""), start=1):
                text = raw.rstrip(b"\r\n")
                if len(text) > MAX_LINE_BYTES:  # read no further: the rest of the line may be any size
                    raise DatasetFormatError(str(path), f"line {number}", None,
                                             f"the line is longer than {MAX_LINE_BYTES:,} bytes")
                if text.strip():
                    out.append((number, _decode(text, str(path), number)))
    except OSError as exc:
        raise DatasetFormatError(str(path), None, None, f"cannot read the file: {exc}") from None
    return out


def _decode(text: bytes, path: str, number: int) -> Any:
    try:
        value = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(path, f"line {number}", None, f"not UTF-8 text: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(path, f"line {number}", None, f"invalid JSON: {exc.msg}") from None
    except RecursionError:  # the decoder's own recursion (100,000 brackets)
        raise DatasetFormatError(path, f"line {number}", None, f"nested deeper than {MAX_DEPTH} levels") from None
    if _depth(value) > MAX_DEPTH:
        raise DatasetFormatError(path, f"line {number}", None, f"nested deeper than {MAX_DEPTH} levels")
    return value


def _depth(value: Any) -> int:
    """How deeply objects and lists nest in `value` (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def read_pairs(path: Path | str) -> list:
    """Every line of an export file as a `NewPair`; the first malformed line raises `DatasetFormatError`."""
    return [new_pair_from_record(raw, str(path), number) for number, raw in json_lines(path)]


def export_pairs(store: Store, path: Path | str, *, status: str | None = "queued", source: str | None = None,
                 stage: str | None = None) -> int:
    """Write the store's pairs matching the filters (oldest first); returns how many lines were written."""
    pairs = store.list_pairs(status=status, source=source, stage=stage, limit=None)
    return write_pairs(pairs, path)


def import_pairs(store: Store, path: Path | str) -> list[int]:
    """Queue every pair of an export file in one transaction (all or nothing); returns the new ids."""
    return store.add_pairs(read_pairs(path))
