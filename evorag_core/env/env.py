"""The EVO-RAG environment (SPEC §1): SEARCH / BACKTRACK / ANSWER / REFUSE over a passage corpus, Gymnasium-style."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from evorag_core.env.actions import Action, Answer, Backtrack, Refuse, Search
from evorag_core.config import EnvConfig, RewardConfig
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.errors import EnvStateError
from evorag_core.env.judges import JudgeRequest, SufficiencyJudge, Verdict
from evorag_core.env.scheduler import PAPER_TABLE, WeightTable, step_reward, weights_at
from evorag_core.env.signals import StepContext, compute_signals
from evorag_core.env.state import AgentView, Hop
from evorag_core.types import Corpus, Passage, Question

__all__ = ["SearchBackend", "Observation", "StepResult", "EnvSnapshot", "RagEnv"]


class _Hit(Protocol):
    pid: str


class SearchBackend(Protocol):
    def search(self, query: str, k: int) -> Sequence[_Hit]: ...


EmbedFn = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Observation:
    view: AgentView
    passages: tuple[Passage, ...] = ()  # what this step's SEARCH returned


@dataclass(frozen=True)
class StepResult:
    observation: Observation
    signals: dict[str, float]
    weights: dict[str, float]
    reward: float
    terminated: bool  # ANSWER or REFUSE
    truncated: bool  # t reached T_max without terminating
    record: StepRecord


@dataclass(frozen=True)
class EnvSnapshot:
    """The whole mutable state of a RagEnv between two steps (immutable parts only, so taking one is O(hops))."""

    record: EpisodeRecord | None
    question: Question | None
    chain: tuple[Hop, ...]
    history_queries: tuple[str, ...]
    history_vecs: tuple[np.ndarray, ...]


class RagEnv:
    """One episode at a time over a fixed corpus and retriever.

    BACKTRACK drops the last hop (its sub-query and passages) from the active chain; the dropped query stays in the
    history used by the overlap penalty. BACKTRACK on an empty chain changes nothing but is still penalized.
    """

    def __init__(
        self,
        corpus: Corpus,
        retriever: SearchBackend,
        embed: EmbedFn,
        judge: SufficiencyJudge,
        env_cfg: EnvConfig = EnvConfig(),
        reward_cfg: RewardConfig = RewardConfig(),
        table: WeightTable = PAPER_TABLE,
    ):
        self.corpus = corpus
        self.retriever = retriever
        self.embed = embed
        self.judge = judge
        self.env_cfg = env_cfg
        self.reward_cfg = reward_cfg
        self.table = table  # the Start / Mid / End weight columns (config [weights])
        self._by_pid: Mapping[str, Passage] = {p.pid: p for p in corpus.passages}
        self._record: EpisodeRecord | None = None
        self._question: Question | None = None
        self._chain: list[Hop] = []
        self._history_queries: list[str] = []
        self._history_vecs: list[np.ndarray] = []

    # -- Gymnasium-style contract -------------------------------------------------------------------------------
    def reset(
        self,
        question: Question,
        *,
        stage: str | None = None,
        schedule: str | None = None,
        preset: str | None = None,
        episode_id: str | None = None,
        meta: Mapping[str, object] | None = None,
    ) -> Observation:
        self._question = question
        self._chain, self._history_queries, self._history_vecs = [], [], []
        self._record = EpisodeRecord(
            episode_id=episode_id or uuid.uuid4().hex[:12],
            question_id=question.id,
            dataset=question.dataset,
            question=question.question,
            stage=stage or self.reward_cfg.stage,
            schedule=schedule or self.reward_cfg.schedule,
            preset=preset or self.reward_cfg.preset,
            t_max=self.env_cfg.t_max,
            top_k=self.env_cfg.top_k,
            gold_pids=tuple(sorted(self.corpus.gold_for(question))),
            gold_answers=question.answers,
            meta=dict(meta or {}),
        )
        return Observation(view=self.view())

    def step(self, action: Action, info: Mapping[str, object] | None = None) -> StepResult:
        rec = self._require_running()
        t = len(rec.steps) + 1
        retrieved: tuple[Passage, ...] = ()
        query_vec = None
        history = np.stack(self._history_vecs) if self._history_vecs else None
        verdict: Verdict | None = None

        if isinstance(action, Search):
            retrieved = self.preview_search(action.query)
            query_vec = np.asarray(self.embed([action.query])[0], dtype=np.float32)
        elif isinstance(action, Refuse):
            verdict = self.judge.judge(
                JudgeRequest(
                    episode_id=rec.episode_id,
                    t=t,
                    question=rec.question,
                    evidence=self.view().passages,
                    gold_pids=frozenset(rec.gold_pids),
                    gold_known=self._question.has_passages,
                )
            )

        ctx = StepContext(
            action=action,
            t=t,
            t_max=rec.t_max,
            retrieved=frozenset(p.pid for p in retrieved),
            gold_pids=frozenset(rec.gold_pids),
            gold_known=self._question.has_passages,
            query_embedding=query_vec,
            history_embeddings=history,
            answerable=verdict.answerable if verdict else None,
            gold_answers=rec.gold_answers,
            redundancy_threshold=self.reward_cfg.redundancy_threshold,
            act_progress=self.reward_cfg.act_progress,
        )
        signals = compute_signals(ctx)
        weights = weights_at(rec.stage, t, rec.t_max, schedule=rec.schedule, preset=rec.preset, table=self.table)
        reward = step_reward(signals, weights)

        if isinstance(action, Search):
            self._chain.append(Hop(action.query, retrieved))
            self._history_queries.append(action.query)
            self._history_vecs.append(query_vec)
        elif isinstance(action, Backtrack) and self._chain:
            self._chain.pop()

        terminated = isinstance(action, (Answer, Refuse))
        truncated = not terminated and t >= rec.t_max
        step = StepRecord(
            t=t,
            action=action,
            passages=tuple(p.pid for p in retrieved),
            signals=signals,
            weights=weights,
            reward=reward,
            verdict=verdict,
            info=dict(info or {}),
        )
        self._record = replace(rec, steps=rec.steps + (step,), truncated=truncated)
        return StepResult(
            observation=Observation(view=self.view(), passages=retrieved),
            signals=signals,
            weights=weights,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            record=step,
        )

    def preview_search(self, query: str) -> tuple[Passage, ...]:
        """The passages a SEARCH for `query` would return (retrieval is stateless); changes nothing."""
        return tuple(self._by_pid[h.pid] for h in self.retriever.search(query, self.env_cfg.top_k))

    # -- branching ----------------------------------------------------------------------------------------------
    def snapshot(self) -> EnvSnapshot:
        """The current state; `restore(snap)` returns to it (e.g. to continue several sibling branches from one
        state). Records, hops and query vectors are immutable, so nothing is deep-copied. The judge is not part of
        the snapshot (the gold judge is stateless; an OverrideJudge keeps its overrides)."""
        return EnvSnapshot(
            self._record, self._question, tuple(self._chain), tuple(self._history_queries), tuple(self._history_vecs)
        )

    def restore(self, snap: EnvSnapshot) -> None:
        self._record, self._question = snap.record, snap.question
        self._chain = list(snap.chain)
        self._history_queries = list(snap.history_queries)
        self._history_vecs = list(snap.history_vecs)

    # -- read-only views ----------------------------------------------------------------------------------------
    def view(self) -> AgentView:
        rec = self._record
        if rec is None:
            raise EnvStateError("call reset() before view()")
        active = [h.query for h in self._chain]
        dropped = list(self._history_queries)
        for q in active:  # history minus the active chain = the backtracked queries
            dropped.remove(q)
        return AgentView(
            question=rec.question,
            chain=tuple(self._chain),
            dropped=tuple(dropped),
            t=len(rec.steps) + 1,
            t_max=rec.t_max,
        )

    @property
    def record(self) -> EpisodeRecord:
        if self._record is None:
            raise EnvStateError("call reset() before reading the episode record")
        return self._record

    @property
    def done(self) -> bool:
        return self._record is not None and self._record.done

    def passage(self, pid: str) -> Passage:
        return self._by_pid[pid]

    def _require_running(self) -> EpisodeRecord:
        if self._record is None or self._question is None:
            raise EnvStateError("call reset() before step()")
        if self._record.done:
            raise EnvStateError("the episode has ended; call reset() to start another")
        return self._record
