"""`LMPolicy`: the agent's decisions from a `PolicyBackend`.

One decision = (1) a constrained choice of the action: the four labels of `prompts.LABELS` are scored as
continuations of the prompt, so the action is always well-formed; greedy takes the best allowed label, sampling
draws from softmax(score / temperature) over the allowed labels; (2) for SEARCH and ANSWER, the argument is
generated after the label (stop at a newline or end of turn, at most `max_query_tokens` / `max_answer_tokens`).
The completion string (e.g. "SEARCH: who wrote Hamlet") has log-prob `action_logprob + argument_logprob` =
`backend.sequence_logprob(prompt, completion)`: `action_logprob` is the LM's log-prob of the label tokens, not the
masked/tempered distribution the label was drawn from (that one is `choice_probs`).

Constraints (`PolicyConfig.constrain_actions`, on by default; they use only what the agent can see, never gold
data, and at least one action always stays allowed):
- BACKTRACK is masked while the active chain is empty: it would be a no-op.
- ANSWER and REFUSE are masked while no passage has been retrieved yet (before the last step): answering or giving
  up before any evidence is premature, and the 135M model's prior strongly prefers ANSWER at step 1.
- SEARCH and BACKTRACK are masked at the last step (t = T_max): the episode is cut right after it, so a search's
  passages could never be used; the agent must ANSWER or REFUSE.
- SEARCH and BACKTRACK are also masked once the episode has made `PolicyConfig.max_searches` searches (active plus
  dropped; 0 = no budget). The untrained 135M model almost never chooses ANSWER on its own and would search until
  T_max (20 steps, mostly repeating a query); the budget (default 4, the iteration bound of the ircot and
  self-ask baselines) makes inference cost comparable and leaves the choice between ANSWER and REFUSE to the model.
The answer text (`PolicyConfig.answer_with`): "reader" (default) generates it with the reader prompt every method
shares (`reader.prompt.reader_prompt`: "answer with a short phrase from the passages") over the active chain's passages,
read as a chain (`reader_passages`: bridge pages, named pages, then the hops' rankings interleaved) up to
`reader_passages`; "policy" continues the
agent prompt after "ANSWER:". Measured on HotpotQA with the 135M model, the agent prompt's continuation is a
rambling sentence ("James Fieser (born 1982) is an American musician, ..."): F1 0.040 on 20 questions where the
closed-book reader scored higher. A follow-up turn of the agent conversation (agent turn "ANSWER:", then a user
turn asking for a short phrase from the passages) would extend the agent prompt, so only ~60 new prompt tokens
would run instead of the reader's ~500 (median step 1.08 s vs 1.98 s on the first 20 HotpotQA questions, 2026-11-24),
but the 135M model echoed the instruction ("A short phrase taken from the passages ...") or copied the
demonstration ("SEARCH: Eiffel Tower designer") on 10 of those 20 (F1 0.040 vs the reader's 0.048), so it was not
kept. The policy still decides WHEN to answer; the completion "ANSWER: <text>" is
re-scored under the agent prompt, so its log-prob is the policy's, as the objectives need.
"arena" answers with ARENA's traceable generator (`methods.arena`) over the same passages numbered 1..n: the
reply's <answer> part is the answer, and the decision carries the reply (`PolicyDecision.arena`: relevance list,
citations, selected pids, format failure) so every answer can show its citations (`agent --answerer arena`).
The first search (`PolicyConfig.first_query`): "question" (default) makes the GREEDY first search the question
itself, as IRCoT and the fixed-k baseline start; sampled siblings still generate their queries, so rollouts and the
studio's candidates explore other openings. "generate" lets the model write the greedy one too. Measured on HotpotQA, the 135M model's first query
is usually one entity of the question ("James Gunn" for a question about his 1996 film), which ranks the gold
passages lower than the whole question does. Later queries (`PolicyConfig.query_mode`): "grounded" chooses, once
passages have been read, the best-scored of candidates built from them (bridge entities, uncovered question words)
and the model's own generated query, with repeats and copied passage lines filtered out (`policy/queries.py`; the
decision's `query` field says how); "free" keeps the generated query as is.
Answers are cleaned like every method's (`reader.prompt.clean_answer`: first line, no "Answer:" prefix or quotes).
With `answer.mode = "span"` (the `AnswerConfig` passed as `answer`; the default) and answer_with = "reader", the
ANSWER text is the shared reader's (`answers.Reader`): a span of the reader's passages, yes/no, or a refusal (an
empty answer: REFUSE, fallback "empty_answer"; a span below `answer.min_confidence`: REFUSE, fallback
"low_confidence"); sampled siblings draw among the same candidates at the temperature.
A span answer's source passage (its pid) is `PolicyDecision.answer_source`; the episode's ANSWER step records it
as `info["answer_source"]` (the studio marks that passage).
Fallbacks (counted in `fallback_counts`, never an exception): an empty query becomes the question itself
("empty_query"); an answer empty after cleaning becomes REFUSE ("empty_answer"). In free mode a query equal to an earlier one is
kept: the environment's overlap penalty handles it.
"""
from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from evorag_core.env.actions import Action, Answer, Backtrack, Refuse, Search
from evorag_core.reader.answers import Reader
from evorag_core.reader.span import SpanAnswer
from evorag_core.reader.prompt import clean_answer, reader_prompt
from evorag_core.config import ANSWERERS, QUERY_MODES, QUERY_SCORES, AnswerConfig, PolicyConfig
from evorag_core.errors import ConfigError
from evorag_core.env.state import AgentView
from evorag_core.types import Passage
from evorag_core.lm.base import Generation, PolicyBackend, encode_pair
from evorag_core.policy.hops import HopPlan, linked_pages, named_pages, plan_hop
from evorag_core.policy.queries import QueryCandidate, choose_queries, earlier_queries
from evorag_core.policy.prompts import ARGUMENT_ACTIONS, LABELS, SYSTEM_PROMPT, completion_text, demo_turns, render_user

