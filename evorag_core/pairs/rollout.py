"""Sibling-branch rollouts of the policy from the environment, the source of trajectory-prefix preference pairs
(SPEC §4): `rollout_question` for one question, `run_rollouts` for a run that stores each episode as it ends.

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

The branches, states and pairs are the values of pairs/branches.py; pairs/selection.py builds and selects the pairs,
pairs/persist.py stores each episode and its pairs; `run_rollouts` below runs the whole loop.

Cost bounds (`RolloutConfig`): the rollout's own T_max (`t_max`, default 5; at t = T_max the LM policy may only
ANSWER or REFUSE, so every branch ends by then), `max_states` (default 3 branch states per episode) and
`max_branch_steps` (default 0 = continue to the end; with N > 0 a branch is cut after its candidate step plus N
steps and is compared only with branches cut at the same horizon). Worst case per episode with the defaults and
K = 4: 5 greedy decisions, 3 sibling calls (K samples each, batched) and, branching at t = 1, 3, 5, at most
4 * (4 + 2 + 0) = 24 greedy continuation decisions. Measured on HotpotQA, the 135M policy usually SEARCHes once and
ANSWERs at t = 2, so an episode branches at 2 states and costs about 10 decisions (bench/preference.py reports
`decisions` per run).
"""
from __future__ import annotations

import zlib
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence

from evorag_core.config import PolicyConfig, RolloutConfig
from evorag_core.env.actions import Action, Answer, Refuse, Search
from evorag_core.env.env import EnvSnapshot, RagEnv
from evorag_core.env.episode import EpisodeRecord, StepRecord, step_info
from evorag_core.env.scheduler import SIGNAL_WEIGHT
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.env.state import AgentView
from evorag_core.pairs.branches import Branch, BranchState, BranchStep, EpisodeRollout
from evorag_core.pairs.persist import SavedRollout, save_rollout
from evorag_core.pairs.selection import PairSelector, RolloutStats, build_pairs
from evorag_core.types import Question

if TYPE_CHECKING:
    from evorag_core.store import Store

__all__ = [
    "BranchingPolicy",
    "signal_returns",
    "branch_states",
    "rollout_question",
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
    env.step(first.action, info=step_info(first))
    steps, decisions = 1, 0
    while not env.done:
        if max_steps and steps > max_steps:
            return steps, True, decisions
        decision = policy.act(env.view())
        decisions += 1
        env.step(decision.action, info=step_info(decision))
        steps += 1
    return steps, False, decisions


def _seed(base: int, question_id: str, t: int) -> int:
    return zlib.crc32(f"{base}:{question_id}:{t}".encode())


def _observation(env: RagEnv, view: AgentView, step: StepRecord, passage_chars: int) -> str:
    """What the branch's own first step returned, for the preference model's x (evorag_core/preference/): a SEARCH's passages
    rendered as the policy's next prompt would show them; "" for other actions."""
    if not isinstance(step.action, Search):
        return ""
    from evorag_core.policy.prompts import render_search_result  # the policy package imports torch; rollout.py need not

    return render_search_result(view, [env.passage(pid) for pid in step.passages], passage_chars)


def _branch(decision: _Decision, samples: int, greedy: bool, steps: Sequence[StepRecord], record: EpisodeRecord,
            cut: bool, observation: str) -> Branch:
    by_signal = signal_returns(steps)
    trace = tuple(BranchStep(s.t, record.t_max, record.stage, dict(s.signals)) for s in steps)
    return Branch(
        completion=decision.completion, action=decision.action, logprob=float(decision.logprob), greedy=greedy,
        samples=samples, ret=float(sum(s.reward for s in steps)), signals=by_signal, steps=len(steps),
        complete=not cut, outcome=_outcome(record, cut), observation=observation, trace=trace,
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
        obs = env.step(decision.action, info=step_info(decision)).observation
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


def run_rollouts(
    questions: Iterable[Question],
    make_env: Callable[[Question], RagEnv],
    policy: BranchingPolicy,
    store: Store,
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
