"""One browser session's live episode: settings, environment, policy, record with human overrides, siblings.

An `EpisodeSession` is kept in a `gr.State`; it is mutated in place by the handlers (one session, one user, one
event at a time) and every change is mirrored to the store when the store is available. A store failure never
stops the episode: it is reported in `notes` and shown in the page.
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
from evorag_core.env.episode import EpisodeRecord, StepRecord, apply_override
from evorag_core.errors import ConfigError, EnvStateError, StoreError
from evorag_core.env.judges import GoldCoverageJudge, OverrideJudge, Verdict
from evorag_core.runtime import Runtime
from evorag_core.env.scheduler import PRESETS, SCHEDULES, STAGES, WeightTable
from evorag_core.types import Passage, Question

from app.common.human import Correction, Proposal, completion_of, correction_of
from app.common.policies import Candidate, StudioPolicy

if TYPE_CHECKING:
    from evorag_core.store import Store

__all__ = ["EpisodeSettings", "EpisodeSession", "free_question", "verdict_name"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeSettings:
    data_path: str = ""  # empty: the studio's default data file
    question_id: str = ""  # empty: the first question of the file
    free_question: str = ""  # when set, asked instead of question_id, over the file's pooled corpus
    policy: str = "oracle"
    stage: str = "discovery"
    schedule: str = "time-dynamic"
    preset: str = "full"
    script: str = ""

    def check(self) -> None:
        for what, value, allowed in (("stage", self.stage, STAGES), ("schedule", self.schedule, SCHEDULES),
                                     ("preset", self.preset, tuple(PRESETS))):
            if value not in allowed:
                raise ConfigError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")


def free_question(text: str, dataset: str) -> Question:
    """A typed question: no gold answer, no gold passages (the retrieval bonus is then 0)."""
    text = " ".join(text.split())
    qid = "free-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return Question(id=qid, dataset=dataset, question=text, answers=())


def verdict_name(answerable: bool) -> str:
    return "answerable" if answerable else "unanswerable"


@dataclass
class EpisodeSession:
    settings: EpisodeSettings
    question: Question
    runtime: Runtime
    env: RagEnv
    judge: OverrideJudge
    policy: StudioPolicy
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
    def start(cls, settings: EpisodeSettings, runtime: Runtime, policy: StudioPolicy, store: Store | None = None
              ) -> "EpisodeSession":
        settings.check()
        if settings.free_question.strip():
            question = free_question(settings.free_question, runtime.dataset.name)
        elif settings.question_id:
            question = runtime.dataset.get(settings.question_id)
        else:
            question = runtime.dataset.questions[0]
        judge = OverrideJudge(GoldCoverageJudge())
        env = _make_env(runtime, question, judge, bool(settings.free_question.strip()))
        policy.policy.begin(question)
        meta = {"policy": policy.choice, "label": policy.label, "adapter": policy.adapter,
                "data": runtime.dataset.path}
        env.reset(question, stage=settings.stage, schedule=settings.schedule, preset=settings.preset, meta=meta)
        session = cls(settings, question, runtime, env, judge, policy, store)
        session._save_start()
        session.prepare_next()
        return session

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
        return self.env.done

    def passages(self, step: StepRecord | None) -> tuple[Passage, ...]:
        return tuple(self.env.passage(pid) for pid in step.passages) if step else ()

    # -- acting ------------------------------------------------------------------------------------------------------
    def step(self) -> StepRecord:
        with self.exclusive():
            return self._step()

    def _step(self) -> StepRecord:
        if self.env.done:
            raise EnvStateError("the episode has ended; press Reset to start another")
        start = time.perf_counter()
        view = self.env.view()
        proposed = self.proposal
        if proposed is not None and proposed.t == view.t and proposed.live:  # asked for already: not computed twice
            action, info = proposed.action, proposed.info
        else:
            action, info = self.policy.policy.act(view)
        return self._apply(action, info, start)

    def _apply(self, action: Action, info: Mapping[str, Any], start: float) -> StepRecord:
        result = self.env.step(action, info=info)
        self.step_seconds.append(time.perf_counter() - start)
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
        if self.env.done:
            raise EnvStateError("the episode has ended; press Reset to start another")
        view = self.env.view()
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
            if self.env.done:
                raise EnvStateError("the episode has ended; press Reset to start another")
            start = time.perf_counter()
            proposal = self._propose()
            try:
                correction = correction_of(proposal, action)
            except ValueError:  # no LM prompt (oracle, script): the step is still a human step, without a pair
                correction = None
            info = {"actor": "human", "annotator": who or "anonymous", "proposal": proposal.completion}
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
        if prepare is None or self.env.done or not self.runtime.cfg.studio.prepare_next:
            return
        view = self.env.view()

        def run() -> None:
            try:
                prepare(view)
            except Exception:  # noqa: BLE001 - idle-time work: log, never disturb the episode
                log.exception("preparing the next step failed (the step itself will run normally)")

        self.preparing = threading.Thread(target=run, name="evorag-prepare", daemon=True)
        self.preparing.start()

    def override(self, t: int, answerable: bool, who: str) -> StepRecord:
        """A person's verdict for step t: the refusal signal, R_t and the return are recomputed at once."""
        with self.exclusive():
            return self._override(t, answerable, who)

    def _override(self, t: int, answerable: bool, who: str) -> StepRecord:
        steps = {s.t: s for s in self.env.record.steps}
        if t not in steps or steps[t].verdict is None:
            judged = [s.t for s in self.env.record.steps if s.verdict is not None]
            raise ValueError(f"step t={t} has no judge verdict to override; judged steps: {judged or 'none'}")
        verdict = self.judge.set_override(self.record.episode_id, t, answerable, who or None)
        self.overrides[t] = verdict
        if self.store is not None and self.db_id is not None:
            # one recomputation, stored once: the step's row (signals, R_t) and the episode's return change with
            # the override in one transaction, so a trace shows what this page shows
            step = next(s for s in self.record.steps if s.t == t)
            self._store_call(self.store.set_override_rescored, self.db_id, t, verdict_name(answerable),
                             who or "anonymous", signals=dict(step.signals), reward=float(step.reward))
            if self.done:
                self._store_call(self.store.finish_episode, self.db_id, total_return=self.record.total_return,
                                 status=self._final_status(), outcome=self._outcome())
        return next(s for s in self.record.steps if s.t == t)

    def set_candidates(self, candidates: list[Candidate]) -> None:
        self.candidate_actions = [c.action for c in candidates]
        self.candidates = [c.as_dict() for c in candidates]
        self.candidate_prompt = next((c.prompt for c in candidates if c.prompt), None)
        self.candidates_t = self.env.view().t

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
        if self.store is None or self.db_id is None:
            return
        from evorag_core.store import Sibling, Step

        act = action_to_dict(step.action)
        row = Step(
            t=step.t, action=act["action"], argument=act.get("query") or act.get("answer"),
            passages=tuple(step.passages), signals=dict(step.signals), weights=dict(step.weights),
            reward=step.reward, judge_verdict=verdict_name(step.verdict.answerable) if step.verdict else None,
            siblings=tuple(Sibling(c["action"], c.get("argument"), c.get("logprob"), c.get("branch_return"))
                           for c in siblings),
            actor=str(step.info.get("actor", "policy")), annotator=step.info.get("annotator"),
        )
        self._store_call(self.store.add_step, self.db_id, row)
        if step.verdict is not None:
            self._store_call(self.store.record_judgment, self.db_id, step.t, judge=step.verdict.judge,
                             verdict=verdict_name(step.verdict.answerable))
        if self.env.done:
            self._store_call(self.store.finish_episode, self.db_id, total_return=self.record.total_return,
                             status=self._final_status(), outcome=self._outcome())

    def _final_status(self) -> str:
        return "truncated" if self.env.record.truncated else "finished"

    def _outcome(self):
        """The graded end for the store's outcome columns (EM/F1 None for a question without gold)."""
        from evorag_core.store import Outcome

        from app.common.grading_view import episode_grade

        rec = self.record
        grade = episode_grade(self.question, rec)
        return Outcome(rec.answer, grade.em if grade else None, grade.f1 if grade else None, rec.refused)

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes


def _make_env(runtime: Runtime, question: Question, judge: OverrideJudge, free: bool) -> RagEnv:
    if not free:
        return runtime.make_env(question, judge)
    corpus = runtime.pooled_corpus  # a typed question searches the file's whole (pooled) corpus
    return RagEnv(corpus, runtime.retrieval.retriever_for(corpus), runtime.embed, judge, runtime.cfg.env,
                  runtime.cfg.reward, WeightTable.from_config(runtime.cfg.weights))
