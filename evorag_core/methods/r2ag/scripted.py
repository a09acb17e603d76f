"""A deterministic steering algorithm without a language model (tests, the studio, an LM-free baseline).

It writes replies in the steering format (so they go through the same parser) from surface cues only:
- root (no evidence): base queries = the question itself, then each named entity of the question;
- on a branch: the named entities of the branch's newest passage that are not yet on the branch (not a title of a
  branch passage, not in the question), ranked by how many question focus words their sentence shares (ties: order
  of appearance). Base query = "<entity>" (the bridge entity's own page: the next hop), predicted query =
  "<entity> <focus words>" (anticipating the hop after it: the question's focus asked about the entity);
- stop retrieval when the branch has at least `min_depth` passages and its text covers at least `coverage` of the
  question's focus words (4-letter prefixes), or when the newest passage offers no new entity.
Named entities are capitalised word runs (inner "of", "the", "de", "von", "van", "and" allowed) minus leading
function words; focus words are the question's other content words.
"""
from __future__ import annotations

import re
from typing import Sequence

from evorag_core.methods.r2ag.parse import parse_expansion
from evorag_core.methods.r2ag.steering import Proposal, SteerRequest

__all__ = ["ScriptedSteering", "entities", "focus_words"]

_FUNCTION = frozenset(
    "a an the of in on at to for from by with and or but is are was were be been being which what who whom whose "
    "when where why how that this these those it its as into than then there their his her he she they them do does "
    "did has have had not no yes same both either also first second one two many much more most other another".split())
_CONNECT = r"(?:of|the|de|von|van|del|la|and|du|da)"
_WORD = r"[A-Z][\w'’.-]*"
_ENTITY = re.compile(rf"\b{_WORD}(?:\s+(?:{_CONNECT}\s+)*{_WORD})*")
_TOKEN = re.compile(r"[A-Za-z][\w'’-]*|\d+")
PREFIX = 4  # words match on their first 4 letters (a crude stemmer: "birth"place ~ "born" does not)


def entities(text: str) -> list[str]:
    """Capitalised word runs without leading function words, in order, de-duplicated (case-insensitively)."""
    out: dict[str, str] = {}
    for match in _ENTITY.finditer(text):
        words = match.group(0).split()
        while words and words[0].lower() in _FUNCTION:
            words = words[1:]
        while words and words[-1].lower() in _FUNCTION:
            words = words[:-1]
        span = " ".join(words).strip(".'’-")
        if span and span.lower() not in out:
            out[span.lower()] = span
    return list(out.values())


def focus_words(question: str) -> list[str]:
    """Content words of the question outside its named entities, lowercased, in order."""
    inside = {w.lower() for e in entities(question) for w in e.split()}
    words = [t.lower() for t in _TOKEN.findall(question)]
    out: dict[str, None] = {}
    for w in words:
        if w not in _FUNCTION and w not in inside and len(w) > 2:
            out.setdefault(w, None)
    return list(out)


def _prefixes(text: str) -> set[str]:
    return {t.lower()[:PREFIX] for t in _TOKEN.findall(text)}


def _sentence_of(text: str, span: str) -> str:
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if span in sentence:
            return sentence
    return text


class ScriptedSteering:
    """See the module docstring; `max_base` / `max_predicted` bound the queries of one reply."""

    name = "scripted"

    def __init__(self, *, max_base: int = 3, max_predicted: int = 2, min_depth: int = 2, coverage: float = 0.5,
                 max_depth: int = 3) -> None:
        self.max_base, self.max_predicted = max_base, max_predicted
        self.min_depth, self.coverage, self.max_depth = min_depth, coverage, max_depth

    def reply(self, request: SteerRequest) -> str:
        question, context = request.question, request.context
        focus = focus_words(question)
        if not context:
            ents = entities(question)
            base = [question, *ents][: self.max_base]
            think = "Start from the question and its entities: " + (", ".join(ents) or "none") + "."
            return _format(think, base, [])
        covered = _prefixes(" ".join(f"{p.title} {p.text}" for p in context))
        share = sum(w[:PREFIX] in covered for w in focus) / len(focus) if focus else 1.0
        if len(context) >= self.max_depth or (len(context) >= self.min_depth and share >= self.coverage):
            return _format(f"The evidence covers {share:.0%} of the question's focus words.", [], [], stop=True)
        known = {e.lower() for e in entities(question)} | {p.title.lower() for p in context}
        newest = context[-1]
        fresh = [e for e in entities(newest.text) if e.lower() not in known
                 and not any(e.lower() in k or k in e.lower() for k in known)]
        if not fresh:
            return _format(f"{newest.title} names no new entity to follow.", [], [], stop=True)
        focus_prefixes = {w[:PREFIX] for w in focus}
        ranked = sorted(enumerate(fresh), key=lambda ie: (-len(_prefixes(_sentence_of(newest.text, ie[1]))
                                                                & focus_prefixes), ie[0]))
        names = [e for _, e in ranked]
        tail = " ".join(focus[:4])
        think = f"{newest.title} leads to {', '.join(names[:3])}; look them up next."
        return _format(think, names[: self.max_base], [f"{e} {tail}".strip() for e in names[: self.max_predicted]])

    def propose(self, requests: Sequence[SteerRequest]) -> list[Proposal]:
        out = []
        for request in requests:
            text = self.reply(request)
            out.append(Proposal(text, parse_expansion(text)))
        return out


def _format(think: str, base: Sequence[str], predicted: Sequence[str], stop: bool = False) -> str:
    lines = [f"<think>{think}</think>"]
    lines += [f"<base-Q>{q}</base-Q>" for q in base] or (["<base-Q>stop retrieval</base-Q>"] if stop else [])
    lines += [f"<predicted-Q>{q}</predicted-Q>" for q in predicted] or ["<predicted-Q>none</predicted-Q>"]
    return "\n".join(lines)
