"""Bridge-entity detection: named spans in the retrieved evidence that the question does not mention.

A bridge entity links a retrieved passage to the next hop ("... chemist born in Mirrow" -> the passage about
Mirrow). Detection is lexical and deterministic:

1. Candidate spans are maximal runs of capitalised words in the passage texts; the connectors "of", "the",
   "de", "von", "van", "der", "del", "la", "le", "da", "di", "du" may sit between two capitalised words
   ("University of Oslo"). Leading function words ("The", "In", "He", ...) and demonyms are dropped from the span.
2. A span is discarded when every one of its words occurs in the question (the question already names it), when
   it equals the title of a retrieved passage (that page is already in the evidence), when it was already
   expanded, or, for one-word spans, when it is a function word, a month or weekday, a demonym/language
   ("Ostrevian", "French", "Canadian-American"), shorter than three letters, or only ever seen as the first word
   of a sentence ("Previously", "Located"). A possessive "'s" is dropped.
3. Candidates are ranked by how well the best passage that mentions them matches the question (the share of the
   question's content terms in its title and text: the first hop's passage matches the question, and the bridge
   entity is named in it), then by the number of passages that mention them, then by where they first occur
   (earlier passage, then earlier position): the first candidate is the one `bridge_entity_expand` searches for.
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

from evorag_core.evidence.text import STOPWORDS, term_overlap, title_key, words

__all__ = ["capitalized_spans", "bridge_candidates"]

_TOKEN = re.compile(r"[^\W_][\w'’.\-&]*")
_CONNECTORS = frozenset({"of", "the", "de", "von", "van", "der", "del", "la", "le", "da", "di", "du"})
_LEADING = frozenset(
    """the a an he she it they his her its their in on at by for from as after before during this that these those
    there when while although however but and or if is was also then since with within under over into upon""".split()
)
_CALENDAR = frozenset(
    """january february march april may june july august september october november december monday tuesday
    wednesday thursday friday saturday sunday""".split()
)
_DEMONYMS = frozenset(
    """english french german dutch spanish italian british irish scottish welsh swiss greek turkish polish danish
    swedish finnish norwegian chinese japanese korean thai""".split()
)
_DEMONYM_SUFFIX = ("ian", "ean", "ese", "ish", "ican")


def _is_cap(token: str) -> bool:
    return token[:1].isupper()


def _tokens(text: str) -> list[tuple[int, str, bool, bool]]:
    """(offset, word, ends_run, starts_sentence): a run ends after a word followed by , ; : ( ) or a
    sentence-ending period; a sentence starts at the text's first word and after a sentence end."""
    found = list(_TOKEN.finditer(text))
    out = []
    starts = True
    for k, m in enumerate(found):
        raw = m.group()
        word = re.sub(r"['’]s$", "", raw.rstrip(".,'’"))  # possessive: "Ostrevia's" -> "Ostrevia"
        gap = text[m.end(): found[k + 1].start()] if k + 1 < len(found) else ""
        sentence_end = (raw.endswith(".") and len(word) > 2) or any(c in gap for c in "!?")
        out.append((m.start(), word, sentence_end or any(c in gap for c in ",;:()[]\""), starts))
        starts = sentence_end
    return out


def capitalized_spans(text: str) -> list[tuple[int, str, bool]]:
    """(character offset, span, sentence_initial) of each run of capitalised words in `text`, leading function
    words removed; `sentence_initial`: the span's first word opens a sentence (its capital may mean nothing)."""
    tokens = _tokens(text)
    spans: list[tuple[int, str, bool]] = []
    i = 0
    while i < len(tokens):
        if not _is_cap(tokens[i][1]):
            i += 1
            continue
        j = i + 1
        while j < len(tokens) and not tokens[j - 1][2]:
            tok = tokens[j][1]
            if _is_cap(tok):
                j += 1
            elif (tok.lower() in _CONNECTORS and not tokens[j][2] and j + 1 < len(tokens)
                  and _is_cap(tokens[j + 1][1])):
                j += 2
            else:
                break
        run = tokens[i:j]
        while run and (run[0][1].lower() in _LEADING or all(_demonym(w) for w in run[0][1].lower().split("-"))):
            run = run[1:]  # "The ...", "In ...", "the Canadian-American Ada Lind" -> "Ada Lind"
        if run:
            spans.append((run[0][0], " ".join(t[1] for t in run), run[0][3]))
        i = j
    return spans


def _demonym(word: str) -> bool:
    return word in _DEMONYMS or word.endswith(_DEMONYM_SUFFIX)


def _keep(span: str, question_words: set[str], titles: set[str], expanded: set[str]) -> bool:
    key = title_key(span)
    span_words = key.split()
    if not span_words or key in titles or key in expanded:
        return False
    if all(w in question_words for w in span_words) or all(_demonym(w) for w in span_words):
        return False
    w = span_words[0]
    return len(span_words) > 1 or not (len(w) < 3 or w.isdigit() or w in STOPWORDS or w in _LEADING or w in _CALENDAR)


def bridge_candidates(question: str, texts: Sequence[str], titles: Sequence[str], expanded: Iterable[str] = ()) -> tuple[str, ...]:
    """Ranked bridge-entity candidates found in `texts` (see the module docstring); `titles[i]` is the title of
    the passage whose text is `texts[i]`."""
    if len(titles) != len(texts):
        raise ValueError(f"bridge_candidates: {len(texts)} texts but {len(titles)} titles")
    question_words = set(words(question))
    title_keys = {title_key(t) for t in titles}
    match = [term_overlap(question, f"{title} {text}") for title, text in zip(titles, texts)]
    done = {title_key(e) for e in expanded}
    docs: dict[str, set[int]] = {}
    first: dict[str, tuple[int, int]] = {}
    surface: dict[str, str] = {}
    mid_sentence: set[str] = set()
    for d, text in enumerate(texts):
        for offset, span, initial in capitalized_spans(text):
            if not _keep(span, question_words, title_keys, done):
                continue
            key = title_key(span)
            docs.setdefault(key, set()).add(d)
            first.setdefault(key, (d, offset))
            surface.setdefault(key, span)
            if not initial:
                mid_sentence.add(key)
    # a one-word span seen only at the start of sentences ("Previously", "Located") is not taken for a name
    ranked = sorted((k for k in docs if " " in k or k in mid_sentence),
                    key=lambda k: (-max(match[d] for d in docs[k]), -len(docs[k]), first[k]))
    return tuple(surface[k] for k in ranked)
