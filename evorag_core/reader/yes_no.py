"""Yes / no from the evidence about the question's entities (`answer.yes_no = "evidence"`).

HotpotQA's and 2Wiki's yes/no questions are comparisons of two (or more) entities: "Are A and B both American?",
"Were X and Y of the same nationality?", "Are both films from the same country?", "Is X located in Y?". The
decision reads each entity's passage:

1. **Entities**: passages whose title (its "(film)"-style qualifier dropped) is named in the question, longest
   first, without overlap. When the question asks about a role of theirs ("the directors of both films ..."), each
   entity's property is read from the passage its own passage names (the director's page), if one is there.
2. **"Same X" questions** (nationality / country / origin, language, year, US state): the value read from each
   entity's passage - the first country or nationality it names (`reader/places.py`), the first language, year or
   state - equal for all -> yes, different -> no; a value missing, or another X ("same genre") -> no decision.
3. **Other questions** ("both American documentaries", "located in Michigan", "both magazines", "before 1950"): the
   question less its entities and filler words is the property, and each entity's passage supports it (True),
   contradicts it (False) or says nothing (None): a country or nationality -> the first country its passage names
   (another one: False); a US state -> named, or another state named (False); "before / after YEAR" -> its first
   year; only when the property is none of these, its content words (plurals folded) -> at least half of them in the
   passage (else False). Any entity False -> no; otherwise at least one True -> yes.

`decide_yes_no(question, passages)` -> `YesNoEvidence` or None when the evidence gives nothing (no entity, or no
value or property read); the span reader then falls back to its model over the LM's label margin. Pure function.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from evorag_core.evidence.text import STOPWORDS, words
from evorag_core.reader.places import country_mentions, country_words, language_mentions, state_mentions
from evorag_core.types import Passage

__all__ = ["YesNoEvidence", "decide_yes_no", "question_entities"]

_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")
_SAME = re.compile(r"\bsame\s+(\w+)|\bfrom the same\b", re.I)
_SAME_KINDS = {"nationality": "nationality", "country": "nationality", "origin": "nationality", "nation": "nationality",
               "citizenship": "nationality", "language": "language", "year": "year", "state": "state"}
_ROLE = re.compile(r"\b(directors?|composers?|authors?|writers?|performers?|singers?|creators?|producers?|founders?|"
                   r"fathers?|mothers?|husbands?|wives|wife|spouses?)\b", re.I)
_THRESHOLD_YEAR = re.compile(r"\b(before|after|prior to|earlier than|later than)\s+(?:the\s+year\s+)?(\d{4})\b", re.I)
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_FILLER = frozenset(("both located based situated found founded from known considered types type kinds kind forms "
                     "form also either each all same whether members member part".split()))
_IRREGULAR = {"genera": "genus", "species": "species", "media": "medium", "people": "person", "men": "man",
              "women": "woman", "children": "child"}


@dataclass(frozen=True)
class YesNoEvidence:
    """The decision (`answer`: "yes" | "no"), the property compared (`prop`: "nationality", "language", "year",
    "country:<key>", "state:<name>", "year<" / "year>", "words"), and per entity (its name, the value read or the
    verdict: "True" / "False" / "None")."""

    answer: str
    prop: str
    values: tuple[tuple[str, str], ...]


def _plain_title(title: str) -> str:
    return _QUALIFIER.sub("", title).strip()


def _stem(word: str) -> str:
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ses", "xes", "ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def question_entities(question: str, passages: Sequence[Passage]) -> list[int]:
    """Indices of the passages whose plain title the question names (word sequence, case folded), longest title
    first, each question word claimed once; in the order the question names them. Of passages sharing a plain title
    ("Rolling Papers (film)", "Rolling Papers (album)") the one whose qualifier the question or another named
    entity's qualifier has ("The Bomb (film)"), else the first."""
    q = words(question)
    taken = [False] * len(q)
    found: list[tuple[int, tuple[str, ...]]] = []  # (position in question, title words)
    by_title: dict[tuple[str, ...], list[int]] = {}
    for i, p in enumerate(passages):
        by_title.setdefault(tuple(words(_plain_title(p.title))), []).append(i)
    for t in sorted(by_title, key=len, reverse=True):
        if not t or (len(t) == 1 and t[0] in STOPWORDS):
            continue
        for s in range(len(q) - len(t) + 1):
            if tuple(q[s:s + len(t)]) == t and not any(taken[s:s + len(t)]):
                taken[s:s + len(t)] = [True] * len(t)
                found.append((s, t))
                break
    quals = {w for _, t in found for i in by_title[t] if len(by_title[t]) == 1 for w in _qualifier(passages[i].title)}
    q_words = set(q)

    def pick(ids: list[int]) -> int:
        return max(ids, key=lambda i: (bool(set(_qualifier(passages[i].title)) & q_words),
                                       bool(set(_qualifier(passages[i].title)) & quals), -i))

    return [pick(by_title[t]) for _, t in sorted(found)]