if TYPE_CHECKING:
    from evorag_core.reader.arena.generator import ArenaOutput

__all__ = ["PolicyDecision", "LMPolicy", "allowed_actions", "reader_passages"]

_NAMES = tuple(LABELS)  # SEARCH, BACKTRACK, ANSWER, REFUSE
_LABEL_MEMO = 32  # prompts whose label scores `LMPolicy` keeps


@dataclass(frozen=True)
class PolicyDecision:
    action: Action
    action_logprob: float
    argument_logprob: float
    logprob: float  # action_logprob + argument_logprob = log P(completion | prompt)
    prompt: str
    completion: str
    fallback: str | None = None  # "empty_query" | "empty_answer" | "low_confidence" (the reader withheld its span)
    choice_probs: dict[str, float] = field(default_factory=dict)  # the distribution the label was drawn from
    arena: dict[str, Any] | None = None  # answer_with="arena": the cited reply (`ArenaOutput.details()`)
    query: dict[str, Any] | None = None  # query_mode="grounded", a SEARCH after the first hop: how it was chosen
    answer_source: str | None = None  # a span answer's source passage (pid); None for yes/no, free text, no answer
    withheld: dict[str, Any] | None = None  # fallback "low_confidence": the span the reader withheld and its confidence
    plan: dict[str, Any] | None = None  # hop_gate > 0, after the first search: the hop planner's verdict (`HopPlan`)


def allowed_actions(view: AgentView, max_searches: int = 0) -> tuple[str, ...]:
    """Action names allowed under the constraints of the module docstring (`max_searches` 0: no budget)."""
    allowed = set(_NAMES)
    if not view.chain:
        allowed.discard("BACKTRACK")
    if view.t >= view.t_max or (max_searches and len(view.chain) + len(view.dropped) >= max_searches):
        allowed -= {"SEARCH", "BACKTRACK"}
    elif not view.passages:
        allowed -= {"ANSWER", "REFUSE"}
    return tuple(n for n in _NAMES if n in allowed) or _NAMES


