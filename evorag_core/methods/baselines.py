"""Pipeline baselines sharing the agent's backend, retriever and evaluation code (a controlled comparison).

- `direct`: closed-book answer.
- `fixed-k`: one retrieval of the question (top-K), then answer.
- `ircot`: interleaved retrieval and chain of thought: each generated reasoning sentence is the next query,
  until a sentence gives the answer ("So the answer is: ...") or the iteration bound is reached.
- `self-ask`: the model asks follow-up questions; each is answered from retrieved passages; then the final answer.
Every LM call is greedy. `steps` counts retrieval calls (the retrieval depth).
Answers come from the shared reader (`answers.Reader`, `[answer] mode`). In span mode the reasoning chains of ircot
and self-ask steer retrieval only: their final answer is read from the passages they retrieved, as every method's is
(the generated "So the answer is: ..." text is not grounded); in free mode it is the chain's own text, as before.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from evorag_core.reader.prompt import ANSWER_SYSTEM, ANSWER_SYSTEM_CTX, clean_answer, render_passages
from evorag_core.reader.answers import Reader
from evorag_core.metrics import support_recall
from evorag_core.types import Passage, Question
from evorag_core.methods.base import MethodOptions, QuestionResult, score

if TYPE_CHECKING:
    from evorag_core.config import AnswerConfig
    from evorag_core.lm.base import PolicyBackend
    from evorag_core.retrieval.base import Retriever
    from evorag_core.runtime import Runtime

__all__ = ["BaselineConfig", "PipelineMethod", "BASELINES", "baseline_on", "build_baseline",
           "ANSWER_SYSTEM", "ANSWER_SYSTEM_CTX", "clean_answer", "render_passages"]  # re-exported from ..answers

IRCOT_SYSTEM = (
    "Answer the question step by step using the passages. Write one short reasoning sentence at a time. "
    "When you know the answer, write: So the answer is: <short answer>"
)
SELFASK_SYSTEM = (
    "Break the question into simple follow-up questions. Write 'Follow up: <question>' to ask one, "
    "or 'So the final answer is: <short answer>' when you know it."
)


@dataclass(frozen=True)
class BaselineConfig:
    k: int = 5  # passages per retrieval
    max_iterations: int = 4  # ircot / self-ask bound on retrieval rounds
    max_answer_tokens: int = 24
    max_thought_tokens: int = 48
    passage_chars: int = 300
    answer: AnswerConfig | None = None  # the reader's `config.AnswerConfig` (None: its defaults)


class PipelineMethod:
    """One baseline; `run_question` returns a QuestionResult with the retrieval trace (each SEARCH with the pids
    it found, so a stored evaluation episode shows them and its reader state can be replayed).
    `retriever_for(question)` gives (retriever, {pid: Passage}) for the question's corpus."""

    def __init__(self, name: str, backend: PolicyBackend,
                 retriever_for: Callable[[Question], tuple[Retriever, Mapping[str, Passage]]],
                 cfg: BaselineConfig = BaselineConfig(), gold_for: Callable[[Question], Iterable[str]] | None = None,
                 label: str | None = None):
        self.name = name
        self.label = label or name
        self.backend = backend
        self.retriever_for = retriever_for
        self.gold_for = gold_for or (lambda q: q.gold_pids)
        self.cfg = cfg
        self.reader = Reader(backend, cfg.answer, cfg.passage_chars, cfg.max_answer_tokens)

    # -- LM helpers ------------------------------------------------------------------------------------------
    def _gen(self, system: str, user: str, max_tokens: int, stop=("\n",)) -> str:
        prompt = self.backend.chat_prompt(system, user)
        return self.backend.generate(prompt, max_tokens, stop=stop, temperature=0.0, n=1)[0].text

    def _answer(self, question: str, passages: Sequence[Passage]) -> str:
        return self.reader.answer(question, passages)

    def _final(self, text: str, question: str, passages: Sequence[Passage]) -> str:
        """A reasoning chain's final answer: its own text in free mode, read from its passages in span mode."""
        return clean_answer(text) if self.reader.span is None else self._answer(question, passages)

    # -- the four pipelines ----------------------------------------------------------------------------------
    def _direct(self, q: Question, retrieve) -> tuple[str, list[dict]]:
        return self._answer(q.question, []), []

    def _fixed_k(self, q: Question, retrieve) -> tuple[str, list[dict]]:
        passages = retrieve(q.question)
        return self._answer(q.question, passages), [{"action": "SEARCH", "query": q.question}]

    def _ircot(self, q: Question, retrieve) -> tuple[str, list[dict]]:
        passages = list(retrieve(q.question))
        trace = [{"action": "SEARCH", "query": q.question}]
        thoughts: list[str] = []
        for _ in range(self.cfg.max_iterations):
            user = (f"{render_passages(passages, self.cfg.passage_chars)}\n\nQuestion: {q.question}\n"
                    f"Reasoning: {' '.join(thoughts)}")
            thought = " ".join(self._gen(IRCOT_SYSTEM, user, self.cfg.max_thought_tokens).split())
            if not thought:
                break
            thoughts.append(thought)
            if "answer is" in thought.lower():
                return self._final(thought.lower().split("answer is", 1)[1], q.question, passages), trace
            trace.append({"action": "SEARCH", "query": thought})
            seen = {p.pid for p in passages}
            passages += [p for p in retrieve(thought) if p.pid not in seen]
        return self._answer(q.question, passages), trace

    def _self_ask(self, q: Question, retrieve) -> tuple[str, list[dict]]:
        transcript = f"Question: {q.question}\nAre follow up questions needed here: Yes."
        trace: list[dict] = []
        read: dict[str, Passage] = {}
        for _ in range(self.cfg.max_iterations):
            line = " ".join(self._gen(SELFASK_SYSTEM, transcript, self.cfg.max_thought_tokens).split())
            low = line.lower()
            if "final answer" in low or not line:
                return self._final(line.split(":", 1)[1] if ":" in line else line, q.question,
                                   list(read.values())), trace
            follow = re.sub(r"^follow[\s-]*up\s*:\s*", "", line, flags=re.I).strip() or q.question
            trace.append({"action": "SEARCH", "query": follow})
            found = retrieve(follow)
            for p in found:
                read.setdefault(p.pid, p)
            inter = self._answer(follow, found)
            transcript += f"\nFollow up: {follow}\nIntermediate answer: {inter}."
        if self.reader.span is not None:
            return self._answer(q.question, list(read.values())), trace
        transcript += "\nSo the final answer is:"
        return clean_answer(self._gen(SELFASK_SYSTEM, transcript, self.cfg.max_answer_tokens)), trace

    def run_question(self, question: Question) -> QuestionResult:
        start = time.perf_counter()
        retriever, by_pid = self.retriever_for(question)
        retrieved: dict[str, Passage] = {}
        found: list[list[str]] = []  # each search's pids, in the order the searches ran

        def retrieve(query: str) -> list[Passage]:
            out = [by_pid[h.pid] for h in retriever.search(query, self.cfg.k)]
            for p in out:
                retrieved.setdefault(p.pid, p)
            found.append([p.pid for p in out])
            return out

        pipeline = {"direct": self._direct, "fixed-k": self._fixed_k, "ircot": self._ircot,
                    "self-ask": self._self_ask}[self.name]
        answer, trace = pipeline(question, retrieve)
        searches = [t for t in trace if t.get("action") == "SEARCH"]
        if len(searches) == len(found):  # every pipeline logs one SEARCH per retrieval: each keeps what it found
            trace = [{**t, "passages": found.pop(0)} if t.get("action") == "SEARCH" else t for t in trace]
        refused = not answer or answer.lower() in {"unknown", "i don't know", "none"}
        prediction = None if refused else answer
        em, f1 = score(question, prediction)
        return QuestionResult(
            question_id=question.id,
            dataset=question.dataset,
            question=question.question,
            prediction=prediction,
            gold=question.answers,
            em=em,
            f1=f1,
            steps=len(trace),
            passages=tuple(retrieved),
            support_recall=support_recall(retrieved, self.gold_for(question)),
            refused=refused,
            trace=tuple(trace) + ({"action": "ANSWER", "answer": answer},),
            format_valid=True,
            seconds=time.perf_counter() - start,
        )


