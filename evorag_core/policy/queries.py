"""Grounded follow-up queries (`policy.query_mode = "grounded"`): after the first hop, the agent's SEARCH argument
is chosen among candidates built from what it has read, plus its own generated query, by the model's score.

Candidates (`grounded_candidates`), from the question and the active chain's passages as the prompt shows them
(each text cut to `passage_chars`), with the lexical readers of `evorag_core.evidence` (DynaKrag's measured gap
heuristics):
- "bridge": each of the top `max_bridges` bridge entities (capitalised runs and titles the passages name and the
  question does not, ranked by how well their passage matches the question) followed by the question's content
  words that no passage covers yet (DynaKrag's `bridge_entity_expand` query);
- "rewrite": the question expanded by the content terms found in the most passages (DynaKrag's `rewrite_query`);
- "generated": the model's own query, decoded after "SEARCH:" as in free mode.
Filters (`filter_reason`, every drop counted by reason): "empty"; "repeat" (equal, after lower-casing and dropping
punctuation, to the question or an earlier query, active or dropped; a bridge entity already named in an earlier
query counts too); "copy" (the query's words, a truncated last word aside, are a run of at least `COPY_WORDS` words of
a passage's title + text: a passage line copied out); "loop" (a word pair occurring twice, or a word three times:
"born 1964 in 1964 in 1964").
Scoring (`score_candidates`, `policy.query_score`): "mean" = mean log-prob per token of " <query>" after the
agent prompt + "SEARCH:", all candidates in one forward over the cached prompt (`score_choices`); the mean, not the
sum: a sum prefers the shortest string whatever it says. "pmi" = that mean minus the same mean after the prompt of
the question alone (no search yet, `baseline_prompt`): what the passages read add to the query's likelihood (the
default). Measured on HotpotQA dev 0:60 (pooled, embedded 135M model; docs/queries.md): "mean" chose the
question-prefixed rewrite or the generated query 51 times of 58 and found no more gold than free mode (support recall
0.808 = 0.808); "pmi" chose a bridge query 43 of 67 times: support recall 0.842 vs free 0.808 (p 0.03), full
support 0.717 vs 0.650 (p 0.03), F1 0.138 vs 0.106 (p 0.10). Greedy takes the best; a sampled sibling draws from softmax(score / temperature)
over one pool (the grounded candidates plus every sibling's own generated query), so rollouts keep exploring other
queries while staying inside the filtered set. When every candidate is filtered the row keeps its generated query
(reported as `fallback = "no_candidate"` in the query info, not as a policy fallback).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch

from evorag_core.evidence.entities import bridge_candidates
from evorag_core.evidence.text import expansion_terms, title_key, uncovered_terms, words
from evorag_core.env.state import AgentView
from evorag_core.types import Passage

if TYPE_CHECKING:
    from evorag_core.lm.base import PolicyBackend

__all__ = ["QueryCandidate", "COPY_WORDS", "FILTER_REASONS", "earlier_queries", "filter_reason", "grounded_candidates",
           "score_candidates", "choose_queries"]

COPY_WORDS = 5  # a query sharing a run of this many words with a passage is a copied line
FILTER_REASONS = ("empty", "repeat", "copy", "loop")
_ASKING = frozenset({"whose"})  # a question word `evidence.text.STOPWORDS` lacks (kept there: DynaKrag's measured lists)


@dataclass(frozen=True)
class QueryCandidate:
    text: str
    source: str  # "bridge" | "rewrite" | "generated"


def earlier_queries(view: AgentView) -> tuple[str, ...]:
    """What a new query must not repeat: the question, the active chain's queries and the dropped ones."""
    return (view.question, *(hop.query for hop in view.chain), *view.dropped)


def _copies(query_words: list[str], passages: Sequence[Passage]) -> bool:
    core = query_words[:-1] if len(query_words) > COPY_WORDS else query_words  # the last word may be cut ("ho…")
    if len(core) < COPY_WORDS:
        return False
    needle = f" {' '.join(core)} "
    return any(needle in f" {' '.join(words(f'{p.title} {p.text}'))} " for p in passages)


def _loops(query_words: list[str]) -> bool:
    pairs = Counter(zip(query_words, query_words[1:]))
    return any(n > 1 for n in pairs.values()) or any(n > 2 for n in Counter(query_words).values())


def filter_reason(query: str, earlier: Sequence[str], passages: Sequence[Passage]) -> str | None:
    """Why `query` may not be searched (one of FILTER_REASONS), or None when it may."""
    key = title_key(query)
    if not key:
        return "empty"
    if key in {title_key(q) for q in earlier}:
        return "repeat"
    query_words = key.split()
    if _copies(query_words, passages):
        return "copy"
    if _loops(query_words):
        return "loop"
    return None


def _shown(passages: Sequence[Passage], passage_chars: int) -> list[Passage]:
    """The passages as the prompt shows them (text cut to `passage_chars`): candidates come from what was read."""
    return [Passage(p.pid, p.title, " ".join(p.text.split())[:passage_chars]) for p in passages]


