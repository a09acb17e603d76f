"""ARENA (seed 004): a traceable generator that answers from numbered references and cites them.

- The generator (`ArenaGenerator`, `ArenaOutput`, `arena_answer`), its prompt and parser are readers: they live in
  `evorag_core.reader.arena`.
- `ArenaMethod`: the `arena` evaluation method in the per-question (distractor) setting: the references are the
  question's own passages in the data set's order; its results carry the four rewards as `extras["metrics"]`
  (averaged into the summary by `evaluation.summarize`) and the parsed parts as `extras["arena"]`.
- `arena.answer_span = true` (`ArenaMethod(..., reader=span_reader(...))`): the reply is generated and parsed as
  always (format, relevance and the rewards are the reply's), but the final answer is the shared reader's
  (`answers.Reader`, span mode, `[answer]` settings: a passage span, yes/no, or "" = refusal) over the references
  the reply rests on (`ArenaOutput.supporting`: those listed in <relevance>, else those cited as [i]; all the
  references when it names none). The generated answer stays in `extras["arena"]` (`generated_answer`,
  `generated_em`, `generated_f1`) with the reader's evidence (`span_evidence`, `span_evidence_from`).
  Measured in docs/answers.md ("ARENA with span answers").
"""
from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Sequence

from evorag_core.errors import ConfigError
from evorag_core.metrics import support_recall
from evorag_core.types import Passage, Question
from evorag_core.reader.arena.prompt import ArenaConfig
from evorag_core.methods.arena.rewards import ArenaReward, arena_reward, gold_reference_ids
from evorag_core.methods.base import MethodOptions, QuestionResult, score
from evorag_core.reader.arena.generator import ArenaGenerator, ArenaOutput

if TYPE_CHECKING:
    from evorag_core.config import AnswerConfig
    from evorag_core.lm.base import PolicyBackend
    from evorag_core.reader.answers import Reader
    from evorag_core.runtime import Runtime

__all__ = [
    "ArenaMethod",
    "build_arena_method",
    "span_reader",
    "METRIC_KEYS",
]

METRIC_KEYS = ("format_score", "accuracy_score", "relevance_score", "bonus_score", "reward")


class ArenaMethod:
    """The `arena` evaluation method (per-question setting); see the module docstring."""

    name = "arena"

    def __init__(self, generator: ArenaGenerator, label: str | None = None, reader: Reader | None = None) -> None:
        self.generator = generator
        self.label = label or "ARENA"
        self.reader = reader  # an answers.Reader: arena.answer_span (None: the generated <answer> is the answer)

    @property
    def backend(self) -> PolicyBackend:
        return self.generator.backend

    def run_question(self, question: Question) -> QuestionResult:
        if not question.passages:
            raise ConfigError(f"question {question.id}: ARENA needs the question's own passages (none in the data)")
        start = time.perf_counter()
        out = self.generator.generate(question.question, question.passages)
        gold_ids = gold_reference_ids([p.pid for p in question.passages], question.gold_pids)
        cfg = self.generator.cfg
        reward = arena_reward(out.parsed, question.answers, gold_ids, accuracy=cfg.accuracy, bonus=cfg.bonus)
        selected = tuple(p.pid for p in out.selected)
        details = _details(out, gold_ids, reward)
        answer = out.answer
        if self.reader is not None:
            evidence, source = _span_evidence(out)
            answer = self.reader.answer(question.question, evidence)
            generated_em, generated_f1 = score(question, out.answer or None)
            details.update(generated_answer=out.answer, generated_em=generated_em, generated_f1=generated_f1,
                           span_evidence=[p.pid for p in evidence], span_evidence_from=source)
        em, f1 = score(question, answer or None)
        return QuestionResult(
            question_id=question.id,
            dataset=question.dataset,
            question=question.question,
            prediction=answer,
            gold=question.answers,
            em=em,
            f1=f1,
            steps=1,
            passages=selected,  # the references the reply selected in <relevance>
            support_recall=support_recall(selected, question.gold_pids),
            refused=self.reader is not None and not answer,  # the span reader's refusal ("")
            trace=({"t": 1, "action": "ANSWER", "argument": answer or ""},),
            format_valid=out.parsed.ok,
            fallback=int(out.fallback),
            seconds=time.perf_counter() - start,
            extras={"metrics": _metrics(reward), "arena": details},
        )


def _span_evidence(out: ArenaOutput) -> tuple[tuple[Passage, ...], str]:
    """The passages the span reader answers from: those the reply rests on, else all the references."""
    if out.supporting:
        return out.supporting, "relevance" if out.parsed.relevance is not None else "citations"
    return out.references, "all"


def span_reader(backend: PolicyBackend, answer_cfg: AnswerConfig | None, cfg: ArenaConfig, max_tokens: int = 24
                ) -> Reader:
    """The shared reader in span mode with `answer_cfg`'s other settings (a `config.AnswerConfig`; None: the
    defaults), its passages cut as ARENA cuts its references (`cfg.passage_chars`; 0 = the full text)."""
    from evorag_core.reader.answers import Reader
    from evorag_core.config import AnswerConfig

    answer_cfg = dataclasses.replace(answer_cfg if answer_cfg is not None else AnswerConfig(), mode="span")
    return Reader(backend, answer_cfg, cfg.passage_chars or _FULL_TEXT, max_tokens)


_FULL_TEXT = 10**9  # a passage cut that keeps every character


def _metrics(reward: ArenaReward) -> dict[str, float]:
    return dict(zip(METRIC_KEYS, (reward.format, reward.accuracy, reward.relevance, reward.bonus, reward.total)))


def _details(out: ArenaOutput, gold_ids: Sequence[int], reward: ArenaReward) -> dict[str, Any]:
    return {**out.details(), "gold_ids": list(gold_ids), "reward": reward.to_dict()}


# -- the eval command's builder ------------------------------------------------------------------------------

def build_arena_method(opts: MethodOptions, rt: Runtime) -> ArenaMethod:
    """`evorag eval --method arena [--adapter NAME|FOLDER]`: the policy LM of `[policy]` (backend, device, dtype,
    threads; loaded as the agent method loads it); references cut to `policy.passage_chars` characters (0: full
    text); greedy replies; with `arena.answer_span` the final answer is the span reader's (module docstring)."""
    from evorag_core.lm.backends import load_backend

    missing = [q.id for q in rt.dataset.questions if not q.passages]
    if missing:
        raise ConfigError(f"--method arena needs questions with their own passages; {len(missing)} have none "
                          f"(e.g. {missing[0]})")
    backend, name = load_backend(rt, opts.adapter)
    backend.activate(name)
    label = f"ARENA {backend.model_id}" + (f" + adapter {name}" if name else "")
    cfg = ArenaConfig(passage_chars=rt.cfg.policy.passage_chars)
    reader = None
    if rt.cfg.arena.answer_span:
        reader = span_reader(backend, rt.cfg.answer, cfg, rt.cfg.policy.max_answer_tokens)
        label += ", span answers"
    return ArenaMethod(ArenaGenerator(backend, cfg), label, reader)
