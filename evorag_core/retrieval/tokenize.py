"""BM25 tokenization shared by both backends: lowercase, split on non-alphanumerics, drop English
stopwords, optionally Snowball-stem (PyStemmer).

"Alphanumeric" is Unicode-aware (``[^\\W_]+``), so "Zürich" stays one token and "don't" becomes
"don", "t" (both stopwords). The stopword lists are bm25s's: "en" (Lucene's 33 words) and
"en_plus" (NLTK's 179 words).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

from evorag_core.errors import ConfigError

__all__ = ["Tokenizer", "STOPWORD_LISTS"]

_TOKEN = re.compile(r"[^\W_]+")
STOPWORD_LISTS = ("en", "en_plus", "none")


def _stopwords(name: str) -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN, STOPWORDS_EN_PLUS

    table = {"en": STOPWORDS_EN, "en_plus": STOPWORDS_EN_PLUS, "none": ()}
    if name not in table:
        raise ConfigError(f"unknown stopword list {name!r}; expected one of {', '.join(STOPWORD_LISTS)}")
    return frozenset(table[name])


@dataclass(frozen=True)
class Tokenizer:
    stopwords: str = "en_plus"
    stem: bool = True

    @cached_property
    def _stopset(self) -> frozenset[str]:
        return _stopwords(self.stopwords)

    @cached_property
    def _stemmer(self) -> Callable[[list[str]], list[str]] | None:
        if not self.stem:
            return None
        import Stemmer

        return Stemmer.Stemmer("english").stemWords

    def __call__(self, text: str) -> list[str]:
        stop = self._stopset
        tokens = [t for t in _TOKEN.findall(text.lower()) if t not in stop]
        return self._stemmer(tokens) if self._stemmer is not None else tokens

    def many(self, texts: Sequence[str]) -> list[list[str]]:
        return [self(t) for t in texts]

    def describe(self) -> str:
        """A stable string for index keys."""
        return f"alnum-lower|stop={self.stopwords}|stem={'snowball-english' if self.stem else 'none'}"
