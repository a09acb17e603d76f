"""The seven atomic evidence operations. Each is a function (state, context) -> new state; `execute` checks the
validity layer first, so an invalid operation raises `EnvStateError` and never runs.

- retrieve_more: fetch the initial ranking of the question on first use (`frontier_depth` documents from the
  initial retriever), then walk it from the cursor and append up to `docs_per_op` unseen documents.
- gap_query: search the targeted retriever with the recorded missing-information description.
- rewrite_query: search with the question expanded by pseudo-relevance feedback: the content terms found in the
  most evidence passages that are neither in the question nor in an earlier query (no LM call).
- bridge_entity_expand: search with the top bridge candidate (see `entities`) and the question words the evidence
  does not cover yet (`bridge_query_text`); the entity is then marked expanded.
- sufficiency_check: the LM judges support; when insufficient it records the gap (`recorded_gap`): with
  `gap_source = "uncovered"` the question's content words that no evidence passage contains, the LM's written
  description only when every word is covered; with `"lm"` always the LM's description (one more LM call).
  Why "uncovered" is the default: from the state after the first retrieve_more on HotpotQA / 2Wiki questions
  0-59 (pooled corpora), searching the 135M LM's description added 0.017 / 0.058 gold support on average, the
  uncovered words 0.083 / 0.096; the LM mostly copies a title or the question.
- stop_answer: terminate acquisition.
- compress_answer_evidence: the LM extracts mutually supporting sentences from the final context.
Targeted searches keep the top unseen documents in score order ("unseen": neither the pid nor the normalised
title is in the evidence). Every retrieval operation is one retrieval call, whether or not it found new documents.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Protocol, Sequence

from evorag_core.config import GAP_SOURCES, DynaKragConfig
from evorag_core.errors import ConfigError, EnvStateError
from evorag_core.types import Passage
from evorag_core.evidence.text import expansion_terms, title_key, uncovered_terms
from evorag_core.methods.dynakrag.lm import EvidenceLM, Usage
from evorag_core.methods.dynakrag.state import RETRIEVAL, EvidenceDoc, EvidenceState
from evorag_core.methods.dynakrag.validity import check_valid

__all__ = ["SearchHit", "Searcher", "OpContext", "OPS", "execute", "estimated_cost", "rewrite_query_text",
           "bridge_query_text", "recorded_gap", "final_context"]


class SearchHit(Protocol):
    pid: str
    score: float


class Searcher(Protocol):
    def search(self, query: str, k: int) -> Sequence[SearchHit]: ...


@dataclass(frozen=True)
class OpContext:
    cfg: DynaKragConfig
    initial: Searcher  # the initial ranking (retrieve_more)
    targeted: Searcher  # gap / rewrite / bridge queries
    passages: Mapping[str, Passage]  # pid -> passage of the corpus
    lm: EvidenceLM | None = None  # None: the LM operations raise

    def __post_init__(self) -> None:
        if self.cfg.gap_source not in GAP_SOURCES:
            raise ConfigError(f"dynakrag.gap_source must be one of {', '.join(GAP_SOURCES)}, got {self.cfg.gap_source!r}")


def final_context(state: EvidenceState, cfg: DynaKragConfig) -> tuple[Passage, ...]:
    """The documents the generator sees: the first `max_context_docs` in evidence order."""
    return state.passages[: cfg.max_context_docs]


def estimated_cost(state: EvidenceState, action: str, cfg: DynaKragConfig) -> float:
    """c(s, a): one unit per retrieval call, one per LM call plus its estimated prompt size in thousands of
    tokens (about four characters a token)."""
    if action in RETRIEVAL:
        return 1.0
    chars = sum(len(p.title) + min(len(p.text), cfg.passage_chars) + 8 for p in final_context(state, cfg))
    prompt = (len(state.question) + chars + 400) / 4000.0
    if action == "sufficiency_check":
        return 1.0 + prompt
    if action == "compress_answer_evidence":
        return 1.0 + prompt + cfg.compress_tokens / 1000.0
    return 0.0


def _add(state: EvidenceState, candidates: Sequence[tuple[str, float]], action: str, query: str,
         ctx: OpContext) -> tuple[tuple[EvidenceDoc, ...], int]:
    """Append up to docs_per_op unseen candidates; also returns how many candidates were consumed."""
    docs, seen, used = list(state.docs), set(state.seen), 0
    added = 0
    for pid, score in candidates:
        if added >= ctx.cfg.docs_per_op:
            break
        used += 1
        passage = ctx.passages.get(pid)
        if passage is None:
            raise EnvStateError(f"retriever returned pid {pid!r}, which is not in the corpus")
        if pid in seen or title_key(passage.title) in seen:
            continue
        docs.append(EvidenceDoc(passage, float(score), action, query))
        seen.update((pid, title_key(passage.title)))
        added += 1
    return tuple(docs), used


def _targeted(state: EvidenceState, ctx: OpContext, action: str, query: str, **changes) -> EvidenceState:
    k = ctx.cfg.docs_per_op + 2 * len(state.docs) + 5
    hits = ctx.targeted.search(query, k) if query.strip() else []
    docs, _ = _add(state, [(h.pid, h.score) for h in hits], action, query, ctx)
    return replace(state, docs=docs, query=query, queries=state.queries + (query,), retrieval_calls=state.retrieval_calls + 1,
                   last_added=len(docs) - len(state.docs), **changes)


def retrieve_more(state: EvidenceState, ctx: OpContext) -> EvidenceState:
    ranking, queries = state.ranking, state.queries
    if ranking is None:
        ranking = tuple((h.pid, float(h.score)) for h in ctx.initial.search(state.question, ctx.cfg.frontier_depth))
        queries = queries + (state.question,)
    docs, used = _add(state, ranking[state.cursor:], "retrieve_more", state.question, ctx)
    return replace(state, docs=docs, ranking=ranking, cursor=state.cursor + used, query=state.query or state.question,
                   queries=queries, retrieval_calls=state.retrieval_calls + 1, last_added=len(docs) - len(state.docs))


def gap_query(state: EvidenceState, ctx: OpContext) -> EvidenceState:
    return _targeted(state, ctx, "gap_query", state.missing)


def rewrite_query_text(state: EvidenceState) -> str:
    terms = expansion_terms(state.question, [f"{d.passage.title} {d.passage.text}" for d in state.docs],
                            exclude=state.queries)
    return " ".join([state.question, *terms])


def rewrite_query(state: EvidenceState, ctx: OpContext) -> EvidenceState:
    return _targeted(state, ctx, "rewrite_query", rewrite_query_text(state))


def bridge_query_text(state: EvidenceState) -> str:
    """The top bridge candidate followed by the question's content words that no evidence passage contains (what
    the next hop must still supply). From the state after the first retrieve_more on HotpotQA / 2Wiki questions
    0-59 (dense index, pooled corpora), mean gold support added: bare entity +0.033 / +0.083, this query +0.058 /
    +0.138. Entity + the whole question measured +0.092 / +0.104, but the question's words then outweigh the
    entity (with BM25, and on the demo set's look-alike pages it missed the bridge page)."""
    return " ".join(filter(None, (state.bridge_candidates[0], uncovered_terms(state.question, state.passages))))


def bridge_entity_expand(state: EvidenceState, ctx: OpContext) -> EvidenceState:
    entity = state.bridge_candidates[0]
    return _targeted(state, ctx, "bridge_entity_expand", bridge_query_text(state), expanded=state.expanded + (entity,))


def _need_lm(ctx: OpContext, action: str) -> EvidenceLM:
    if ctx.lm is None:
        raise EnvStateError(f"{action} needs a language model; this context has none")
    return ctx.lm


def _with_usage(state: EvidenceState, usage: Usage, **changes) -> EvidenceState:
    return replace(state, lm_calls=state.lm_calls + usage.calls, prompt_tokens=state.prompt_tokens + usage.prompt_tokens,
                   completion_tokens=state.completion_tokens + usage.completion_tokens, **changes)


def recorded_gap(question: str, context: Sequence[Passage], lm: EvidenceLM, cfg: DynaKragConfig) -> tuple[str, Usage]:
    """What an insufficient sufficiency_check records as missing (see the module docstring); no LM call when the
    uncovered question words make the gap."""
    if cfg.gap_source == "uncovered":
        terms = uncovered_terms(question, context)
        if terms:
            return terms, Usage()
    return lm.missing_info(question, context)


def sufficiency_check(state: EvidenceState, ctx: OpContext) -> EvidenceState:
    lm = _need_lm(ctx, "sufficiency_check")
    context = final_context(state, ctx.cfg)
    ok, p_yes, usage = lm.judge(state.question, context)
    missing = ""
    if not ok:
        missing, more = recorded_gap(state.question, context, lm, ctx.cfg)
        usage = usage + more
    return _with_usage(state, usage, sufficient=ok, p_sufficient=p_yes, missing=missing, probed_at=len(state.docs))


def stop_answer(state: EvidenceState, ctx: OpContext) -> EvidenceState:
    return replace(state, terminated=True)


def compress_answer_evidence(state: EvidenceState, ctx: OpContext) -> EvidenceState:
    snippets, usage = _need_lm(ctx, "compress_answer_evidence").compress(state.question, final_context(state, ctx.cfg))
    return _with_usage(state, usage, snippets=snippets)


OPS: dict[str, Callable[[EvidenceState, OpContext], EvidenceState]] = {
    "retrieve_more": retrieve_more,
    "gap_query": gap_query,
    "rewrite_query": rewrite_query,
    "bridge_entity_expand": bridge_entity_expand,
    "sufficiency_check": sufficiency_check,
    "stop_answer": stop_answer,
    "compress_answer_evidence": compress_answer_evidence,
}


def execute(state: EvidenceState, action: str, ctx: OpContext) -> EvidenceState:
    """Run `action` if the validity layer allows it (else `EnvStateError`); record it and its estimated cost."""
    check_valid(state, action, ctx.cfg)
    cost = estimated_cost(state, action, ctx.cfg)
    new = OPS[action](state, ctx)
    return replace(new, history=state.history + (action,), cost=state.cost + cost)
