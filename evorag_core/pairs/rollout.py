"""Sibling-branch rollouts and trajectory-prefix preference pairs (SPEC §4).

One rollout of a question:
1. The main trajectory follows the policy greedily from reset to the end (ANSWER, REFUSE or T_max); the environment
   is snapshotted before every step (`RagEnv.snapshot`, O(hops), nothing is re-retrieved).
2. At up to `max_states` of its visited states (evenly spread, always including t = 1) the policy samples K sibling
   completions at `temperature`. Identical completions are merged (a deterministic greedy continuation would give
   them identical branches). Each distinct candidate that differs from the greedy action is taken from the
   restored state and continued greedily; the greedy candidate's branch is the rest of the main trajectory, free.
3. A branch is scored by its *return-to-go* from the branch point, G_t = sum_{u >= t} R_u with
   R_u = sum_k w_k(u) r_u^(k): undiscounted, the sum of the weighted step rewards from the candidate's own step to
   the end of the branch, each step weighted at its true position u in the current stage's schedule (not
   restarted at 1). The rewards before t are shared by every sibling, so they cancel in any difference; leaving them
   out keeps the stored returns comparable across states. The per-signal parts G_t^(k) = sum_{u >= t} w_k(u)
   r_u^(k) add up to G_t; they are what the multi-head preference model's heads are trained on.

Cost bounds (`RolloutConfig`): the rollout's own T_max (`t_max`, default 5; at t = T_max the LM policy may only
ANSWER or REFUSE, so every branch ends by then), `max_states` (default 3 branch states per episode) and
`max_branch_steps` (default 0 = continue to the end; with N > 0 a branch is cut after its candidate step plus N
steps and is compared only with branches cut at the same horizon). Worst case per episode with the defaults and
K = 4: 5 greedy decisions, 3 sibling calls (K samples each, batched) and, branching at t = 1, 3, 5, at most
4 * (4 + 2 + 0) = 24 greedy continuation decisions. Measured on HotpotQA, the 135M policy usually SEARCHes once and
ANSWERs at t = 2, so an episode branches at 2 states and costs about 10 decisions (bench/preference.py reports
`decisions` per run).

Pairs: every two distinct candidates of one state whose branches are comparable (both ran to their end, or both
were cut at the same horizon) and whose returns differ by at least `min(policy_margin, preference_margin)` become a
pair (higher return = chosen). The `margin` column holds |dG| so that consumers filter by their own threshold:
DPO uses margin >= policy_margin (0.2), the preference model margin >= preference_margin (0.3). `PairSelector`
then drops exact duplicates (same prompt and the same two completions, in either order) and balances the pairs
that involve the greedy action so that "the chosen side is the policy's greedy choice" holds in about half of them
(majority side down-sampled: it may exceed the minority by at most a factor `balance_ratio`, plus one; the excess is
held back and released as soon as the other side catches up, the rest is dropped at the end of the run). Pairs
between two sampled siblings carry no such shortcut and are never held back.
"""
from __future__ import annotations

import hashlib
import zlib
from collections import deque
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from evorag_core.env.actions import Action, Answer, Refuse, Search, action_to_dict
from evorag_core.config import PolicyConfig, RolloutConfig
from evorag_core.env.env import EnvSnapshot, RagEnv
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.env.scheduler import SIGNAL_WEIGHT
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.env.state import AgentView
from evorag_core.types import Question

__all__ = [
    "BranchingPolicy",
    "Branch",
    "BranchState",
    "EpisodeRollout",
    "RolloutPair",
    "RolloutStats",
    "PairSelector",
    "branch_states",
    "signal_returns",
    "build_pairs",
    "rollout_question",
    "pair_metadata",
    "store_steps",
    "SavedRollout",
    "save_rollout",
    "run_rollouts",
]


class _Decision(Protocol):
    action: Action
    logprob: float
    prompt: str
    completion: str


