"""DynaKrag inference (paper Algorithm 1) and the `dynakrag` evaluation method.

    s = s_0
    loop: A = valid_actions(s); a = controller.choose(s, A); s = execute(s, a); stop after stop_answer
    if compress_answer_evidence is valid: s = execute(s, compress)
    answer = G(question, snippets or the final context)

The loop always ends: every other operation is a control step, and after `max_steps` of them only stop_answer
is valid. Ablations are config flags: `controller = "uniform"`, `sufficiency = false`, `compression = false`,
`retrieval_cap = 1..4` (`evorag eval --method dynakrag --set dynakrag.controller=uniform`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from evorag_core.config import DynaKragConfig
from evorag_core.errors import ConfigError
from evorag_core.metrics import support_recall
from evorag_core.types import Corpus, Question
from evorag_core.methods.base import MethodOptions, QuestionResult, score
from evorag_core.methods.dynakrag.controller import Controller, Decision, LearnedController, UniformController, load_models, model_folder
from evorag_core.methods.dynakrag.lm import EvidenceLM, Usage
from evorag_core.methods.dynakrag.ops import OpContext, execute, final_context
from evorag_core.methods.dynakrag.state import ACTIONS, RETRIEVAL, EvidenceState, initial_state
from evorag_core.methods.dynakrag.validity import valid_actions

if TYPE_CHECKING:
    from evorag_core.lm.base import PolicyBackend
    from evorag_core.runtime import Runtime

__all__ = ["StepTrace", "Episode", "control_step", "finish_episode", "run_dynakrag", "DynaKragMethod", "build_dynakrag_method", "method_label",
           "episode_metrics"]


@dataclass(frozen=True)
class StepTrace:
    t: int
    valid: tuple[str, ...]
    scores: Mapping[str, float]
    action: str
    before: Mapping[str, Any]  # EvidenceState.summary() before the action
    query: str  # the query issued by the action ("" when none)
    added: tuple[str, ...]  # pids the action added
    continuation: float | None = None
    stop_suppressed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "action": self.action, "valid": list(self.valid),
                "scores": {a: round(v, 6) for a, v in self.scores.items()}, "query": self.query,
                "added": list(self.added), "continuation": self.continuation, "stop_suppressed": self.stop_suppressed,
                "state": dict(self.before)}


@dataclass(frozen=True)
class Episode:
    state: EvidenceState  # after acquisition (and compression)
    steps: tuple[StepTrace, ...]
    answer: str
    stop_reason: str  # "stop_answer" (chosen) or "max_steps" (only stop was valid)


def _step(state: EvidenceState, action: str, ctx: OpContext, t: int, valid: tuple[str, ...],
          decision: Decision | None = None) -> tuple[EvidenceState, StepTrace]:
    new = execute(state, action, ctx)
    added = new.pids[len(state.pids):]
    query = new.query if action in RETRIEVAL else ""
    if decision is None:  # the terminal compression is not a controller choice
        return new, StepTrace(t, valid, {}, action, state.summary(), query, added)
    return new, StepTrace(t, valid, decision.scores, action, state.summary(), query, added, decision.continuation,
                          decision.stop_suppressed)


def control_step(state: EvidenceState, ctx: OpContext, controller: Controller, t: int
                 ) -> tuple[EvidenceState, StepTrace, str | None]:
    """One controller decision and its operation: (the new state, its trace, the stop reason once stop_answer ran:
    "stop_answer" (chosen), "max_steps" or "nothing_valid" (stop was all that was left); None otherwise)."""
    valid = valid_actions(state, ctx.cfg)
    decision = controller.choose(state, valid)
    new, trace = _step(state, decision.action, ctx, t, valid, decision)
    if decision.action != "stop_answer":
        return new, trace, None
    if valid == ("stop_answer",):
        return new, trace, "max_steps" if state.steps >= ctx.cfg.max_steps else "nothing_valid"
    return new, trace, "stop_answer"


def finish_episode(state: EvidenceState, ctx: OpContext, t: int) -> tuple[EvidenceState, StepTrace | None, str]:
    """After stop_answer: the terminal compression when it is valid (its trace, else None), then the answer."""
    if ctx.lm is None:
        raise ValueError("finishing a DynaKrag episode needs OpContext.lm to answer")
    trace = None
    valid = valid_actions(state, ctx.cfg)
    if "compress_answer_evidence" in valid:
        state, trace = _step(state, "compress_answer_evidence", ctx, t, valid)
    answer, usage = ctx.lm.answer(state.question, final_context(state, ctx.cfg), state.snippets)
    return _add_usage(state, usage), trace, answer


def run_dynakrag(question: str, ctx: OpContext, controller: Controller) -> Episode:
    if ctx.lm is None:
        raise ValueError("run_dynakrag needs OpContext.lm to answer")
    state, steps, reason = initial_state(question), [], None
    while reason is None:
        state, trace, reason = control_step(state, ctx, controller, len(steps) + 1)
        steps.append(trace)
    state, trace, answer = finish_episode(state, ctx, len(steps) + 1)
    if trace is not None:
        steps.append(trace)
    return Episode(state, tuple(steps), answer, reason)


def _add_usage(state: EvidenceState, usage: Usage) -> EvidenceState:
    return replace(state, lm_calls=state.lm_calls + usage.calls, prompt_tokens=state.prompt_tokens + usage.prompt_tokens,
                   completion_tokens=state.completion_tokens + usage.completion_tokens)


def episode_metrics(ep: Episode, cfg: DynaKragConfig) -> dict[str, float]:
    """Per-question efficiency numbers (averaged by `evaluate`'s summary): tokens, calls, action composition."""
    s = ep.state
    out = {"tokens": float(s.prompt_tokens + s.completion_tokens), "prompt_tokens": float(s.prompt_tokens),
           "completion_tokens": float(s.completion_tokens), "retrieval_calls": float(s.retrieval_calls),
           "lm_calls": float(s.lm_calls), "cost": s.cost, "context_docs": float(len(final_context(s, cfg))),
           "exhausted": float(s.retrieval_calls >= cfg.retrieval_cap)}
    out.update({f"n_{a}": float(s.count(a)) for a in ACTIONS})
    return out


def method_label(cfg: DynaKragConfig) -> str:
    parts = [cfg.controller]
    if not cfg.sufficiency:
        parts.append("no-sufficiency")
    if not cfg.compression:
        parts.append("no-compression")
    parts.append(f"cap={cfg.retrieval_cap}")
    return f"DynaKrag[{', '.join(parts)}]"


class DynaKragMethod:
    """`run_question(question) -> QuestionResult`; `context_for(question) -> OpContext` supplies the corpus's
    retrievers and passages, `gold_for(question)` the canonical gold pids (for support recall only)."""

    name = "dynakrag"

    def __init__(self, cfg: DynaKragConfig, controller: Controller, context_for: Callable[[Question], OpContext],
                 gold_for: Callable[[Question], frozenset[str]], label: str | None = None):
        self.cfg, self.controller = cfg, controller
        self.context_for, self.gold_for = context_for, gold_for
        self.label = label or method_label(cfg)

    def run_question(self, question: Question) -> QuestionResult:
        start = time.perf_counter()
        ep = run_dynakrag(question.question, self.context_for(question), self.controller)
        em, f1 = score(question, ep.answer)
        pids = ep.state.pids
        return QuestionResult(
            question_id=question.id, dataset=question.dataset, question=question.question, prediction=ep.answer,
            gold=question.answers, em=em, f1=f1, steps=ep.state.steps, passages=pids,
            support_recall=support_recall(pids, self.gold_for(question)), refused=False,
            trace=tuple(t.to_dict() for t in ep.steps), seconds=time.perf_counter() - start,
            extras={"metrics": episode_metrics(ep, self.cfg),
                    "dynakrag": {"controller": self.controller.name, "stop_reason": ep.stop_reason,
                                 "snippets": list(ep.state.snippets or ()), "final": ep.state.summary()}},
        )


def _controller(cfg: DynaKragConfig, home: Path) -> Controller:
    if cfg.controller == "uniform":
        return UniformController(cfg.seed)
    if cfg.controller == "learned":
        return LearnedController(load_models(model_folder(cfg, home)), cfg)
    raise ConfigError(f"dynakrag.controller must be 'learned' or 'uniform', got {cfg.controller!r}")


def make_context_factory(rt: Runtime, cfg: DynaKragConfig, lm: EvidenceLM | None) -> Callable[[Question], OpContext]:
    """OpContext per question from a Runtime: its corpus (pooled or per-question), retrievers and passages."""
    lookups: dict[int, tuple[Corpus, dict]] = {}

    def context_for(question: Question) -> OpContext:
        corpus = rt.corpus_for(question)
        cached = lookups.get(id(corpus))
        if cached is None or cached[0] is not corpus:
            cached = (corpus, {p.pid: p for p in corpus.passages})
            lookups[id(corpus)] = cached
        return OpContext(cfg, rt.retrieval.retriever_for(corpus, cfg.initial_retriever),
                         rt.retrieval.retriever_for(corpus, cfg.targeted_retriever), cached[1], lm)

    return context_for


def build_dynakrag_method(opts: MethodOptions, rt: Runtime, backend: PolicyBackend | None = None) -> DynaKragMethod:
    """`evorag eval --method dynakrag`: `[dynakrag]` settings (ablations with --set), the policy LM of `[policy]`
    (greedy; `policy.backend` picks transformers or vLLM), the trained controller in `home/<model_dir>` unless `controller = "uniform"`."""
    cfg = rt.cfg.dynakrag
    controller = _controller(cfg, rt.home)  # fail on a missing model before loading the LM
    if backend is None:
        from evorag_core.lm.backends import policy_backend

        backend = policy_backend(rt.cfg.policy, rt.home)
    lm = EvidenceLM(backend, cfg, rt.cfg.answer)
    return DynaKragMethod(cfg, controller, make_context_factory(rt, cfg, lm),
                          lambda q: rt.corpus_for(q).gold_for(q))
