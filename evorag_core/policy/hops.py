"""What the evidence still lacks: the agent's search-again decision and the query for the missing hop.

A multi-hop question names some pages (the entities in it: "Are *Leopold Lummerstorfer* and *Valeria Sarmiento* both
authors?") and reaches others through them (the *pianist* who recorded "Live at Shelly's Manne-Hole" is named in that
album's page). `plan_hop(question, hops)` reads the passages retrieved so far - lexically, with no model and no gold
data - and says whether another search is needed and which:

1. "entity": a capitalised name of the question that no retrieved passage's title covers: its page is missing, so
   the query is that name (the comparison's second side, usually).
2. "bridge": the question is not a comparison, its named pages were retrieved, but none of the other retrieved
   passages is *linked* from them (a passage is linked when its title, without a "(disambiguation)" part, occurs
   in a named page's text): the bridge page is missing, so the query is the first-hop page's best bridge entity
   (`evidence.entities.bridge_candidates` over the named pages only) followed by the question's words that no
   passage covers yet.
3. "complete": every named page is there, and (for a bridge question) a linked page too: answer.
Entities and bridges already searched for are never proposed again (`searched`), so a plan always moves on; when
nothing new is left the plan is "complete" with reason "exhausted".

The policy (`policy/agent.py`, `PolicyConfig.hop_gate`) adds `hop_gate` nats to SEARCH's label score when the plan
says search and to ANSWER's when it says complete, and the greedy follow-up query is the plan's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from evorag_core.evidence.entities import bridge_candidates, capitalized_spans
from evorag_core.evidence.text import STOPWORDS, content_terms, title_key, uncovered_terms, words
from evorag_core.types import Passage

__all__ = ["HopPlan", "plan_hop", "question_entities", "is_comparison", "named_pages", "linked_pages", "page_title"]

_QUESTION_WORDS = frozenset(
    """what which who whom whose when where why how are is was were do does did has have had can could will would
    in on at of for the a an and or both name""".split())
_COMPARISON = re.compile(
    r"\b(both|same|either|neither|compared?|than|older|younger|earlier|later|first|longer|shorter|larger|smaller|"
    r"bigger|taller|higher|lower|more|less|fewer|most|least|common)\b|\bor\b", re.I)
_PAREN = re.compile(r"\s*\([^)]*\)\s*$")


@dataclass(frozen=True)
class HopPlan:
    search: bool  # another search is needed
    query: str | None  # what to search for (None when complete)
    reason: str  # "entity" | "bridge" | "complete" | "exhausted"
    target: str | None = None  # the entity or bridge whose page is missing

    def details(self) -> dict[str, str | bool | None]:
        return {"search": self.search, "reason": self.reason, "target": self.target, "query": self.query}


def page_title(title: str) -> str:
    """A passage title without its disambiguation: "Bill Evans (pianist)" -> "Bill Evans"."""
    return _PAREN.sub("", title).strip()


def question_entities(question: str) -> tuple[str, ...]:
    """The names the question mentions: its runs of capitalised words (quoted titles included), question words and
    leading function words removed, in order, without repeats."""
    out: dict[str, str] = {}
    for m in re.finditer(r"[\"“]([^\"“”]{2,80})[\"”]", question):
        out.setdefault(title_key(m.group(1)), m.group(1).strip())
    for _, span, _initial in capitalized_spans(question):
        parts = span.split()
        while parts and parts[0].lower() in _QUESTION_WORDS:
            parts = parts[1:]
        name = " ".join(parts)
        key = title_key(name)
        if key and not (len(parts) == 1 and (len(key) < 3 or key in STOPWORDS)):
            if not any(key in k.split(" ") or f" {key} " in f" {k} " for k in out):  # not part of a longer one
                out.setdefault(key, name)
    return tuple(out.values())


def is_comparison(question: str) -> bool:
    """A question that compares or joins named entities ("Are A and B both ...", "Who is older, A or B?")."""
    return bool(_COMPARISON.search(question))


def _covers(title: str, entity: str, question: str) -> bool:
    """Whether a page titled `title` is the page of `entity`: the title (without its disambiguation) is named in the
    question and holds every word of the entity ("Hatton Castle, Angus" covers "Hatton Castle" and "Angus";
    "Dinosaur Planet" does not cover "Dinosaur")."""
    t, e = set(words(page_title(title))), set(words(entity))
    return bool(t and e) and e <= t <= set(words(question))


def named_pages(question: str, passages: Sequence[Passage]) -> list[Passage]:
    """The retrieved passages whose page the question names (their title's words all occur in the question)."""
    q = set(words(question))
    return [p for p in passages if (t := set(words(page_title(p.title)))) and t <= q]


def linked_pages(named: Sequence[Passage], passages: Sequence[Passage], chars: int = 0) -> list[Passage]:
    """The retrieved passages (not named ones) whose title a named page's text (its first `chars` characters, as
    the prompt shows it; 0: all) mentions. The other direction (a passage that mentions a named page) was measured
    and dropped: HotpotQA's distractors are chosen for mentioning the question's entities, so it stopped searches
    whose bridge was still missing (docs/search.md)."""
    texts = "".join(" " + " ".join(words(p.text[:chars] if chars else p.text)) + " " for p in named)
    names = {p.pid for p in named}
    return [p for p in passages if p.pid not in names and (key := title_key(page_title(p.title)))
            and f" {key} " in texts]


def plan_hop(question: str, passages: Sequence[Passage], searched: Sequence[str], chars: int = 0,
             max_bridges: int = 3) -> HopPlan:
    """The plan at this point of an episode (see the module docstring). `passages`: every passage retrieved on the
    active chain; `searched`: the queries issued so far (active and dropped; the question, which names every
    entity, is not a search for any of them, however often it was searched); `chars`: the passage characters the
    policy's prompt shows (0: all); `max_bridges`: bridge searches allowed in an episode."""
    asked = title_key(question)
    searched = [q for q in searched if title_key(q) != asked]
    done = " " + " ".join(f" {title_key(q)} " for q in searched) + " "
    entities = question_entities(question)
    for entity in entities:
        if not any(_covers(p.title, entity, question) for p in passages) and f" {title_key(entity)} " not in done:
            return HopPlan(True, entity, "entity", entity)
    if is_comparison(question) and len(entities) >= 2:
        return HopPlan(False, None, "complete")
    named = named_pages(question, passages) or list(passages[:1])
    if linked_pages(named, passages, chars):
        return HopPlan(False, None, "complete")
    entity_keys = {title_key(e) for e in entities}
    if sum(title_key(q) not in entity_keys for q in searched) >= max_bridges:
        return HopPlan(False, None, "exhausted")
    q_terms = set(content_terms(question))
    titles = [p.title for p in passages]
    for bridge in bridge_candidates(question, [p.text for p in named], [p.title for p in named], expanded=titles):
        if f" {title_key(bridge)} " in done or q_terms & set(content_terms(bridge)):
            continue  # searched already, or another name of a question entity ("John Mark Galecki")
        gap = " ".join(t for t in uncovered_terms(question, passages).split() if t in q_terms)
        return HopPlan(True, " ".join(filter(None, (bridge, gap))), "bridge", bridge)
    return HopPlan(False, None, "exhausted")
