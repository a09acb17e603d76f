"""The strict parser of ARENA replies, and a lenient answer extraction for evaluation.

A reply is well-formed (format score 1) when, after stripping surrounding white space, it is exactly

    <relevance>[i, j, ...]</relevance> <analysis>text</analysis> <answer>text</answer>

with only white space between the parts, each tag pair exactly once and in this order, no tag inside a part, the
relevance list a bracketed, comma-separated list of reference numbers (`[]` allowed) each in 1..n, and non-empty
analysis and answer. The first rule that fails is reported as `ParseFailure(part, reason)`.

The parts themselves are extracted one by one (first `<tag>...</tag>` span), also from a malformed reply, so the
accuracy and relevance rewards can be computed on their own; the format score stays strict. `citations` are the
numbers cited in the analysis as `[i]` or `[i, j]`, in first-seen order.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PARTS", "ParseFailure", "ArenaParse", "parse_arena", "parse_id_list", "find_citations", "lenient_answer"]

PARTS = ("relevance", "analysis", "answer")
_ID_LIST = re.compile(r"\[\s*(\d+(?:\s*,\s*\d+)*)?\s*\]")
_CITATION = re.compile(r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]")
_ANY_TAG = re.compile(r"</?[A-Za-z][\w-]*\s*>")
_ANSWER_LINE = re.compile(r"^\s*(?:final\s+)?answer\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class ParseFailure:
    part: str  # relevance | analysis | answer | order | outside
    reason: str


@dataclass(frozen=True)
class ArenaParse:
    relevance: tuple[int, ...] | None  # ids in <relevance> as written, repeats dropped; None: missing / not a list
    analysis: str | None
    citations: tuple[int, ...]  # [i] cited in the analysis
    answer: str | None  # content of the first <answer>...</answer>, stripped; None when absent
    failure: ParseFailure | None  # None: well-formed

    @property
    def ok(self) -> bool:
        return self.failure is None


def parse_id_list(text: str) -> tuple[int, ...] | None:
    """`[1, 3]` -> (1, 3); `[]` -> (); anything else (words, JSON objects, a bare `1,3`) -> None."""
    match = _ID_LIST.fullmatch(text.strip())
    if match is None:
        return None
    ids = [int(x) for x in match.group(1).split(",")] if match.group(1) else []
    return tuple(dict.fromkeys(ids))


def find_citations(analysis: str) -> tuple[int, ...]:
    """Numbers cited as `[i]` or `[i, j]` in `analysis`, first-seen order, repeats dropped."""
    ids: list[int] = []
    for match in _CITATION.finditer(analysis):
        ids.extend(int(x) for x in match.group(1).split(","))
    return tuple(dict.fromkeys(ids))


def _spans(text: str, tag: str) -> tuple[list[int], list[int]]:
    return ([m.start() for m in re.finditer(f"<{tag}>", text)], [m.start() for m in re.finditer(f"</{tag}>", text)])


def _content(text: str, tag: str) -> str | None:
    match = re.search(f"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
    return match.group(1).strip() if match else None


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _structure_failure(text: str) -> ParseFailure | None:
    """Tags present once each, in order, nothing but white space around them, no tag inside a part."""
    bounds: list[tuple[int, int]] = []
    for tag in PARTS:
        opens, closes = _spans(text, tag)
        if not opens or not closes:
            return ParseFailure(tag, f"missing <{tag}>...</{tag}>" if not opens and not closes
                                else f"<{tag}> is not closed" if opens else f"</{tag}> without <{tag}>")
        if len(opens) > 1 or len(closes) > 1:
            return ParseFailure(tag, f"<{tag}> appears {max(len(opens), len(closes))} times; expected once")
        if closes[0] < opens[0]:
            return ParseFailure(tag, f"</{tag}> comes before <{tag}>")
        bounds.append((opens[0], closes[0] + len(f"</{tag}>")))
    for (_, end), (start, _), tag in zip(bounds, bounds[1:], PARTS[1:]):
        if start < end:
            return ParseFailure("order", f"<{tag}> must come after the end of the previous part")
    gaps = [text[: bounds[0][0]], text[bounds[0][1] : bounds[1][0]], text[bounds[1][1] : bounds[2][0]], text[bounds[2][1] :]]
    stray = next((g for g in gaps if g.strip()), None)
    if stray is not None:
        return ParseFailure("outside", f"text outside the three parts: {_short(stray)!r}")
    for tag, (start, end) in zip(PARTS, bounds):
        inner = text[start + len(tag) + 2 : end - len(tag) - 3]
        nested = _ANY_TAG.search(inner)
        if nested:
            return ParseFailure(tag, f"contains the tag {nested.group(0)!r}")
    return None


def parse_arena(text: str, n_refs: int) -> ArenaParse:
    """Parse `text` against references numbered 1..n_refs (see the module docstring)."""
    if n_refs < 0:
        raise ValueError(f"n_refs must be >= 0, got {n_refs}")
    relevance_text = _content(text, "relevance")
    analysis = _content(text, "analysis")
    answer = _content(text, "answer")
    relevance = parse_id_list(relevance_text) if relevance_text is not None else None
    citations = find_citations(analysis) if analysis else ()
    failure = _structure_failure(text.strip())
    if failure is None and relevance is None:
        failure = ParseFailure("relevance", f"expected reference numbers like [1,3], got {_short(relevance_text or '')!r}")
    if failure is None:
        unknown = [i for i in relevance if not 1 <= i <= n_refs]
        if unknown:
            failure = ParseFailure("relevance", f"no reference {unknown[0]} (references are 1..{n_refs})")
    if failure is None and not analysis:
        failure = ParseFailure("analysis", "empty")
    if failure is None and not answer:
        failure = ParseFailure("answer", "empty")
    return ArenaParse(relevance, analysis, citations, answer or None, failure)


def lenient_answer(text: str) -> tuple[str | None, bool]:
    """(answer, used_fallback) for evaluation: the `<answer>` part when there is one; otherwise the text after an
    unclosed `<answer>` up to the next tag or line end, or an `Answer: ...` line. (None, True) when none is found."""
    strict = _content(text, "answer")
    if strict:
        return " ".join(strict.split()), False
    opened = text.find("<answer>")
    if opened >= 0:
        rest = text[opened + len("<answer>") :].strip()
        rest = re.split(r"<|\n", rest, maxsplit=1)[0].strip()
        if rest:
            return " ".join(rest.split()), True
    line = _ANSWER_LINE.search(text)
    if line:
        value = re.split(r"<", line.group(1), maxsplit=1)[0].strip()
        if value:
            return " ".join(value.split()), True
    return None, True