BASELINES = ("direct", "fixed-k", "ircot", "self-ask")


def build_baseline(name: str, opts: MethodOptions, rt: Runtime) -> PipelineMethod:
    from evorag_core.lm.backends import load_backend

    backend, adapter = load_backend(rt, opts.adapter)
    if adapter:
        backend.activate(adapter)
    return baseline_on(name, backend, rt)


def baseline_on(name: str, backend: PolicyBackend, rt: Runtime) -> PipelineMethod:
    """Baseline `name` on an already loaded backend (several methods can share one model)."""
    cfg = BaselineConfig(k=rt.cfg.env.top_k, passage_chars=rt.cfg.policy.passage_chars,
                         max_answer_tokens=rt.cfg.policy.max_answer_tokens, answer=rt.cfg.answer)
    return PipelineMethod(name, backend, _RetrieverWithPassages(rt), cfg,
                          gold_for=lambda q: rt.corpus_for(q).gold_for(q),
                          label=f"{name} (LM {backend.model_id})")


class _RetrieverWithPassages:
    """retriever_for(question) -> (retriever over that question's corpus, pid -> Passage)."""

    def __init__(self, rt: Runtime):
        self.rt = rt

    def __call__(self, question: Question):
        corpus = self.rt.corpus_for(question)
        return self.rt.retrieval.retriever_for(corpus), {p.pid: p for p in corpus.passages}
