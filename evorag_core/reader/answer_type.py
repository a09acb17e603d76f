"""Answer types: what kind of answer a question asks for and what kind a candidate span is, and the span reader's
type filter (`reader/span.py`'s `extract_candidates`).

- `question_type(question, options)`: the coarse type the answer ranker's features are keyed by (who / when / where /
  count / which / what / either_or / other; `reader/ranker.py`, its weights fitted on these names).
- `candidate_type(span)`: a candidate's surface type (date / year / number / person (2-3 capitalised words) / name /
  long_name / lower / other).
- `expected_kinds(question, options)`: the candidate kinds the answer must have, as tiers in order of preference: a
  birth or death date -> a full date, else a year; "what year" -> a year; "when" -> a date or a year; "how many" ->
  a number, else anything with a digit; "who" -> a capitalised name; "where", "which city / county", "place of
  birth" -> a capitalised name written after "in" / "at" / "near" that is not a person's (`name_facts`: a passage
  about a person has life dates after its title), else one that is not a person's, else any capitalised name; "which country" -> a country's name first; another numeric question
  ("population", "what age") -> anything with a digit (the rule before); "A or B" and other questions: no
  constraint (the options are the candidates).
- `by_type(question, spans, options)`: the spans of the first tier that has any, else all of them; never a "yes" /
  "no" span (`is_yes_no_span`) - a question that is not yes/no is not answered yes or no.

Pure functions of strings.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence, TypeVar

from evorag_core.metrics import normalize_answer
from evorag_core.reader.places import is_country, is_nationality
from evorag_core.types import Passage

__all__ = ["Q_TYPES", "C_TYPES", "question_type", "candidate_type", "is_numeric_question", "expected_kinds",
           "fits", "by_type", "is_yes_no_span", "NameFacts", "name_facts"]

Q_TYPES = ("who", "when", "where", "count", "which", "what", "either_or", "other")
C_TYPES = ("date", "year", "number", "person", "name", "long_name", "lower", "other")

_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_ANY_YEAR = re.compile(r"\b\d{3,4}\b")
_MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|December|"
           "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec")
_MONTH = re.compile(rf"\b({_MONTHS})\b")
_NUMERIC_Q = re.compile(r"^(how (many|much|old|long|far|tall|high|large|big)|what (year|age|date|time)|"
                        r"in (what|which) year|when)\b|\b(how many|how much|what year|which year|population)\b", re.I)
_YEAR_Q = re.compile(r"\b(what|which) year\b|\byear (was|did|were|is)\b", re.I)
_LIFE_DATE_Q = re.compile(r"\bdate of (birth|death)\b|\bbirth ?(day|date)\b|^when (was|is|did)\b.*\b(born|die|died|"
                          r"pass away|passed away)\b", re.I)
_PLACE_Q = re.compile(r"\bplace of (birth|death|burial)\b|\b(which|what) (city|country|state|town|county|region|"
                      r"place|province|village|nation)\b", re.I)
_COUNTRY_Q = re.compile(r"\b(which|what) (country|nation)\b", re.I)
_SPAN_DECADE_Q = re.compile(r"\b(century|decade|month|season|era)\b", re.I)

NAMES = frozenset({"person", "name", "long_name"})
DATE, YEAR, DATE_OR_YEAR = frozenset({"date"}), frozenset({"year"}), frozenset({"date", "year"})
NUMBER, DIGITS, COUNTRY = frozenset({"number"}), frozenset({"digits"}), frozenset({"country"})
PLACE, LOCATED = frozenset({"place"}), frozenset({"located"})  # names that are not a person's (`NameFacts`)
_LIFE_DATES = re.compile(rf"\((?:[^()]*;\s*)?(?:born|b\.|died|d\.|c\.|née)\s|\(\s*(?:\d{{1,2}}\s+)?(?:(?:{_MONTHS})\s+)?"
                         rf"(?:\d{{1,2}},?\s+)?\d{{3,4}}\s*[–—-]")
_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")
_CAP_WORD = r"[A-Z](?:[\w'’-]|\.(?=\w))*"  # a period only inside ("D.C"): a sentence's end ends the run
_CAP_RUN = rf"{_CAP_WORD}(?:\s+(?:(?:of|de|del|da|di|von|van|the)\s+)?{_CAP_WORD})*"
_NAME_DATES = re.compile(rf"({_CAP_RUN})\s+\((?:born\s|b\.\s|\d)")
_LOCATED = re.compile(rf"\b(?:in|at|near)\s+(?:the\s+)?({_CAP_RUN})")


def question_type(question: str, options: Sequence[str]) -> str:
    """One of Q_TYPES: the answer type the question asks for (the ranker's features are keyed by it)."""
    if options:
        return "either_or"
    q = question.strip().lower()
    if re.match(r"^(how (many|much|old|long|far|tall|high|large|big))\b", q) or "how many" in q or "how much" in q:
        return "count"
    if q.startswith("when") or re.search(r"\b(what|which|in what|in which) (year|date|decade|century|month)\b", q):
        return "when"
    if q.startswith(("who", "whom", "whose")) or re.search(r"\b(which|what) (person|man|woman|actor|actress|singer|"
                                                          r"author|writer|director|player|musician)\b", q):
        return "who"
    if q.startswith("where") or re.search(r"\b(which|what) (city|country|state|town|county|region|place)\b", q):
        return "where"
    if q.startswith("which") or re.match(r"^\w+ which\b", q):
        return "which"
    if q.startswith("what") or " what " in q:
        return "what"
    return "other"


def candidate_type(text: str) -> str:
    """One of C_TYPES: the surface type of a candidate span."""
    t = text.strip()
    if _MONTH.search(t) and _YEAR.search(t):
        return "date"
    if re.fullmatch(r"(1[0-9]{3}|20[0-9]{2})s?", t):
        return "year"
    if any(ch.isdigit() for ch in t):
        return "number"
    words = t.split()
    if t[:1].islower():
        return "lower"
    caps = [w for w in words if w[:1].isupper()]
    if 2 <= len(words) <= 3 and len(caps) == len(words):
        return "person"
    if len(words) >= 4:
        return "long_name"
    if caps:
        return "name"
    return "other"


def is_numeric_question(question: str) -> bool:
    """The answer has a digit: "how many", "what year", "when", ... (the filter before `expected_kinds`)."""
    return bool(_NUMERIC_Q.search(question.strip()))


def is_yes_no_span(text: str) -> bool:
    """The span reads as a yes/no answer ("No", "yes.")."""
    return normalize_answer(text) in ("yes", "no")


def expected_kinds(question: str, options: Sequence[str] = ()) -> tuple[frozenset[str], ...]:
    """The kinds the answer should have, tiers in order of preference (see the module docstring); () = any."""
    qtype = question_type(question, options)
    if qtype == "either_or":
        return ()
    if _LIFE_DATE_Q.search(question):
        return DATE, YEAR
    if qtype == "count":
        return NUMBER, DIGITS
    if qtype == "when":
        if _YEAR_Q.search(question):
            return YEAR, DATE
        return () if _SPAN_DECADE_Q.search(question) else (DATE_OR_YEAR,)
    if _COUNTRY_Q.search(question):
        return COUNTRY, NAMES
    if qtype == "where" or _PLACE_Q.search(question):
        return LOCATED, PLACE, NAMES
    if qtype == "who":
        return (NAMES,)
    return (DIGITS,) if is_numeric_question(question) else ()


@dataclass(frozen=True)
class NameFacts:
    """What the passages say about names (normalised): `persons` - the titles of the passages about a person (life
    dates in brackets near the start of the text: "Ada Lind (born 12 May 1950)", "Ansel Travine (1821–1893)") and the
    names written just before life dates; `located` - the names written after "in" / "at" / "near" ("born in
    Helsinki, Finland" -> "helsinki")."""

    persons: frozenset[str] = frozenset()
    located: frozenset[str] = frozenset()


def name_facts(passages: Sequence[Passage]) -> NameFacts:
    """The `NameFacts` of `passages` (their titles and full texts)."""
    persons = {normalize_answer(_QUALIFIER.sub("", p.title)) for p in passages if _LIFE_DATES.search(p.text[:200])}
    persons |= {normalize_answer(m.group(1)) for p in passages for m in _NAME_DATES.finditer(p.text)}
    located = {normalize_answer(m.group(1)) for p in passages for m in _LOCATED.finditer(p.text)}
    return NameFacts(frozenset(persons), frozenset(located - persons))


def fits(kinds: frozenset[str], span: str, facts: NameFacts = NameFacts()) -> bool:
    """Whether `span` is of one of `kinds` (C_TYPES names; "digits": any digit; "country": a country's name;
    "located": a capitalised name `facts` saw after "in" / "at"; "place": one that is not a person's; neither is a
    nationality word; a date with a three-digit year counts as a date)."""
    if (kinds & {"place", "located"} and fits(NAMES, span) and (key := normalize_answer(span)) not in facts.persons
            and not is_nationality(span)):
        if "place" in kinds or key in facts.located:
            return True
    if "country" in kinds and is_country(span):
        return True
    if "digits" in kinds and any(ch.isdigit() for ch in span):
        return True
    kind = candidate_type(span)
    if kind == "number" and _MONTH.search(span) and _ANY_YEAR.search(span):
        kind = "date"  # "3 August 979"
    return kind in kinds


T = TypeVar("T")


def by_type(question: str, spans: Sequence[tuple[str, T]], options: Sequence[str] = (),
            facts: NameFacts = NameFacts()) -> list[tuple[str, T]]:
    """`spans` ((text, anything) pairs) of the first tier of `expected_kinds` that has any, else all; yes/no spans
    dropped (see the module docstring). `facts`: what the passages say about names (`name_facts`)."""
    spans = [s for s in spans if not is_yes_no_span(s[0])]
    for kinds in expected_kinds(question, options):
        kept = [s for s in spans if fits(kinds, s[0], facts)]
        if kept:
            return kept
    return list(spans)