def _qualifier(title: str) -> list[str]:
    m = _QUALIFIER.search(title)
    return words(m.group(0)) if m else []


def _linked(entity: int, passages: Sequence[Passage], entities: Sequence[int]) -> int:
    """The passage that `entity`'s passage names (not itself an entity: "directed by Curtis Bernhardt" -> his page),
    else `entity`."""
    text = " ".join(passages[entity].text.lower().split())
    for j, p in enumerate(passages):
        name = " ".join(_plain_title(p.title).lower().split())
        if j not in entities and name and name in text:
            return j
    return entity


def _same_value(kind: str, text: str) -> str | None:
    if kind == "language":
        found = language_mentions(text)
    elif kind == "state":
        found = state_mentions(text)
    elif kind == "year":
        found = _YEAR.findall(text)
    else:
        found = country_mentions(text)
    return found[0] if found else None


def _decide_same(kind: str, names: Sequence[str], texts: Sequence[str]) -> YesNoEvidence | None:
    values = [_same_value(kind, t) for t in texts]
    if len(values) < 2 or any(v is None for v in values):
        return None
    answer = "yes" if len(set(values)) == 1 else "no"
    return YesNoEvidence(answer, kind, tuple(zip(names, (str(v) for v in values))))


def _property_words(question: str, passages: Sequence[Passage], entities: Sequence[int],
                    places: set[str]) -> list[str]:
    """The question's content words outside its entities' titles and `places`, filler and stopwords dropped, plurals
    folded."""
    named = places | {w for i in entities for w in words(_plain_title(passages[i].title))}
    return [_stem(w) for w in words(question)
            if w not in named and w not in STOPWORDS and w not in _FILLER and len(w) > 1 and not w.isdigit()]


def _verdict(text: str, countries: Sequence[str], states: Sequence[str], year_rule: tuple[str, int] | None,
             stems: Sequence[str]) -> bool | None:
    """Whether `text` supports the property (True), contradicts it (False) or says nothing about it (None)."""
    verdicts: list[bool | None] = []
    if countries:  # the entity's own country: the first its passage names
        named = country_mentions(text)
        verdicts.append(named[0] in countries if named else None)
    if states:
        named = state_mentions(text)
        verdicts.append(all(s in named for s in states) if named else None)
    if year_rule:
        years = [int(y) for y in _YEAR.findall(text)]
        side, year = year_rule
        verdicts.append(None if not years else (years[0] < year if side == "before" else years[0] > year))
    if stems and not verdicts:
        have = {_stem(w) for w in words(text)}
        verdicts.append(sum(s in have for s in stems) / len(stems) >= 0.5)
    if False in verdicts:
        return False
    return True if True in verdicts else None


def _decide_property(question: str, passages: Sequence[Passage], entities: Sequence[int],
                     texts: Sequence[str]) -> YesNoEvidence | None:
    rest = question
    for i in entities:  # the property's proper names are read from the question less the entities' titles
        rest = re.sub(re.escape(_plain_title(passages[i].title)), " ", rest, flags=re.I)
    states = state_mentions(rest)
    countries = country_mentions(rest, states=False)
    year_rule = None
    if m := _THRESHOLD_YEAR.search(rest):
        year_rule = ("before" if m.group(1).lower() in ("before", "prior to", "earlier than") else "after",
                     int(m.group(2)))
    place_words = {w for n in country_words(rest) for w in words(n)}
    stems = [w for w in _property_words(rest, passages, entities, place_words)
             if not (year_rule and w in ("before", "after", "prior", "earlier", "later"))]
    if not (countries or states or year_rule or stems):
        return None
    verdicts = [_verdict(t, countries, states, year_rule, stems) for t in texts]
    prop = ",".join([f"country:{c}" for c in countries] + [f"state:{s}" for s in states]
                    + ([f"year{'<' if year_rule[0] == 'before' else '>'}{year_rule[1]}"] if year_rule else [])
                    + (["words:" + " ".join(stems)] if stems else []))
    names = [_plain_title(passages[i].title) for i in entities]
    values = tuple(zip(names, (str(v) for v in verdicts)))
    if False in verdicts:
        return YesNoEvidence("no", prop, values)
    if True in verdicts:
        return YesNoEvidence("yes", prop, values)
    return None


def decide_yes_no(question: str, passages: Sequence[Passage]) -> YesNoEvidence | None:
    """Yes / no from the entities' passages, or None when they give nothing (see the module docstring)."""
    entities = question_entities(question, passages)
    if not entities:
        return None
    role = bool(_ROLE.search(question))
    sources = [_linked(i, passages, entities) if role else i for i in entities]
    texts = [passages[j].text for j in sources]
    names = [_plain_title(passages[i].title) for i in entities]
    if m := _SAME.search(question):
        kind = _SAME_KINDS.get((m.group(1) or "country").lower())
        return _decide_same(kind, names, texts) if kind else None
    return _decide_property(question, passages, entities, texts)