class BranchingPolicy(Protocol):
    """What a rollout needs of a policy: `evorag_core.policy.LMPolicy` implements it."""

    def act(self, view: AgentView) -> _Decision: ...

    def candidates(self, view: AgentView, k: int | None = None, temperature: float | None = None,
                   seed: int | None = None) -> Sequence[_Decision]: ...


@dataclass(frozen=True)
class Branch:
    """One distinct candidate at a state and the branch continued from it."""

    completion: str
    action: Action
    logprob: float | None
    greedy: bool  # the policy's greedy choice (its branch is the main trajectory's remainder)
    samples: int  # how many of the K sampled siblings produced this completion
    ret: float  # G_t: sum of the weighted step rewards from the branch point on
    signals: Mapping[str, float]  # G_t^(k) by signal name (weighted); they add up to `ret`
    steps: int  # steps in the branch, the candidate's own step included
    complete: bool  # ended by ANSWER / REFUSE / T_max, not cut by max_branch_steps
    outcome: str  # "answer: ...", "refuse", "truncated" (T_max) or "cut"
    observation: str = ""  # a SEARCH candidate: what it retrieved, as the next prompt shows it ("" otherwise)

    def summary(self) -> dict[str, Any]:
        return {
            "completion": self.completion, "return": self.ret, "signals": dict(self.signals), "steps": self.steps,
            "complete": self.complete, "outcome": self.outcome, "greedy": self.greedy, "samples": self.samples,
            "logprob": self.logprob, "observation": self.observation,
        }


@dataclass(frozen=True)
class BranchState:
    """A visited state of the main trajectory with its sampled siblings and their branches."""

    t: int
    prompt: str
    sampled: tuple[tuple[Action, str, float], ...]  # the K raw samples: (action, completion, log-prob)
    branches: tuple[Branch, ...]  # distinct candidates; the greedy one first

    def branch(self, completion: str) -> Branch:
        return next(b for b in self.branches if b.completion == completion)


@dataclass(frozen=True)
class RolloutPair:
    prompt: str
    chosen: Branch
    rejected: Branch
    t: int
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)  # what goes to the store's metadata

    @property
    def margin(self) -> float:
        return self.chosen.ret - self.rejected.ret

    @property
    def key(self) -> str:
        """Identity for duplicate detection: the prompt and the unordered pair of completions."""
        a, b = sorted((self.chosen.completion, self.rejected.completion))
        return hashlib.sha1("\0".join((self.prompt, a, b)).encode()).hexdigest()

    @property
    def greedy_side(self) -> bool | None:
        """True: the chosen side is the greedy action; False: the rejected side is; None: neither."""
        if self.chosen.greedy:
            return True
        if self.rejected.greedy:
            return False
        return None


@dataclass(frozen=True)
class EpisodeRollout:
    question: Question
    record: EpisodeRecord  # the main (greedy) trajectory
    states: tuple[BranchState, ...]
    pairs: tuple[RolloutPair, ...]  # comparable pairs over the margin, before dedup and balance
    decisions: int  # policy decisions made (greedy + sampled + branch continuations)


def signal_returns(steps: Iterable[StepRecord]) -> dict[str, float]:
    """G^(k) = sum over the steps of w_k(u) * r_u^(k), for each of the seven signals."""
    out = {name: 0.0 for name in SIGNAL_NAMES}
    for s in steps:
        for name, value in s.signals.items():
            out[name] += s.weights[SIGNAL_WEIGHT[name]] * value
    return out


def branch_states(n_steps: int, max_states: int) -> list[int]:
    """Indices (0-based step positions) of the states to branch at: all of them when there are at most
    `max_states`, else `max_states` evenly spread ones including the first and the last.
    E.g. branch_states(7, 3) -> [0, 3, 6]; branch_states(2, 3) -> [0, 1]."""
    if max_states <= 0 or n_steps <= 0:
        return []
    if n_steps <= max_states:
        return list(range(n_steps))
    if max_states == 1:
        return [0]
    return sorted({round(i * (n_steps - 1) / (max_states - 1)) for i in range(max_states)})


