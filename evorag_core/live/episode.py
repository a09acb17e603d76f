"""A live episode, one step at a time, as a person watches and steers it (the studio's Episode and Compare tabs):
the environment and the episode's policy, the record with a person's verdict overrides, the policy's proposal at
the current state, steps a person takes in the policy's place, sibling candidates scored by their branch returns,
and every change mirrored to the store.

A `LiveEpisode` is mutated in place (one episode, one user); `exclusive()` keeps two actions from overlapping. As a
Gymnasium agent loop does, it keeps the environment's latest observation (the state the next step acts on) and
whether the last step terminated or truncated the episode, from what `reset` and `step` return, rather than asking
the environment again. A store failure never stops the episode: it is kept in `notes` (`take_notes`) for the caller
to show. No UI code here.
"""
from __future__ import annotations

import copy
import hashlib
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from sqlalchemy.exc import SQLAlchemyError

from evorag_core.env.actions import Action, action_to_dict
from evorag_core.env.env import RagEnv
from evorag_core.env.episode import EpisodeRecord, StepRecord, apply_override, step_info
from evorag_core.env.judges import GoldCoverageJudge, OverrideJudge, Verdict
from evorag_core.env.rows import action_argument, episode_finish, store_step, verdict_name
from evorag_core.env.scheduler import WeightTable
from evorag_core.env.state import AgentView
from evorag_core.errors import EnvStateError, StoreError
from evorag_core.live.human import Correction, Proposal, completion_of, correction_of
from evorag_core.runtime import Runtime
from evorag_core.types import Passage, Question

if TYPE_CHECKING:
    from evorag_core.methods.base import EpisodePolicy
    from evorag_core.store import Store

__all__ = ["Candidate", "LivePolicy", "LiveEpisode", "free_question"]

log = logging.getLogger(__name__)
_ENDED = "the episode has ended; press Reset to start another"


@dataclass(frozen=True)
class Candidate:
    """A sibling action sampled at a state: the action, log P(completion | prompt), the completion text the policy
    wrote (e.g. "SEARCH: Mirrow") and the prompt it was written after (the state, as training sees it)."""

    action: Action
    logprob: float | None
    completion: str | None = None
    prompt: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"action": action_to_dict(self.action)["action"], "argument": action_argument(self.action),
                "logprob": self.logprob, "completion": self.completion}


@dataclass
class LivePolicy:
    """A policy ready for one episode: `policy` follows the EpisodePolicy protocol (begin/act; an LM policy may also
    `prepare` its next decision and render its `lm.prompt`); `choice` how it was picked (e.g. "oracle", "lm:r3"),
    `label` its name in the store. `sample` is set when the policy can sample K sibling candidates at a state."""

    choice: str
    label: str
    policy: EpisodePolicy
    adapter: str | None = None
    sample: Callable[[AgentView, int, float, int], list[Candidate]] | None = None


def free_question(text: str, dataset: str) -> Question:
    """A typed question: no gold answer, no gold passages (the retrieval bonus is then 0)."""
    text = " ".join(text.split())
    qid = "free-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return Question(id=qid, dataset=dataset, question=text, answers=())


