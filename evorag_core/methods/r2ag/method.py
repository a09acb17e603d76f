"""The `r2ag` evaluation method: grow the retrieval tree for a question, answer from its retrieved set.

The tree grows with the configured steering (`[r2ag] steering = "lm"`: the policy LM of `[policy]`, optionally with
`--adapter`; `"scripted"`: `ScriptedSteering`), over the question's corpus (`env.corpus`) and the `[r2ag] retriever`
of the shared retrieval service. The answer comes from the shared reader (`evorag_core.reader.answers`, the prompt every
method answers with) over the first `answer_docs` passages of the tree in order of retrieval. Gold pids only
annotate the tree (rewards, hits) for the result's extras; they steer nothing.

`QuestionResult.steps` = tree iterations; `passages` = every pid the tree retrieved; `extras["metrics"]` holds the
per-question retrieval numbers (averaged into the summary), `extras["tree"]` the whole tree as JSON.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Sequence

from evorag_core.reader.answers import Reader
from evorag_core.errors import ConfigError
from evorag_core.metrics import support_recall
from evorag_core.types import Corpus, Passage, Question
from evorag_core.methods.base import MethodOptions, QuestionResult, score
from evorag_core.methods.r2ag.metrics import SR_KS, list_metrics
from evorag_core.methods.r2ag.rewards import RewardWeights
from evorag_core.methods.r2ag.scripted import ScriptedSteering
from evorag_core.methods.r2ag.steering import LMSteering, Steering
from evorag_core.methods.r2ag.tree import Tree, TreeSettings, grow, new_tree

if TYPE_CHECKING:
    from evorag_core.config import AnswerConfig, R2agConfig
    from evorag_core.lm.base import PolicyBackend
    from evorag_core.retrieval.base import Retriever
    from evorag_core.runtime import Runtime

__all__ = ["answer_from_passages", "make_steering", "TreeBuilder", "R2agMethod", "build_r2ag_method",
           "build_tree_builder", "STEERINGS"]

STEERINGS = ("lm", "scripted")


def answer_from_passages(backend: PolicyBackend, question: str, passages: Sequence[Passage], *, max_tokens: int = 24,
                         chars: int = 300, answer_cfg: AnswerConfig | None = None) -> str:
    """The shared reader (`evorag_core.reader.answers.Reader`, `answer_cfg` an `AnswerConfig`, None: its defaults): a span
    of the passages / yes / no / "" (refusal) in span mode, greedy cleaned text in free mode."""
    return Reader(backend, answer_cfg, chars, max_tokens).answer(question, passages)


def make_steering(cfg: R2agConfig, backend: PolicyBackend | None) -> Steering:
    """The steering named by `cfg.steering` ("lm" needs `backend`)."""
    if cfg.steering == "scripted":
        return ScriptedSteering()
    if cfg.steering == "lm":
        if backend is None:
            raise ConfigError("r2ag.steering = 'lm' needs a policy backend")
        return LMSteering.from_config(backend, cfg)
    raise ConfigError(f"r2ag.steering must be one of {', '.join(STEERINGS)}, got {cfg.steering!r}")


class TreeBuilder:
    """grow(question, gold) -> Tree over the question's corpus: `corpus_for(question)` and `retriever_for(corpus)`
    supply them (pid -> Passage lookups are cached per corpus)."""

    def __init__(self, steering: Steering, cfg: R2agConfig, corpus_for: Callable[[Question], Corpus],
                 retriever_for: Callable[[Corpus], Retriever]) -> None:
        self.steering, self.cfg = steering, cfg
        self.settings, self.weights = TreeSettings.from_config(cfg), RewardWeights.from_config(cfg)
        self.corpus_for, self.retriever_for = corpus_for, retriever_for
        self._lookup: tuple[Corpus, dict[str, Passage]] | None = None

    def passages(self, corpus: Corpus) -> dict[str, Passage]:
        if self._lookup is None or self._lookup[0] is not corpus:
            self._lookup = (corpus, {p.pid: p for p in corpus.passages})
        return self._lookup[1]

    def grow(self, question: Question, gold: frozenset[str] = frozenset()) -> Tree:
        corpus = self.corpus_for(question)
        return grow(new_tree(question.question, gold, question.id), self.steering, self.retriever_for(corpus),
                    self.passages(corpus), self.settings, self.weights)


class R2agMethod:
    name = "r2ag"

    def __init__(self, builder: TreeBuilder, answerer: PolicyBackend, label: str | None = None,
                 answer_cfg: AnswerConfig | None = None) -> None:
        self.builder, self.answerer = builder, answerer  # answerer: a PolicyBackend (chat_prompt + generate)
        self.answer_cfg = answer_cfg  # the shared reader's AnswerConfig (None: its defaults)
        self.label = label or f"R2AG[{builder.steering.name}]"

    @property
    def backend(self) -> PolicyBackend:
        return self.answerer

    def run_question(self, question: Question) -> QuestionResult:
        start = time.perf_counter()
        corpus = self.builder.corpus_for(question)
        gold = corpus.gold_for(question)
        tree = self.builder.grow(question, gold)
        grown = time.perf_counter() - start
        pids = tree.retrieved()
        lookup = self.builder.passages(corpus)
        context = [lookup[p] for p in pids[: self.builder.cfg.answer_docs]]
        answer = answer_from_passages(self.answerer, question.question, context,
                                      chars=self.builder.cfg.passage_chars, answer_cfg=self.answer_cfg)
        prediction = answer or None
        em, f1 = score(question, prediction)
        m = list_metrics(pids, gold)
        metrics = {"r2ag_recall": m.recall, "r2ag_full_recall": m.full_recall, "r2ag_docs": float(m.docs),
                   "r2ag_ap": m.ap, "r2ag_iterations": float(tree.iterations), "r2ag_tree_s": grown,
                   **{f"r2ag_recall@{k}": list_metrics(pids[:k], gold).recall for k in SR_KS}}
        return QuestionResult(
            question_id=question.id, dataset=question.dataset, question=question.question, prediction=prediction,
            gold=question.answers, em=em, f1=f1, steps=tree.iterations, passages=pids,
            support_recall=support_recall(pids, gold), refused=prediction is None,
            trace=tuple({"t": e.iteration, "action": "EXPAND", "node": e.node, "queries": [q for _, q in
                        e.parsed.queries], "stop": e.parsed.stop} for e in tree.expansions),
            format_valid=all(e.parsed.has_think and not e.parsed.malformed for e in tree.expansions),
            fallback=sum(1 for e in tree.expansions if not e.parsed.queries and not e.parsed.stop),
            seconds=time.perf_counter() - start,
            extras={"metrics": metrics, "tree": tree.to_dict(), "answer_context": [p.pid for p in context]},
        )


def build_r2ag_method(opts: MethodOptions, rt: Runtime) -> R2agMethod:
    """`evorag eval --method r2ag [--adapter NAME|FOLDER] [--set r2ag.steering=scripted]`: the policy LM answers
    (and steers, with steering = "lm")."""
    from evorag_core.lm.backends import load_backend

    cfg = rt.cfg.r2ag
    backend, adapter = load_backend(rt, opts.adapter)
    if adapter:
        backend.activate(adapter)
    steering = make_steering(cfg, backend)
    builder = TreeBuilder(steering, cfg, rt.corpus_for, lambda corpus: rt.retrieval.retriever_for(corpus, cfg.retriever))
    label = f"R2AG[{steering.name}] (LM {backend.model_id}" + (f" + adapter {adapter})" if adapter else ")")
    return R2agMethod(builder, backend, label, rt.cfg.answer)


def build_tree_builder(rt: Runtime, adapter: str | None = None) -> TreeBuilder:
    """The tree builder of a Runtime (`evorag retrieval-eval --method r2ag`): the policy LM is loaded only for
    steering = "lm"."""
    from evorag_core.lm.backends import load_backend

    cfg = rt.cfg.r2ag
    backend = None
    if cfg.steering == "lm":
        backend, name = load_backend(rt, adapter)
        if name:
            backend.activate(name)
    return TreeBuilder(make_steering(cfg, backend), cfg, rt.corpus_for,
                       lambda corpus: rt.retrieval.retriever_for(corpus, cfg.retriever))