def _comparable(a: Branch, b: Branch) -> bool:
    return (a.complete and b.complete) or (not a.complete and not b.complete and a.steps == b.steps)


def build_pairs(state: BranchState, min_margin: float) -> list[RolloutPair]:
    """All pairs of distinct, comparable branches of one state with |dG| >= min_margin, higher return chosen."""
    out: list[RolloutPair] = []
    branches = state.branches
    for i in range(len(branches)):
        for j in range(i + 1, len(branches)):
            a, b = branches[i], branches[j]
            if a.completion == b.completion or not _comparable(a, b):
                continue
            if abs(a.ret - b.ret) + 1e-12 < min_margin:
                continue
            hi, lo = (a, b) if a.ret > b.ret else (b, a)
            out.append(RolloutPair(state.prompt, hi, lo, state.t))
    return out


@dataclass
class RolloutStats:
    episodes: int = 0
    steps: int = 0
    candidates: int = 0  # sibling rows stored (K per branch state)
    branches: int = 0  # distinct branches scored (greedy included)
    decisions: int = 0
    pairs_built: int = 0  # comparable pairs over the margin
    pairs_kept: int = 0
    dropped_duplicate: int = 0
    dropped_balance: int = 0
    greedy_chosen: int = 0  # kept pairs whose chosen side is the greedy action
    greedy_rejected: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class PairSelector:
    """Dedup and greedy-side balance over a whole run (see the module docstring); feed it pairs with `offer`."""

    balance_ratio: float = 1.0  # 0 disables balancing
    stats: RolloutStats = field(default_factory=RolloutStats)
    _seen: set[str] = field(default_factory=set)
    _held: dict[bool, deque] = field(default_factory=lambda: {True: deque(), False: deque()})

    def offer(self, pairs: Iterable[RolloutPair]) -> list[RolloutPair]:
        """The pairs to store now: new ones that pass, plus held-back ones the balance now admits."""
        out: list[RolloutPair] = []
        for pair in pairs:
            self.stats.pairs_built += 1
            if pair.key in self._seen:
                self.stats.dropped_duplicate += 1
                continue
            self._seen.add(pair.key)
            side = pair.greedy_side
            if side is None or self.balance_ratio <= 0:
                self._emit(pair, out)
            else:
                self._held[side].append(pair)
                self._drain(out)
        return out

    def finish(self) -> int:
        """Drop what is still held back (the majority side's excess); returns how many."""
        dropped = len(self._held[True]) + len(self._held[False])
        self._held[True].clear()
        self._held[False].clear()
        self.stats.dropped_balance += dropped
        return dropped

    def _count(self, side: bool) -> int:
        return self.stats.greedy_chosen if side else self.stats.greedy_rejected

    def _admits(self, side: bool) -> bool:
        return self._count(side) + 1 <= self.balance_ratio * self._count(not side) + 1

    def _drain(self, out: list[RolloutPair]) -> None:
        moved = True
        while moved:
            moved = False
            for side in (True, False):
                if self._held[side] and self._admits(side):
                    self._emit(self._held[side].popleft(), out)
                    moved = True

    def _emit(self, pair: RolloutPair, out: list[RolloutPair]) -> None:
        side = pair.greedy_side
        if side is True:
            self.stats.greedy_chosen += 1
        elif side is False:
            self.stats.greedy_rejected += 1
        self.stats.pairs_kept += 1
        out.append(pair)


# -- running the policy -----------------------------------------------------------------------------------------


def _info(decision: _Decision) -> dict[str, Any]:
    info: dict[str, Any] = {"logprob": float(decision.logprob), "completion": decision.completion}
    if getattr(decision, "fallback", None):
        info["fallback"] = decision.fallback
    return info