def grounded_candidates(view: AgentView, passage_chars: int, max_bridges: int = 3
                        ) -> tuple[list[QueryCandidate], Counter[str]]:
    """The evidence-built candidates at `view` (see the module docstring), filtered, and the filter counts."""
    passages = _shown(view.passages, passage_chars)
    filtered: Counter[str] = Counter()
    if not passages:
        return [], filtered
    earlier = earlier_queries(view)
    searched = " " + " ".join(title_key(q) for q in earlier) + " "
    gap = " ".join(w for w in uncovered_terms(view.question, passages).split() if w not in _ASKING)
    raw: list[QueryCandidate] = []
    bridges = 0
    for entity in bridge_candidates(view.question, [p.text for p in passages], [p.title for p in passages]):
        if bridges >= max_bridges:
            break
        if f" {title_key(entity)} " in searched:  # its hop was already searched for
            filtered["repeat"] += 1
            continue
        raw.append(QueryCandidate(" ".join(filter(None, (entity, gap))), "bridge"))
        bridges += 1
    terms = expansion_terms(view.question, [f"{p.title} {p.text}" for p in passages], exclude=earlier[1:])
    if terms:
        raw.append(QueryCandidate(" ".join([view.question, *terms]), "rewrite"))
    return _keep(raw, earlier, passages, filtered), filtered


def _keep(raw: Sequence[QueryCandidate], earlier: Sequence[str], passages: Sequence[Passage],
          filtered: Counter[str]) -> list[QueryCandidate]:
    """`raw` without filtered candidates (counted in `filtered`) and without duplicates (the first kept)."""
    kept: dict[str, QueryCandidate] = {}
    for cand in raw:
        reason = filter_reason(cand.text, earlier, passages)
        if reason:
            filtered[reason] += 1
        else:
            kept.setdefault(title_key(cand.text), cand)
    return list(kept.values())


def score_candidates(backend: PolicyBackend, prompt: str, texts: Sequence[str]) -> list[float]:
    """Mean log-prob per token of " <text>" after `prompt` (the agent prompt + "SEARCH:"), one scoring pass."""
    conts = [f" {t}" for t in texts]
    sums = backend.score_choices(prompt, conts)
    tokenizer = getattr(backend, "tokenizer", None)
    lengths = [len(tokenizer(c, add_special_tokens=False)["input_ids"]) if tokenizer is not None else len(c.split())
               for c in conts]
    return [s / max(n, 1) for s, n in zip(sums, lengths)]


def choose_queries(backend: PolicyBackend, view: AgentView, search_prompt: str, generated: Sequence[str],
                   passage_chars: int, temperature: float, seed: int, max_bridges: int = 3,
                   baseline_prompt: str | None = None, extra: Sequence[QueryCandidate] = ()
                   ) -> list[tuple[str, dict[str, Any]]]:
    """One query per row whose generated query is `generated[row]`: the best-scored candidate (greedy), or a draw
    from softmax(score / temperature) (sampled siblings); with the query info each decision reports (chosen
    source, candidates with scores, filter counts). `extra`: candidates built elsewhere (the hop planner's query),
    pooled with the grounded ones."""
    pool, filtered = grounded_candidates(view, passage_chars, max_bridges)
    pool = [*_keep(extra, earlier_queries(view), [], filtered), *pool]
    passages = _shown(view.passages, passage_chars)
    own = _keep([QueryCandidate(" ".join(g.split()), "generated") for g in generated],
                earlier_queries(view), passages, filtered)
    merged: dict[str, QueryCandidate] = {}
    for cand in [*own, *pool]:  # a generated query equal to a built one is reported as generated
        merged.setdefault(title_key(cand.text), cand)
    pool = list(merged.values())
    if not pool:
        info = {"mode": "grounded", "fallback": "no_candidate", "filtered": dict(filtered), "candidates": []}
        return [(g, {**info, "source": "generated"}) for g in generated]
    scores = score_candidates(backend, search_prompt, [c.text for c in pool])
    if baseline_prompt is not None:  # "pmi": what the evidence adds to the query's likelihood
        prior = score_candidates(backend, baseline_prompt, [c.text for c in pool])
        scores = [s - b for s, b in zip(scores, prior)]
    listed = [{"text": c.text, "source": c.source, "score": round(s, 4)} for c, s in zip(pool, scores)]
    if temperature <= 0:
        picks = [max(range(len(pool)), key=scores.__getitem__)] * len(generated)
    else:
        probs = torch.softmax(torch.tensor(scores, dtype=torch.float64) / temperature, dim=0)
        rng = torch.Generator().manual_seed(seed)
        picks = torch.multinomial(probs, len(generated), replacement=True, generator=rng).tolist()
    return [(pool[i].text, {"mode": "grounded", "source": pool[i].source, "score": round(scores[i], 4),
                            "filtered": dict(filtered), "candidates": listed}) for i in picks]
