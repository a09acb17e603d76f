"""Small text helpers shared by DynaKrag (operations, features) and the agent's grounded queries
(`policy/queries.py`): content terms, sentences, title keys, the question words the evidence does not cover.

Everything here is a pure function of strings (no model, no gold), so features built on it stay observable.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from evorag_core.types import Passage

__all__ = ["STOPWORDS", "words", "content_terms", "title_key", "sentences", "term_overlap", "expansion_terms",
           "uncovered_terms"]

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having he
    her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not
    now of off on once only or other our ours out over own same she should so some such than that the their theirs
    them themselves then there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours one two also known name named first""".split()
)
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")


def words(text: str) -> list[str]:
    """Lower-cased alphanumeric words (Unicode-aware; "don't" stays one word)."""
    return [w.lower() for w in _WORD.findall(text)]


def content_terms(text: str) -> list[str]:
    """Words that are not stopwords and have at least 2 characters, in order, with repeats."""
    return [w for w in words(text) if len(w) > 1 and w not in STOPWORDS]


def title_key(title: str) -> str:
    """Normalised title for de-duplication: lower-case words joined by one space."""
    return " ".join(words(title))


def sentences(text: str) -> list[str]:
    """Split prose at ., ! or ? followed by space and an upper-case letter, digit, quote or bracket."""
    return [s.strip() for s in _SENTENCE_END.split(" ".join(text.split())) if s.strip()]


def term_overlap(question: str, text: str) -> float:
    """Share of the question's distinct content terms that occur in `text` (0 when the question has none)."""
    q = set(content_terms(question))
    if not q:
        return 0.0
    return len(q & set(content_terms(text))) / len(q)


def expansion_terms(question: str, texts: Iterable[str], exclude: Iterable[str] = (), n: int = 4) -> list[str]:
    """Pseudo-relevance feedback: the `n` content terms found in the most evidence texts (ties: first seen),
    leaving out the question's terms and `exclude` (e.g. terms of earlier queries)."""
    banned = set(content_terms(question)) | {w for e in exclude for w in content_terms(e)}
    df: dict[str, int] = {}
    for text in texts:
        for term in dict.fromkeys(content_terms(text)):
            if term not in banned and not term.isdigit():
                df[term] = df.get(term, 0) + 1
    order = {t: i for i, t in enumerate(df)}
    return sorted(df, key=lambda t: (-df[t], order[t]))[:n]


def uncovered_terms(question: str, passages: Sequence["Passage"]) -> str:
    """The question's content words (in order, once) that occur in no passage title or text."""
    seen = {t for p in passages for t in content_terms(f"{p.title} {p.text}")}
    return " ".join(t for t in dict.fromkeys(content_terms(question)) if t not in seen)