def _outcome(record: EpisodeRecord, cut: bool) -> str:
    if cut:
        return "cut"
    last = record.steps[-1].action
    if isinstance(last, Answer):
        return f"answer: {last.answer}"
    return "refuse" if isinstance(last, Refuse) else "truncated"


def _continue(env: RagEnv, policy: BranchingPolicy, first: _Decision, max_steps: int) -> tuple[int, bool, int]:
    """Take `first`, then act greedily until the episode ends or `max_steps` more steps (0 = no limit).
    Returns (steps taken, cut, policy decisions made)."""
    env.step(first.action, info=_info(first))
    steps, decisions = 1, 0
    while not env.done:
        if max_steps and steps > max_steps:
            return steps, True, decisions
        decision = policy.act(env.view())
        decisions += 1
        env.step(decision.action, info=_info(decision))
        steps += 1
    return steps, False, decisions


def _seed(base: int, question_id: str, t: int) -> int:
    return zlib.crc32(f"{base}:{question_id}:{t}".encode())


def _observation(env: RagEnv, view: AgentView, step: StepRecord, passage_chars: int) -> str:
    """What the branch's own first step returned, for the preference model's x (preference.py): a SEARCH's passages
    rendered as the policy's next prompt would show them; "" for other actions."""
    if not isinstance(step.action, Search):
        return ""
    from evorag_core.policy.prompts import render_search_result  # the policy package imports torch; rollout.py need not

    return render_search_result(view, [env.passage(pid) for pid in step.passages], passage_chars)


def _branch(decision: _Decision, samples: int, greedy: bool, steps: Sequence[StepRecord], record: EpisodeRecord,
            cut: bool, observation: str) -> Branch:
    by_signal = signal_returns(steps)
    return Branch(
        completion=decision.completion, action=decision.action, logprob=float(decision.logprob), greedy=greedy,
        samples=samples, ret=float(sum(s.reward for s in steps)), signals=by_signal, steps=len(steps),
        complete=not cut, outcome=_outcome(record, cut), observation=observation,
    )


def _branch_state(env: RagEnv, policy: BranchingPolicy, snap: EnvSnapshot, greedy: _Decision, main: EpisodeRecord,
                  question_id: str, cfg: RolloutConfig) -> tuple[BranchState, int]:
    env.restore(snap)
    view = env.view()
    t = view.t
    chars = getattr(getattr(policy, "cfg", None), "passage_chars", PolicyConfig.passage_chars)  # the prompt's cut
    sampled = list(policy.candidates(view, k=cfg.siblings, temperature=cfg.temperature,
                                     seed=_seed(cfg.seed, question_id, t)))
    decisions = len(sampled)
    counts: dict[str, int] = {}
    first: dict[str, _Decision] = {}
    for d in sampled:
        counts[d.completion] = counts.get(d.completion, 0) + 1
        first.setdefault(d.completion, d)
    rest = main.steps[t - 1 :]
    greedy_cut = bool(cfg.max_branch_steps) and len(rest) > cfg.max_branch_steps + 1
    greedy_steps = rest[: cfg.max_branch_steps + 1] if greedy_cut else rest
    branches = [_branch(greedy, counts.get(greedy.completion, 0), True, greedy_steps, main, greedy_cut,
                        _observation(env, view, greedy_steps[0], chars))]
    for completion, decision in first.items():
        if completion == greedy.completion:
            continue
        env.restore(snap)
        _, cut, made = _continue(env, policy, decision, cfg.max_branch_steps)
        decisions += made
        steps = env.record.steps[t - 1 :]
        branches.append(_branch(decision, counts[completion], False, steps, env.record, cut,
                                _observation(env, view, steps[0], chars)))
    raw = tuple((d.action, d.completion, float(d.logprob)) for d in sampled)
    return BranchState(t, greedy.prompt, raw, tuple(branches)), decisions