@dataclass
class LiveEpisode:
    question: Question
    runtime: Runtime
    env: RagEnv
    judge: OverrideJudge
    policy: LivePolicy
    store: Store | None = None
    db_id: int | None = None
    overrides: dict[int, Verdict] = field(default_factory=dict)
    candidates: list[dict[str, Any]] = field(default_factory=list)  # siblings sampled at the current state
    candidate_actions: list[Action] = field(default_factory=list)
    candidate_prompt: str | None = None  # the prompt the candidates were sampled after
    candidates_t: int | None = None
    proposal: Proposal | None = None  # the policy's proposal at the current state, once asked for
    corrections: dict[int, Correction] = field(default_factory=dict)  # t -> a human step that replaced a proposal
    step_seconds: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # store problems etc., shown once then cleared
    _busy: threading.Lock = field(default_factory=threading.Lock, repr=False)
    preparing: threading.Thread | None = field(default=None, repr=False)  # idle-time prefill for the next step
    _view: AgentView | None = field(default=None, init=False, repr=False)  # the latest observation's view (set by open)
    _ended: bool = field(default=False, init=False, repr=False)  # the last step terminated or truncated

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """One action at a time on an episode (Step and Run to end, say, are separate events that could overlap)."""
        if not self._busy.acquire(blocking=False):
            raise ValueError("this episode is busy with another action; wait for it to finish")
        try:
            yield
        finally:
            self._busy.release()

    # -- construction ---------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, runtime: Runtime, question: Question, policy: LivePolicy, store: Store | None = None, *,
             stage: str, schedule: str, preset: str, free: bool = False) -> "LiveEpisode":
        """Reset the environment on `question` (`free`: a typed question, searched over the file's pooled corpus),
        store the running episode, and start preparing the policy's first decision."""
        judge = OverrideJudge(GoldCoverageJudge())
        env = _make_env(runtime, question, judge, free)
        policy.policy.begin(question)
        meta = {"policy": policy.choice, "label": policy.label, "adapter": policy.adapter,
                "data": runtime.dataset.path}
        observation = env.reset(question, stage=stage, schedule=schedule, preset=preset, meta=meta)
        episode = cls(question, runtime, env, judge, policy, store)
        episode._view = observation.view
        episode._save_start()
        episode.prepare_next()
        return episode

    # -- reading -----------------------------------------------------------------------------------------------------
    @property
    def record(self) -> EpisodeRecord:
        """The environment's record with the human overrides applied (rewards and return recomputed)."""
        record = self.env.record
        for t, verdict in sorted(self.overrides.items()):
            record = apply_override(record, t, verdict)
        return record

    @property
    def done(self) -> bool:
        return self._ended

    def _now(self) -> AgentView:
        """The state the next step acts on; EnvStateError once the episode has ended."""
        if self._ended or self._view is None:
            raise EnvStateError(_ENDED)
        return self._view

    def passages(self, step: StepRecord | None) -> tuple[Passage, ...]:
        return tuple(self.env.passage(pid) for pid in step.passages) if step else ()

    # -- acting ------------------------------------------------------------------------------------------------------
    def step(self) -> StepRecord:
        """The policy's step (its proposal at this state when it was asked for, else its decision now)."""
        with self.exclusive():
            view = self._now()
            start = time.perf_counter()
            proposed = self.proposal
            if proposed is not None and proposed.t == view.t and proposed.live:  # asked for already: not twice
                action, info = proposed.action, proposed.info
            else:
                action, info = self.policy.policy.act(view)
            return self._apply(action, info, start)

    def _apply(self, action: Action, info: Mapping[str, Any], start: float) -> StepRecord:
        result = self.env.step(action, info=info)
        self.step_seconds.append(time.perf_counter() - start)
        self._view, self._ended = result.observation.view, result.terminated or result.truncated
        siblings = self.candidates if self.candidates_t == result.record.t else []
        self.candidates, self.candidate_actions, self.candidates_t, self.candidate_prompt = [], [], None, None
        self.proposal = None
        self._save_step(result.record, siblings)
        self.prepare_next()
        return result.record

    # -- a person acting in the policy's place -------------------------------------------------------------------
    def propose(self) -> Proposal:
        """What the policy would do at the current state (computed once per state; the next Step takes it)."""
        with self.exclusive():
            return self._propose()

    def _propose(self) -> Proposal:
        view = self._now()
        if self.proposal is not None and self.proposal.t == view.t:
            return self.proposal
        policy = self.policy.policy
        live = bool(getattr(policy, "acts_on_view", False))  # an LM: its decision depends on the state only
        action, info = (policy if live else copy.deepcopy(policy)).act(view)  # a plan-consuming policy: on a copy
        render = getattr(getattr(policy, "lm", None), "prompt", None)
        self.proposal = Proposal(view.t, action, dict(info), completion_of(action, info),
                                 render(view) if render is not None else None, live)
        return self.proposal

    def act_as_human(self, action: Action, who: str) -> tuple[StepRecord, Correction | None]:
        """Step with a person's action instead of the policy's. The step records that a human took it (and who)
        and what the policy proposed there; where the two differ, the correction is kept (`corrections[t]`) for a
        human-correction pair. The policy goes on from the new state with the next Step."""
        with self.exclusive():
            start = time.perf_counter()
            proposal = self._propose()
            try:
                correction = correction_of(proposal, action)
            except ValueError:  # no LM prompt (oracle, script): the step is still a human step, without a pair
                correction = None
            info = step_info(actor="human", annotator=who or "anonymous", proposal=proposal.completion)
            record = self._apply(action, info, start)
            if correction is not None:
                self.corrections[record.t] = correction
            return record, correction

    def prepare_next(self) -> None:
        """While the person reads the step, compute the next greedy decision in a background thread
        (`LMPolicy.prepare`: prompts, label scores and argument; the next Step's `act` returns it at once). It holds
        the model's lock like any LM call, so a click waits for it rather than racing it; a failure only costs the
        speed-up."""
        prepare = getattr(self.policy.policy, "prepare", None)
        if prepare is None or self._ended or not self.runtime.cfg.studio.prepare_next:
            return
        view = self._now()

        def run() -> None:
            try:
                prepare(view)
            except Exception:  # noqa: BLE001 - idle-time work: log, never disturb the episode
                log.exception("preparing the next step failed (the step itself will run normally)")

        self.preparing = threading.Thread(target=run, name="evorag-prepare", daemon=True)
        self.preparing.start()

    def override(self, t: int, answerable: bool, who: str) -> StepRecord:
        """A person's verdict for step t: the refusal signal, R_t and the return are recomputed at once; the step's
        row (signals, R_t) and the episode's return change in the store in one transaction."""
        with self.exclusive():
            steps = {s.t: s for s in self.env.record.steps}
            if t not in steps or steps[t].verdict is None:
                judged = [s.t for s in self.env.record.steps if s.verdict is not None]
                raise ValueError(f"step t={t} has no judge verdict to override; judged steps: {judged or 'none'}")
            self.overrides[t] = self.judge.set_override(self.record.episode_id, t, answerable, who or None)
            step = next(s for s in self.record.steps if s.t == t)
            if self.store is not None and self.db_id is not None:
                self._store_call(self.store.set_override_rescored, self.db_id, t, verdict_name(answerable),
                                 who or "anonymous", signals=dict(step.signals), reward=float(step.reward))
                if self.done:
                    self._save_finish()
            return step

    # -- sibling candidates ------------------------------------------------------------------------------------------
    def set_candidates(self, candidates: list[Candidate]) -> None:
        self.candidate_actions = [c.action for c in candidates]
        self.candidates = [c.as_dict() for c in candidates]
        self.candidate_prompt = next((c.prompt for c in candidates if c.prompt), None)
        self.candidates_t = self._view.t

    def score_candidates(self, horizon: int, on_progress: Callable[[int, int], None] | None = None,
                         stop: threading.Event | None = None) -> bool:
        """Continue each sibling branch with the episode's policy for at most `horizon` steps after the candidate
        (to the episode's end if it comes first); the branch return is the sum of R_t from the branch point on.
        Branches run on the live environment from a snapshot, which is restored afterwards. `on_progress(done,
        total)` after each branch; a set `stop` ends the scoring at the next policy step and returns False with no
        candidate changed (the returns are written only once every branch is scored)."""
        if not self.candidates:
            raise ValueError("sample candidates first")
        if horizon < 0:
            raise ValueError(f"the branch horizon must be >= 0, got {horizon}")
        with self.exclusive():
            scored = self._score(horizon, on_progress, stop or threading.Event())
        if scored is None:
            return False
        for cand, (total, steps, cut) in zip(self.candidates, scored):
            cand["branch_return"], cand["branch_steps"], cand["branch_cut"] = total, steps, cut
        return True

    def _score(self, horizon: int, on_progress: Callable[[int, int], None] | None, stop: threading.Event
               ) -> list[tuple[float, int, bool]] | None:
        snap = self.env.snapshot()
        scored: list[tuple[float, int, bool]] = []
        try:
            for action in self.candidate_actions:
                self.env.restore(snap)
                total, steps = self.env.step(action).reward, 1
                while not self.env.done and steps <= horizon:
                    if stop.is_set():
                        return None
                    next_action, info = self.policy.policy.act(self.env.view())
                    total += self.env.step(next_action, info=info).reward
                    steps += 1
                scored.append((float(total), steps, not self.env.done))
                if on_progress is not None:
                    on_progress(len(scored), len(self.candidate_actions))
                if stop.is_set():
                    return None
        finally:
            self.env.restore(snap)
        return scored

    # -- store mirroring ---------------------------------------------------------------------------------------------
    def _store_call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (StoreError, SQLAlchemyError, KeyError, ValueError) as exc:
            log.warning("store write failed: %s", exc)
            self.notes.append(f"not saved to the store: {exc}")
            return None

    def _save_start(self) -> None:
        if self.store is None:
            return
        rec = self.env.record
        config = {"preset": rec.preset, "t_max": rec.t_max, "top_k": rec.top_k, "adapter": self.policy.adapter,
                  "data": self.runtime.dataset.path, "episode_key": rec.episode_id}
        self.db_id = self._store_call(
            self.store.add_episode, question_id=self.question.id, dataset=rec.dataset, question=rec.question,
            policy=self.policy.label, stage=rec.stage, schedule=rec.schedule, config=config, status="running",
            source="studio", adapter=self.policy.adapter, data_path=str(self.runtime.dataset.path),
        )

    def _save_step(self, step: StepRecord, siblings: list[dict[str, Any]]) -> None:
        """The step's row with its siblings, its judge's verdict (if it has one) and, when it ended the episode,
        the episode's end: one store call, one transaction."""
        if self.store is None or self.db_id is None:
            return
        from evorag_core.store import Sibling

        found = tuple(Sibling(c["action"], c.get("argument"), c.get("logprob"), c.get("branch_return"))
                      for c in siblings)
        self._store_call(self.store.add_step, self.db_id, store_step(step, found),
                         judge=step.verdict.judge if step.verdict is not None else None,
                         finish=episode_finish(self.record, self.question) if self._ended else None)

    def _save_finish(self) -> None:
        """The episode's end: its return (overrides applied), status and graded outcome (EM/F1 None without gold)."""
        finish = episode_finish(self.record, self.question)
        self._store_call(self.store.finish_episode, self.db_id, total_return=finish.total_return,
                         status=finish.status, outcome=finish.outcome)

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes


def _make_env(runtime: Runtime, question: Question, judge: OverrideJudge, free: bool) -> RagEnv:
    if not free:
        return runtime.make_env(question, judge)
    corpus = runtime.pooled_corpus  # a typed question searches the file's whole (pooled) corpus
    return RagEnv(corpus, runtime.retrieval.retriever_for(corpus), runtime.embed, judge, runtime.cfg.env,
                  runtime.cfg.reward, WeightTable.from_config(runtime.cfg.weights))
