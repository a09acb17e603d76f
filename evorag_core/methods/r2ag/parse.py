"""Lenient parser of the steering model's reply (paper Appendix B/G output format):

    <think> reasoning </think>
    <base-Q> single-hop query </base-Q>            (one or more; "stop retrieval" = the stop signal)
    <predicted-Q> anticipated next-hop query </predicted-Q>   (zero or more; "none" = no prediction)

Never raises on model text. Tag names are matched case-insensitively with `-`, `_`, a space or nothing between the
words (`<base_q>`, `<BaseQ>`); a segment opened and never closed runs to the next tag (or the end) and is counted as
malformed; a stray closing tag, an empty segment and a stop phrase outside any tag are malformed too. A bare closing
`</think>` with no opening tag makes the text before it the reasoning (a prompt may pre-fill `<think>`), counted.
`well_formed` counts the closed, non-empty base/predicted segments that come after a complete think block: the
segments the format reward pays for (SPEC §7: 0.01 each, capped).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Expansion", "parse_expansion", "STOP_PHRASE", "NONE_PHRASES", "normalize_query"]

STOP_PHRASE = "stop retrieval"
NONE_PHRASES = frozenset({"none", "n/a", "na", "no prediction", "nothing", "-"})
_TAG = re.compile(r"<\s*(/?)\s*(think|base[-_ ]?q|predicted[-_ ]?q)\s*>", re.IGNORECASE)
_STOP = re.compile(r"\bstop[\s_-]*retrieval\b", re.IGNORECASE)


@dataclass(frozen=True)
class Expansion:
    """One parsed reply. Queries are de-duplicated case-insensitively across both kinds: the first occurrence is
    kept, a later repeat (e.g. a predicted query copying a base query) is dropped and counted in `duplicates`."""

    think: str | None  # the reasoning, None when the reply has none
    base: tuple[str, ...]  # base intermediate queries (the stop phrase excluded)
    predicted: tuple[str, ...]  # anticipatory queries ("none" excluded)
    stop: bool  # the stop-retrieval signal was emitted
    well_formed: int  # closed, non-empty base/predicted segments after a complete think block
    malformed: int  # unclosed segments, stray closing tags, empty segments, untagged stop phrases, bare </think>
    duplicates: int = 0  # repeated queries dropped
    dropped: int = 0  # queries beyond the per-kind cap (see `parse_expansion(max_queries=...)`)

    @property
    def has_think(self) -> bool:
        return bool(self.think)

    @property
    def queries(self) -> tuple[tuple[str, str], ...]:
        """(kind, query) in reply order per kind: the base queries first, then the predicted ones."""
        return tuple([("base", q) for q in self.base] + [("predicted", q) for q in self.predicted])

    def to_dict(self) -> dict:
        return {"think": self.think, "base": list(self.base), "predicted": list(self.predicted), "stop": self.stop,
                "well_formed": self.well_formed, "malformed": self.malformed, "duplicates": self.duplicates,
                "dropped": self.dropped}

    @classmethod
    def from_dict(cls, raw: dict) -> "Expansion":
        return cls(raw.get("think"), tuple(raw.get("base", ())), tuple(raw.get("predicted", ())),
                   bool(raw.get("stop")), int(raw.get("well_formed", 0)), int(raw.get("malformed", 0)),
                   int(raw.get("duplicates", 0)), int(raw.get("dropped", 0)))


def normalize_query(text: str) -> str:
    """Whitespace collapsed, surrounding quotes, brackets and list markers removed."""
    text = " ".join(text.split())
    text = re.sub(r"^(?:[-*•]|\d+[.)])\s+", "", text)
    return text.strip(" \"'`“”‘’()[]")


def _kind(name: str) -> str:
    low = name.lower()
    return "think" if low == "think" else ("base" if low.startswith("base") else "predicted")


@dataclass(frozen=True)
class _Segment:
    kind: str
    text: str
    closed: bool
    start: int  # offset of the opening tag
    end: int  # offset after the closing tag (or where the unclosed segment stops)


def _segments(text: str) -> tuple[list[_Segment], int, _Segment | None]:
    """(segments, stray closing tags, the reasoning before a bare </think> as a segment, if any)."""
    tags = list(_TAG.finditer(text))
    segments: list[_Segment] = []
    stray = 0
    bare_think: _Segment | None = None
    i = 0
    while i < len(tags):
        tag = tags[i]
        kind = _kind(tag.group(2))
        if tag.group(1):  # a closing tag with no opening one before it
            stray += 1
            if kind == "think" and bare_think is None and not segments:
                bare_think = _Segment("think", text[: tag.start()], True, 0, tag.end())
            i += 1
            continue
        nxt = tags[i + 1] if i + 1 < len(tags) else None
        if nxt is not None and nxt.group(1) and _kind(nxt.group(2)) == kind:
            segments.append(_Segment(kind, text[tag.end(): nxt.start()], True, tag.start(), nxt.end()))
            i += 2
        else:
            end = nxt.start() if nxt is not None else len(text)
            segments.append(_Segment(kind, text[tag.end(): end], False, tag.start(), end))
            i += 1
    return segments, stray, bare_think


def _outside(text: str, segments: list[_Segment]) -> str:
    """The text outside every segment (tags removed): where an untagged stop phrase may stand."""
    keep, pos = [], 0
    for seg in sorted(segments, key=lambda s: s.start):
        keep.append(text[pos: seg.start])
        pos = max(pos, seg.end)
    keep.append(text[pos:])
    return _TAG.sub(" ", " ".join(keep))


def parse_expansion(text: str, max_queries: int = 0) -> Expansion:
    """Parse a steering reply; `max_queries` > 0 keeps at most that many queries of each kind (rest `dropped`)."""
    text = text if isinstance(text, str) else ""
    segments, malformed, bare_think = _segments(text)
    think_parts = [s for s in segments if s.kind == "think" and s.text.strip()]
    if not think_parts and bare_think is not None and bare_think.text.strip():
        think_parts = [bare_think]
    think = " ".join(" ".join(s.text.split()) for s in think_parts) or None
    think_done = next((s.end for s in think_parts if s.closed), None)
    malformed += sum(1 for s in segments if s.kind == "think" and not s.closed)
    queries: dict[str, list[str]] = {"base": [], "predicted": []}
    seen: set[str] = set()
    stop = False
    well_formed = duplicates = dropped = 0
    for seg in segments:
        if seg.kind == "think":
            continue
        query = normalize_query(seg.text)
        if not seg.closed or not query:
            malformed += 1
        elif think_done is not None and seg.start >= think_done:
            well_formed += 1
        if not query:
            continue
        low = query.lower().rstrip(".!")
        if seg.kind == "base" and _STOP.fullmatch(low):
            stop = True
            continue
        if seg.kind == "predicted" and low in NONE_PHRASES:
            continue
        key = low  # a query repeated in the same or the other kind is the same branch
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        if max_queries and len(queries[seg.kind]) >= max_queries:
            dropped += 1
            continue
        queries[seg.kind].append(query)
    outside = _outside(text, segments + ([bare_think] if bare_think is not None else []))
    if not stop and _STOP.search(outside):
        stop, malformed = True, malformed + 1
    return Expansion(think, tuple(queries["base"]), tuple(queries["predicted"]), stop, well_formed, malformed,
                     duplicates, dropped)
