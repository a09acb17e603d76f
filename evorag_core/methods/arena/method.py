"""ARENA (seed 004): a traceable generator that answers from numbered references and cites them.

- `ArenaGenerator(backend, cfg).generate(question, passages) -> ArenaOutput`: prompt (`arena_prompt`), one reply
  from the policy LM (greedy unless cfg.temperature > 0; no stop string, the reply ends at the end-of-turn token,
  so text after `</answer>` makes the format fail as the paper's format reward does), strict parse
  (`arena_parse`) and the answer used for evaluation (the `<answer>` part, else a lenient extraction, flagged).
- `arena_answer(backend, question, passages)`: the EVO-RAG agent's ANSWER step (`agent --answerer arena`).
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
from dataclasses import dataclass
from typing import Any, Sequence

from evorag_core.errors import ConfigError
from evorag_core.evaluation.metrics import exact_match, f1_score, support_recall
from evorag_core.types import Passage, Question
from evorag_core.methods.arena.parse import ArenaParse, lenient_answer, parse_arena
from evorag_core.methods.arena.prompt import ArenaConfig, build_prompt
from evorag_core.methods.arena.rewards import ArenaReward, arena_reward, gold_reference_ids
from evorag_core.methods.base import QuestionResult

__all__ = [
    "ArenaOutput",
    "ArenaGenerator",
    "arena_answer",
    "ArenaMethod",
    "build_arena_method",
    "span_reader",
    "METRIC_KEYS",
]

METRIC_KEYS = ("format_score", "accuracy_score", "relevance_score", "bonus_score", "reward")


@dataclass(frozen=True)
class ArenaOutput:
    prompt: str
    text: str  # the raw reply
    references: tuple[Passage, ...]  # reference i is references[i - 1]
    parsed: ArenaParse
    answer: str | None  # the <answer> part, else the lenient extraction; None when nothing was found
    fallback: bool  # the answer came from the lenient extraction (or is missing)
    finish_reason: str  # stop | length
    logprob: float  # log P(reply | prompt) under the model
    tokens: int
    token_ids: tuple[int, ...] = ()  # the reply's token ids as sampled (end-of-turn token not included)

    @property
    def selected(self) -> tuple[Passage, ...]:
        """References listed in <relevance> that exist (1..n), in the listed order."""
        return tuple(self.references[i - 1] for i in (self.parsed.relevance or ()) if 1 <= i <= len(self.references))

    @property
    def cited(self) -> tuple[Passage, ...]:
        """References cited as [i] in the analysis that exist."""
        return tuple(self.references[i - 1] for i in self.parsed.citations if 1 <= i <= len(self.references))

    @property
    def supporting(self) -> tuple[Passage, ...]:
        """The references the reply rests on: those listed in <relevance> when that list is readable, else those
        cited as [i] in the analysis."""
        return self.selected if self.parsed.relevance is not None else self.cited

    def details(self) -> dict[str, Any]:
        """JSON-ready record of the reply (kept with an evaluation result or an agent's ANSWER step): the raw
        text, the references' pids in their numbering, the parsed parts, the supporting pids, and where the
        format failed (None: well-formed)."""
        p = self.parsed
        return {
            "text": self.text,
            "references": [r.pid for r in self.references],
            "relevance": list(p.relevance) if p.relevance is not None else None,
            "analysis": p.analysis,
            "citations": list(p.citations),
            "answer_part": p.answer,
            "selected": [r.pid for r in self.supporting],
            "format_ok": p.ok,
            "failure": {"part": p.failure.part, "reason": p.failure.reason} if p.failure else None,
            "lenient_answer": self.fallback,
            "finish_reason": self.finish_reason,
            "tokens": self.tokens,
        }


class ArenaGenerator:
    def __init__(self, backend: Any, cfg: ArenaConfig | None = None) -> None:
        self.backend = backend  # a PolicyBackend (chat_prompt + generate)
        self.cfg = cfg if cfg is not None else ArenaConfig()

    def prompt(self, question: str, passages: Sequence[Passage]) -> str:
        return build_prompt(self.backend, question, passages, self.cfg)

    def generate(self, question: str, passages: Sequence[Passage], *, seed: int | None = None) -> ArenaOutput:
        """One reply at cfg.temperature (0: greedy)."""
        return self.sample(question, passages, 1, self.cfg.temperature, seed=seed)[0]

    def sample(
        self, question: str, passages: Sequence[Passage], n: int, temperature: float, *, seed: int | None = None
    ) -> list[ArenaOutput]:
        """`n` replies decoded as one batch (the prompt runs once)."""
        refs = tuple(passages)
        prompt = self.prompt(question, refs)
        gens = self.backend.generate(prompt, self.cfg.max_new_tokens, temperature=temperature, n=n, seed=seed)
        return [self.output(prompt, refs, g.text, g.finish_reason, g.logprob, g.token_ids) for g in gens]

    @staticmethod
    def output(prompt: str, refs: tuple[Passage, ...], text: str, finish: str = "stop", logprob: float = 0.0,
               token_ids: Sequence[int] = ()) -> ArenaOutput:
        """Parse a reply `text` to `prompt` over `refs` (also for replies produced elsewhere, e.g. stored ones)."""
        parsed = parse_arena(text, len(refs))
        answer, fallback = lenient_answer(text)
        return ArenaOutput(prompt, text, refs, parsed, answer, fallback, finish, logprob, len(token_ids),
                           tuple(token_ids))


def arena_answer(
    backend: Any, question: str, passages: Sequence[Passage], cfg: ArenaConfig | None = None
) -> tuple[str | None, tuple[str, ...], ArenaOutput]:
    """The agent's ANSWER step: (answer, cited pids, output).

    The pids are those of the references listed in <relevance> (valid numbers only); when that list is missing or
    unreadable, those cited as [i] in the analysis. `answer` is None when the reply holds no answer at all; the
    caller decides what to do then (e.g. REFUSE). `passages` are the ones the agent gathered, numbered 1..n.
    """
    output = ArenaGenerator(backend, cfg).generate(question, passages)
    return output.answer, tuple(p.pid for p in output.supporting), output


class ArenaMethod:
    """The `arena` evaluation method (per-question setting); see the module docstring."""

    name = "arena"

    def __init__(self, generator: ArenaGenerator, label: str | None = None, reader: Any = None) -> None:
        self.generator = generator
        self.label = label or "ARENA"
        self.reader = reader  # an answers.Reader: arena.answer_span (None: the generated <answer> is the answer)

    @property
    def backend(self) -> Any:
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
            details.update(generated_answer=out.answer, generated_em=_em(out.answer, question.answers),
                           generated_f1=_f1(out.answer, question.answers),
                           span_evidence=[p.pid for p in evidence], span_evidence_from=source)
        return QuestionResult(
            question_id=question.id,
            dataset=question.dataset,
            question=question.question,
            prediction=answer,
            gold=question.answers,
            em=_em(answer, question.answers),
            f1=_f1(answer, question.answers),
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


def _em(answer: str | None, gold: Sequence[str]) -> float:
    return exact_match(answer, gold) if answer else 0.0


def _f1(answer: str | None, gold: Sequence[str]) -> float:
    return f1_score(answer, gold) if answer else 0.0


def _span_evidence(out: ArenaOutput) -> tuple[tuple[Passage, ...], str]:
    """The passages the span reader answers from: those the reply rests on, else all the references."""
    if out.supporting:
        return out.supporting, "relevance" if out.parsed.relevance is not None else "citations"
    return out.references, "all"


def span_reader(backend: Any, answer_cfg: Any, cfg: ArenaConfig, max_tokens: int = 24) -> Any:
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

def build_arena_method(args: Any, rt: Any) -> ArenaMethod:
    """`evorag eval --method arena [--adapter NAME|FOLDER]`: the policy LM of `[policy]` (backend, device, dtype,
    threads; loaded as the agent method loads it); references cut to `policy.passage_chars` characters (0: full
    text); greedy replies; with `arena.answer_span` the final answer is the span reader's (module docstring)."""
    from evorag_core.methods.agent import load_backend

    missing = [q.id for q in rt.dataset.questions if not q.passages]
    if missing:
        raise ConfigError(f"--method arena needs questions with their own passages; {len(missing)} have none "
                          f"(e.g. {missing[0]})")
    backend, name = load_backend(rt, getattr(args, "adapter", None))
    backend.activate(name)
    label = f"ARENA {backend.model_id}" + (f" + adapter {name}" if name else "")
    cfg = ArenaConfig(passage_chars=rt.cfg.policy.passage_chars)
    reader = None
    if rt.cfg.arena.answer_span:
        reader = span_reader(backend, rt.cfg.answer, cfg, rt.cfg.policy.max_answer_tokens)
        label += ", span answers"
    return ArenaMethod(ArenaGenerator(backend, cfg), label, reader)