def rollout_question(env: RagEnv, policy: BranchingPolicy, question: Question, cfg: RolloutConfig, *,
                     stage: str | None = None, meta: Mapping[str, Any] | None = None) -> EpisodeRollout:
    """The main greedy episode of `question`, its branch states and their pairs (see the module docstring).
    The environment's T_max is used as is; `cfg.t_max` is applied where the environment is built."""
    obs = env.reset(question, stage=stage, meta=meta)
    snaps: list[EnvSnapshot] = []
    greedy: list[_Decision] = []
    while not env.done:
        snaps.append(env.snapshot())
        decision = policy.act(obs.view)
        greedy.append(decision)
        obs = env.step(decision.action, info=_info(decision)).observation
    main = env.record
    decisions = len(greedy)
    states: list[BranchState] = []
    for i in branch_states(len(main.steps), cfg.max_states):
        state, made = _branch_state(env, policy, snaps[i], greedy[i], main, question.id, cfg)
        states.append(state)
        decisions += made
    min_margin = min(cfg.policy_margin, cfg.preference_margin)
    pairs = tuple(p for s in states for p in build_pairs(s, min_margin))
    return EpisodeRollout(question, main, tuple(states), pairs, decisions)


# -- what goes to the store -------------------------------------------------------------------------------------


def pair_metadata(pair: RolloutPair, rollout: EpisodeRollout, episode_db_id: int | None,
                  cfg: RolloutConfig) -> dict[str, Any]:
    """Everything a consumer needs besides prompt/chosen/rejected: per-signal returns of both branches (for the
    preference model's heads), where the pair came from and which thresholds it passes."""
    rec = rollout.record
    margin = pair.margin
    return {
        "episode_db_id": episode_db_id,
        "episode": rec.episode_id,
        "question_id": rec.question_id,
        "dataset": rec.dataset,
        "stage": rec.stage,
        "t": pair.t,
        "t_max": rec.t_max,
        "schedule": rec.schedule,
        "preset": rec.preset,
        "policy": rec.meta.get("policy"),
        "return_chosen": pair.chosen.ret,
        "return_rejected": pair.rejected.ret,
        "signals_chosen": dict(pair.chosen.signals),
        "signals_rejected": dict(pair.rejected.signals),
        "chosen_branch": pair.chosen.summary(),
        "rejected_branch": pair.rejected.summary(),
        "for_policy": margin >= cfg.policy_margin,
        "for_preference": margin >= cfg.preference_margin,
        "greedy_side": {True: "chosen", False: "rejected", None: None}[pair.greedy_side],
        "key": pair.key,
    }


def store_steps(rollout: EpisodeRollout) -> list:
    """The main trajectory as store `Step`s, with the K sampled siblings (and their branch returns) on the steps
    where the rollout branched."""
    from evorag_core.store import Sibling, Step

    by_t = {s.t: s for s in rollout.states}
    out = []
    for step in rollout.record.steps:
        siblings: tuple = ()
        state = by_t.get(step.t)
        if state is not None:
            siblings = tuple(
                Sibling(action_to_dict(a)["action"], _argument(a), lp, state.branch(c).ret)
                for a, c, lp in state.sampled
            )
        verdict = None
        if step.verdict is not None:
            verdict = "answerable" if step.verdict.answerable else "unanswerable"
        out.append(Step(
            t=step.t, action=action_to_dict(step.action)["action"], argument=_argument(step.action),
            passages=tuple(step.passages), signals=dict(step.signals), weights=dict(step.weights),
            reward=step.reward, judge_verdict=verdict, siblings=siblings,
        ))
    return out


def _argument(action: Action) -> str | None:
    d = action_to_dict(action)
    return d.get("query") or d.get("answer")


@dataclass(frozen=True)
class SavedRollout:
    episode_id: int
    pair_ids: tuple[int, ...]
    steps: int
    candidates: int