class LMPolicy:
    def __init__(self, backend: PolicyBackend, cfg: PolicyConfig | None = None,
                 answer: AnswerConfig | None = None) -> None:
        self.backend = backend
        self.cfg = cfg if cfg is not None else PolicyConfig()
        self.reader = Reader(backend, answer, self.cfg.passage_chars, self.cfg.max_answer_tokens)
        if self.cfg.answer_with not in ANSWERERS:
            raise ConfigError(f"policy.answer_with must be one of {', '.join(ANSWERERS)}, got {self.cfg.answer_with!r}")
        if self.cfg.first_query not in ("question", "generate"):
            raise ConfigError(f"policy.first_query must be 'question' or 'generate', got {self.cfg.first_query!r}")
        if self.cfg.query_mode not in QUERY_MODES:
            raise ConfigError(f"policy.query_mode must be one of {', '.join(QUERY_MODES)}, got {self.cfg.query_mode!r}")
        if self.cfg.query_score not in QUERY_SCORES:
            raise ConfigError(f"policy.query_score must be one of {', '.join(QUERY_SCORES)}, got {self.cfg.query_score!r}")
        self.fallback_counts: Counter[str] = Counter()
        self._prepared: tuple[tuple, PolicyDecision] | None = None  # (state key, greedy decision) from prepare()
        self._label_scores: dict[tuple, list[float]] = {}  # (prompt, adapter, cache epoch) -> the labels' scores

    def prompt(self, view: AgentView) -> str:
        chars = self.cfg.passage_chars
        return self.backend.chat_prompt(SYSTEM_PROMPT, render_user(view, chars), demo_turns(chars))

    def act(self, view: AgentView, *, sample: bool = False, seed: int | None = None) -> PolicyDecision:
        """Greedy decision, or one sampled at `cfg.temperature` when `sample`. A greedy decision that `prepare`
        computed for this view, with the backend unchanged since (same adapter, no cache reset), is returned as is."""
        if not sample and self._prepared is not None:
            key, decision = self._prepared
            self._prepared = None
            if key == self._state_key(view):
                self._count_fallbacks([decision])
                return decision
        return self._decide(view, 1, self.cfg.temperature if sample else 0.0, seed)[0]

    def prepare(self, view: AgentView) -> None:
        """Idle-time work: the greedy decision at `view` is computed now (agent prompt, label scores, argument;
        the reader prompt and the answer when ANSWER is chosen) and kept, so a later `act(view)` returns it at once.
        Greedy decoding is deterministic, so it is the decision `act` would make; it is dropped if the backend
        changes in between (another adapter, a cache reset) or another view is asked. The studio calls this
        between clicks; backends without `warm` (vLLM has its own prefix caching) skip it."""
        if getattr(self.backend, "warm", None) is None:
            return
        key = self._state_key(view)
        self._prepared = (key, self._decide(view, 1, 0.0, None, count=False)[0])

    def warm_up(self) -> None:
        """Run the prompt heads every episode shares into the backend's prefix cache: the agent prompt's system turn
        and demonstrations, and the reader prompt's system turn, so that the first step after a start pays only
        for its own tokens. Backends without `warm` skip it."""
        warm = getattr(self.backend, "warm", None)
        if warm is None:
            return
        empty = AgentView("", (), (), 1, 1)
        warm(self.prompt(empty))
        if self.cfg.answer_with == "reader":
            warm(self.reader.prompt("", [Passage("", "", "")]))

    def _state_key(self, view: AgentView) -> tuple:
        """What a greedy decision depends on: the view and the backend's weights (adapter, cache epoch)."""
        return (view, getattr(self.backend, "active_adapter", None), getattr(self.backend, "cache_epoch", None))

    def _count_fallbacks(self, decisions: list[PolicyDecision]) -> None:
        for decision in decisions:
            if decision.fallback:
                self.fallback_counts[decision.fallback] += 1

    def plan(self, view: AgentView) -> HopPlan | None:
        """The hop planner's verdict at `view` (`policy/hops.py`), or None: gate off or nothing retrieved yet."""
        if self.cfg.hop_gate <= 0 or not view.passages:
            return None
        return plan_hop(view.question, view.passages, earlier_queries(view), self.cfg.passage_chars)

    def _label_choice(self, view: AgentView, temperature: float, plan: HopPlan | None = None,
                      also: tuple[str, ...] = ()) -> tuple[str, dict[str, float], dict[str, float], dict[str, float]]:
        """(prompt, the four labels' log-probs, the distribution over the allowed labels at `temperature`, the
        log-probs of the completions `also`); with a hop plan, `hop_gate` is added to the score of the action it
        calls for (SEARCH, else ANSWER) in the distribution, never to the recorded log-probs. `also` (completions
        known before the label is drawn) is scored in the labels' pass, so it costs no forward of its own. The
        labels' scores of the last `_LABEL_MEMO` prompts are kept, keyed with the backend's adapter and cache epoch
        (as `prepare` keys its decision; none without an epoch): a rollout asks for siblings at states its greedy
        episode already scored."""
        prompt = self.prompt(view)
        epoch = getattr(self.backend, "cache_epoch", None)  # None: the backend does not count weight changes
        key = (prompt, getattr(self.backend, "active_adapter", None), epoch)
        labels = self._label_scores.get(key) if epoch is not None else None
        wanted = [*(LABELS[n] for n in _NAMES if labels is None), *also]
        scores = self.backend.score_choices(prompt, wanted) if wanted else []
        if labels is None:
            labels, scores = scores[: len(_NAMES)], scores[len(_NAMES):]
            if epoch is not None:
                self._label_scores[key] = labels
            while len(self._label_scores) > _LABEL_MEMO:
                del self._label_scores[next(iter(self._label_scores))]
        raw = dict(zip(_NAMES, labels))
        allowed = allowed_actions(view, self.cfg.max_searches) if self.cfg.constrain_actions else _NAMES
        gated = dict(raw)
        if plan is not None:
            gated["SEARCH" if plan.search else "ANSWER"] += self.cfg.hop_gate
        return prompt, raw, _choice_probs(gated, allowed, temperature), dict(zip(also, scores))

    def _reader_prompt(self, view: AgentView) -> str:
        return reader_prompt(self.backend, view.question, reader_passages(view, self.cfg.reader_passages),
                             self.cfg.passage_chars)

    def candidates(
        self, view: AgentView, k: int | None = None, temperature: float | None = None, seed: int | None = None
    ) -> list[PolicyDecision]:
        """`k` sibling decisions sampled at `temperature` (defaults: cfg.siblings, cfg.temperature); the labels are
        drawn from one scoring pass and all arguments are generated as one batch."""
        k = self.cfg.siblings if k is None else k
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        return self._decide(view, k, self.cfg.temperature if temperature is None else temperature, seed)

    # -- internals -------------------------------------------------------------------------------------------

    def _decide(self, view: AgentView, k: int, temperature: float, seed: int | None, *, count: bool = True
                ) -> list[PolicyDecision]:
        plan = self.plan(view)
        first = self.cfg.first_query == "question" and temperature <= 0 and not view.chain and not view.dropped
        planned = temperature <= 0 and plan is not None and plan.search  # the greedy query is the plan's: no decode
        # a greedy SEARCH's query known before the label is drawn: its completion is scored with the labels
        known = view.question.strip() if first else " ".join(plan.query.split()) if planned else ""
        also = (completion_text("SEARCH", known),) if known else ()
        prompt, raw, probs, scored = self._label_choice(view, temperature, plan, also)
        seed = seed if seed is not None else secrets.randbits(62)
        names = _draw(probs, k, temperature, seed)
        wanted = [i for i, name in enumerate(names)
                  if name in ARGUMENT_ACTIONS and not ((first or planned) and name == "SEARCH")]
        generations: dict[int, Generation] = {}
        replies: dict[int, Any] = {}
        sources: dict[int, str | None] = {}
        refusals: dict[int, SpanAnswer] = {}  # the reader's refusals of ANSWER rows
        if self.cfg.answer_with == "arena":  # ANSWER texts come from ARENA's cited replies, as one batch
            answers = [i for i in wanted if names[i] == "ANSWER"]
            wanted = [i for i in wanted if names[i] != "ANSWER"]
            if answers:
                replies = dict(zip(answers, self._arena_replies(view, len(answers), temperature, seed + 2)))
        elif self.cfg.answer_with == "reader" and (self.reader.span is not None or self.reader.adapter is not None):
            # grounded spans (or the reader's own adapter): read by the Reader, not decoded in the policy's batch
            answers = [i for i in wanted if names[i] == "ANSWER"]
            wanted = [i for i in wanted if names[i] != "ANSWER"]
            if answers:
                read = self.reader.read(view.question, reader_passages(view, self.cfg.reader_passages),
                                        n=len(answers), temperature=temperature, seed=seed + 2)
                generations = {i: Generation(a.text, (), (), "stop") for i, a in zip(answers, read)}
                sources = {i: a.source_pid for i, a in zip(answers, read)}
                refusals = {i: a for i, a in zip(answers, read) if a.reason}
        if wanted:  # the other arguments (SEARCH, and ANSWER unless ARENA writes it) decode as one batch
            answering = any(names[i] == "ANSWER" for i in wanted)
            reader = self._reader_prompt(view) if answering and self.cfg.answer_with == "reader" else None
            prompts = [reader if names[i] == "ANSWER" and reader else prompt + LABELS[names[i]] for i in wanted]
            limits = [self.cfg.max_query_tokens if names[i] == "SEARCH" else self.cfg.max_answer_tokens for i in wanted]
            outs = self.backend.generate_batch(prompts, limits, stop=("\n",), temperature=temperature, seed=seed + 1)
            generations.update(zip(wanted, outs))
        queries = self._grounded(view, prompt, generations, names, temperature, seed + 3, plan)
        drafts = [self._draft(view, name, generations.get(i), replies.get(i), queries.get(i), refusals.get(i))
                  for i, name in enumerate(names)]
        argument_lps = self._argument_logprobs(prompt, drafts, raw, scored)
        decisions = [self._decision(prompt, draft, lp, raw, probs, replies.get(i), queries.get(i), sources.get(i),
                                    refusals.get(i), plan) for i, (draft, lp) in enumerate(zip(drafts, argument_lps))]
        if count:
            self._count_fallbacks(decisions)
        return decisions

    def _grounded(self, view: AgentView, prompt: str, generations: dict[int, Generation], names: list[str],
                  temperature: float, seed: int, plan: HopPlan | None = None) -> dict[int, tuple[str, dict[str, Any]]]:
        """query_mode="grounded": the chosen query and its info for each generated SEARCH row once passages have
        been read (`queries.choose_queries`); empty in free mode or before any passage. A hop plan that calls for a
        search gives the greedy query; sampled rows draw from the grounded pool, the plan's query included."""
        planned = plan.query if plan is not None and plan.search else None
        if planned and temperature <= 0:
            info = {"mode": "plan", "source": "plan", "reason": plan.reason, "target": plan.target}
            return {i: (planned, info) for i, name in enumerate(names) if name == "SEARCH"}
        rows = [i for i in sorted(generations) if names[i] == "SEARCH"]
        if self.cfg.query_mode != "grounded" or not rows or not view.passages:
            return {}
        baseline = None
        if self.cfg.query_score == "pmi":
            baseline = self.prompt(AgentView(view.question, (), (), 1, view.t_max)) + LABELS["SEARCH"]
        extra = (QueryCandidate(planned, "plan"),) if planned else ()
        chosen = choose_queries(self.backend, view, prompt + LABELS["SEARCH"], [generations[i].text for i in rows],
                                self.cfg.passage_chars, temperature, seed, baseline_prompt=baseline, extra=extra)
        return dict(zip(rows, chosen))

    def _arena_replies(self, view: AgentView, n: int, temperature: float, seed: int) -> list[ArenaOutput]:
        """`n` ARENA replies over the reader's passages (numbered 1..m in that order)."""
        from evorag_core.reader.arena.generator import ArenaGenerator
        from evorag_core.reader.arena.prompt import ArenaConfig

        cfg = ArenaConfig(max_new_tokens=self.cfg.arena_tokens, passage_chars=self.cfg.passage_chars)
        passages = reader_passages(view, self.cfg.reader_passages)
        return ArenaGenerator(self.backend, cfg).sample(view.question, passages, n, temperature, seed=seed)

    def _draft(self, view: AgentView, name: str, generated: Generation | None, reply: ArenaOutput | None = None,
               query: tuple[str, dict[str, Any]] | None = None, refusal: SpanAnswer | None = None) -> _Draft:
        """A row's action and completion text (no LM call): its argument from the grounded query, the generation or
        the ARENA reply, with the fallbacks of the module docstring."""
        fallback = None
        argument = ""
        if query is not None:  # grounded: the chosen candidate; its log-prob is the generation's only if it is that text
            argument = " ".join(query[0].split())
            if generated is not None and argument != " ".join(generated.text.split()):
                generated = None
            if not argument:
                argument, fallback = view.question.strip(), "empty_query"
        elif name == "SEARCH" and generated is None:  # the first search is the question itself (first_query)
            argument = view.question.strip()
        elif name in ARGUMENT_ACTIONS:
            # an ARENA reply gives its <answer> part (or the lenient extraction); otherwise the generated text
            text = (reply.answer or "") if reply is not None else generated.text
            argument = " ".join(text.split())
            if not argument and name == "SEARCH":
                argument, fallback = view.question.strip(), "empty_query"
            elif name == "ANSWER":
                argument = clean_answer(argument)  # as every method reports answers (re-scored if it changed)
                if not argument:
                    withheld_span = refusal is not None and refusal.reason == "low_confidence"
                    name, generated, fallback = "REFUSE", None, "low_confidence" if withheld_span else "empty_answer"
        # a reader- or ARENA-generated answer's token log-probs belong to another prompt: re-score it under the agent's
        own = generated if not (name == "ANSWER" and self.cfg.answer_with != "policy") else None
        return _Draft(name, argument, completion_text(name, argument), fallback, own)

    def _argument_logprobs(self, prompt: str, drafts: list[_Draft], raw: dict[str, float],
                           scored: dict[str, float]) -> list[float]:
        """Each row's argument log-prob under the agent prompt: 0 without an argument; the sum of the generated
        tokens' log-probs when they are exactly the completion's tail under the boundary rule; the completion's
        log-prob scored with the labels (`scored`) minus the label's; else the completion re-scored, every such
        row of the decision in one scoring pass."""
        out: list[float | None] = []
        tokenizer = getattr(self.backend, "tokenizer", None)
        for d in drafts:
            if d.name not in ARGUMENT_ACTIONS:
                out.append(0.0)
            elif d.generated is not None and d.fallback is None and tokenizer is not None and (
                    encode_pair(tokenizer, "", d.completion)[1]
                    == encode_pair(tokenizer, "", LABELS[d.name])[1] + list(d.generated.token_ids)):
                out.append(d.generated.logprob)
            elif d.completion in scored:
                out.append(scored[d.completion] - raw[d.name])
            else:
                out.append(None)
        missing = list(dict.fromkeys(d.completion for d, lp in zip(drafts, out) if lp is None))
        if missing:
            full = dict(zip(missing, self.backend.sequence_logprobs([(prompt, c) for c in missing])))
            out = [full[d.completion] - raw[d.name] if lp is None else lp for d, lp in zip(drafts, out)]
        return out

    def _decision(self, prompt: str, draft: _Draft, argument_lp: float, raw: dict[str, float],
                  probs: dict[str, float], reply: ArenaOutput | None = None,
                  query: tuple[str, dict[str, Any]] | None = None, source: str | None = None,
                  refusal: SpanAnswer | None = None, plan: HopPlan | None = None) -> PolicyDecision:
        name = draft.name
        action_lp = raw[name]
        withheld = None
        if draft.fallback == "low_confidence":  # the reader's best span and its probability, for the studio
            withheld = {"span": refusal.withheld, "confidence": refusal.confidence}
        return PolicyDecision(_action(name, draft.argument), action_lp, argument_lp, action_lp + argument_lp, prompt,
                              draft.completion, draft.fallback, dict(probs),
                              reply.details() if reply is not None else None,
                              query[1] if query is not None else None, source if name == "ANSWER" else None,
                              withheld, plan.details() if plan is not None else None)


