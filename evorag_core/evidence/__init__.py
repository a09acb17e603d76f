"""Lexical reading of retrieved evidence, shared by DynaKrag's operations and the agent's grounded follow-up
queries: content terms, the question words no passage covers (`text`), and bridge entities the passages name that
the question does not (`entities`). Pure functions of strings; no model, no gold."""
from __future__ import annotations

from evorag_core.evidence.entities import bridge_candidates, capitalized_spans
from evorag_core.evidence.text import content_terms, expansion_terms, term_overlap, title_key, uncovered_terms, words

__all__ = ["bridge_candidates", "capitalized_spans", "content_terms", "expansion_terms", "term_overlap", "title_key",
           "uncovered_terms", "words"]