def save_rollout(store, rollout: EpisodeRollout, selector: PairSelector, cfg: RolloutConfig,
                 policy_name: str, *, run: str | None = None, adapter: str | None = None,
                 data_path: str | None = None) -> SavedRollout:
    """Write the episode (its steps, the siblings, a summary of every branch in its config JSON), then the pairs
    the selector lets through now (held-back pairs of earlier episodes included; their metadata names their own
    episode). Two short transactions: the episode, then its pairs."""
    from evorag_core.metrics import exact_match, f1_score
    from evorag_core.store import NewPair, Outcome

    rec = rollout.record
    config = {
        "rollout": dict(cfg.__dict__), "t_max": rec.t_max, "top_k": rec.top_k, "preset": rec.preset,
        "episode_key": rec.episode_id, "answer": rec.answer, "decisions": rollout.decisions,
        "branches": {str(s.t): [b.summary() for b in s.branches] for s in rollout.states},
    }
    steps = store_steps(rollout)
    episode_id = store.add_episode(
        question_id=rec.question_id, dataset=rec.dataset, question=rec.question, policy=policy_name,
        stage=rec.stage, schedule=rec.schedule, config=config, steps=steps,
        status="truncated" if rec.truncated else "finished", total_return=rec.total_return,
        source="rollout", adapter=adapter, data_path=data_path, run=run,
        outcome=Outcome(rec.answer, *_grade(rec.answer, rec.gold_answers, exact_match, f1_score), rec.refused),
    )
    offered = [replace(p, meta=pair_metadata(p, rollout, episode_id, cfg)) for p in rollout.pairs]
    ready = selector.offer(offered)
    new = [
        NewPair(p.prompt, p.chosen.completion, p.rejected.completion, source="rollout", margin=p.margin,
                stage=p.meta.get("stage"), metadata=dict(p.meta))
        for p in ready
    ]
    ids = store.add_pairs(new)
    selector.stats.episodes += 1
    selector.stats.steps += len(steps)
    n_siblings = sum(len(s.siblings) for s in steps)
    selector.stats.candidates += n_siblings
    selector.stats.branches += sum(len(s.branches) for s in rollout.states)
    selector.stats.decisions += rollout.decisions
    return SavedRollout(episode_id, tuple(ids), len(steps), n_siblings)


def _grade(answer: str | None, golds: Sequence[str], em, f1) -> tuple[float | None, float | None]:
    """(EM, F1) of the final answer as `evorag eval` scores it (0, 0 without an answer); (None, None) without gold."""
    if not golds:
        return None, None
    return (0.0, 0.0) if answer is None else (em(answer, golds), f1(answer, golds))


def run_rollouts(
    questions: Iterable[Question],
    make_env: Callable[[Question], RagEnv],
    policy: BranchingPolicy,
    store,
    cfg: RolloutConfig,
    selector: PairSelector,
    *,
    policy_name: str,
    stage: str | None = None,
    write_guard: Callable[[], AbstractContextManager] = nullcontext,
    on_episode: Callable[[Question, SavedRollout], None] | None = None,
    run: str | None = None,
    adapter: str | None = None,
    data_path: str | None = None,
) -> RolloutStats:
    """Roll out each question and store it before starting the next (commit per episode). An exception or Ctrl-C
    leaves every finished episode and its pairs in the store; `selector.stats` counts them. `write_guard` wraps
    each store write (the CLI defers SIGINT there, so a write is never cut in half). Call `selector.finish()`
    when done to drop the held-back pairs."""
    for question in questions:
        result = rollout_question(make_env(question), policy, question, cfg, stage=stage,
                                  meta={"policy": policy_name})
        with write_guard():
            saved = save_rollout(store, result, selector, cfg, policy_name, run=run, adapter=adapter,
                                 data_path=data_path)
        if on_episode is not None:
            on_episode(question, saved)
    return selector.stats