@dataclass(frozen=True)
class _Draft:
    """One row of a decision before its argument's log-prob: the action name (REFUSE when an answer came out
    empty), its argument and completion text, the fallback, and the generation whose tokens are the argument's
    own (None when the completion must be scored)."""

    name: str
    argument: str
    completion: str
    fallback: str | None
    generated: Generation | None


def reader_passages(view: AgentView, limit: int) -> list[Passage]:
    """The active chain's passages for the reader, at most `limit` (0: all), without repeats. One hop: its ranking.
    Several hops: the chain read as a chain - first the pages linked from the pages the question names (at most
    two: the bridge pages, where a bridge question's answer is), then the named pages (at most two), then the hops'
    rankings interleaved (the 1st passage of every hop, then the 2nd, ...). Measured on HotpotQA dev 0:40 (the same
    episodes re-read): F1 0.479 vs 0.446 for the interleaving alone (docs/search.md)."""
    out: dict[str, Passage] = {}
    if len(view.chain) > 1:
        every = view.passages
        named = named_pages(view.question, every)
        for p in [*linked_pages(named or every[:1], every)[:2], *named[:2]]:
            out.setdefault(p.pid, p)
    depth = max((len(h.passages) for h in view.chain), default=0)
    for rank in range(depth):
        for hop in view.chain:
            if rank < len(hop.passages):
                out.setdefault(hop.passages[rank].pid, hop.passages[rank])
    passages = list(out.values())
    return passages[:limit] if limit > 0 else passages


def _choice_probs(raw: dict[str, float], allowed: tuple[str, ...], temperature: float) -> dict[str, float]:
    scores = torch.tensor([raw[n] for n in allowed], dtype=torch.float64)
    if temperature <= 0:
        best = int(scores.argmax())
        return {n: float(i == best) for i, n in enumerate(allowed)}
    probs = torch.softmax(scores / temperature, dim=0)
    return {n: float(p) for n, p in zip(allowed, probs)}


def _draw(probs: dict[str, float], k: int, temperature: float, seed: int) -> list[str]:
    names = list(probs)
    if temperature <= 0:
        return [max(names, key=probs.__getitem__)] * k
    rng = torch.Generator().manual_seed(seed)
    picks = torch.multinomial(torch.tensor([probs[n] for n in names]), k, replacement=True, generator=rng)
    return [names[i] for i in picks.tolist()]


def _action(name: str, argument: str) -> Action:
    if name == "SEARCH":
        return Search(argument)
    if name == "ANSWER":
        return Answer(argument)
    return Backtrack() if name == "BACKTRACK" else Refuse()
