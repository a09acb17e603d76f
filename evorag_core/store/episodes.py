"""Episodes with their steps and sibling candidates: written once (or step by step), read back whole."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import IntegrityError

from evorag_core.errors import StoreError
from evorag_core.store.base import StoreBase, check_choice, utcnow
from evorag_core.store.judgments import insert_judgment
from evorag_core.store.records import EPISODE_SOURCES, STEP_ACTORS, Episode, Finish, Outcome, Sibling, Step
from evorag_core.store.schema import episodes, siblings, steps

__all__ = ["EpisodeOps"]

_EPISODE_COLUMNS = [c for c in episodes.c]


def _insert_steps(conn: Connection, episode_id: int, new_steps: Iterable[Step]) -> None:
    for step in new_steps:
        check_choice("step actor", step.actor, STEP_ACTORS)
        step_id = conn.execute(
            steps.insert().values(
                episode_id=episode_id,
                t=step.t,
                action=step.action,
                argument=step.argument,
                passages=list(step.passages),
                signals=dict(step.signals),
                weights=dict(step.weights),
                reward=step.reward,
                judge_verdict=step.judge_verdict,
                actor=step.actor,
                annotator=step.annotator,
            )
        ).inserted_primary_key[0]
        if step.siblings:
            conn.execute(
                siblings.insert(),
                [
                    {"step_id": step_id, "action": s.action, "argument": s.argument,
                     "logprob": s.logprob, "branch_return": s.branch_return}
                    for s in step.siblings
                ],
            )


def _outcome_values(outcome: Outcome | None) -> dict[str, Any]:
    if outcome is None:
        return {}
    return {"answer": outcome.answer, "em": outcome.em, "f1": outcome.f1, "refused": outcome.refused}


def _finish(conn: Connection, episode_id: int, finish: Finish) -> None:
    values = {"status": finish.status, "total_return": finish.total_return, "finished_at": utcnow(),
              **_outcome_values(finish.outcome)}
    done = conn.execute(episodes.update().where(episodes.c.id == episode_id).values(**values))
    if done.rowcount != 1:
        raise KeyError(f"no episode {episode_id}")


def _episode(row: Mapping[str, Any], loaded: tuple[Step, ...] | None) -> Episode:
    return Episode(**{c.name: row[c.name] for c in _EPISODE_COLUMNS}, steps=loaded)


def _load_steps(conn: Connection, episode_id: int) -> tuple[Step, ...]:
    step_rows = conn.execute(select(steps).where(steps.c.episode_id == episode_id).order_by(steps.c.t)).mappings()
    step_rows = list(step_rows)
    by_step: dict[int, list[Sibling]] = {row["id"]: [] for row in step_rows}
    if by_step:
        query = select(siblings).where(siblings.c.step_id.in_(list(by_step))).order_by(siblings.c.id)
        for s in conn.execute(query).mappings():
            by_step[s["step_id"]].append(Sibling(s["action"], s["argument"], s["logprob"], s["branch_return"]))
    return tuple(
        Step(
            t=row["t"], action=row["action"], argument=row["argument"], passages=tuple(row["passages"]),
            signals=row["signals"], weights=row["weights"], reward=row["reward"],
            judge_verdict=row["judge_verdict"], siblings=tuple(by_step[row["id"]]), actor=row["actor"],
            annotator=row["annotator"],
        )
        for row in step_rows
    )


class EpisodeOps(StoreBase):
    def add_episode(
        self,
        *,
        question_id: str,
        dataset: str,
        question: str,
        policy: str,
        stage: str,
        schedule: str,
        config: Mapping[str, Any] | None = None,
        steps: Sequence[Step] = (),
        status: str = "finished",
        total_return: float | None = None,
        source: str | None = None,
        adapter: str | None = None,
        data_path: str | None = None,
        run: str | None = None,
        outcome: Outcome | None = None,
    ) -> int:
        """Store an episode (and its steps, if any) in one transaction; returns its id. `source` is one of
        EPISODE_SOURCES (where it came from); `outcome` the graded end (answer, EM, F1, refused), if known."""
        if source is not None:
            check_choice("source", source, EPISODE_SOURCES)
        now = utcnow()
        try:
            with self._write() as conn:
                episode_id = conn.execute(
                    episodes.insert().values(
                        question_id=question_id, dataset=dataset, question=question, policy=policy, stage=stage,
                        schedule=schedule, config=dict(config or {}), status=status, total_return=total_return,
                        created_at=now, finished_at=None if status == "running" else now, source=source,
                        adapter=adapter, data_path=data_path, run=run, n_steps=len(steps),
                        **_outcome_values(outcome),
                    )
                ).inserted_primary_key[0]
                _insert_steps(conn, episode_id, steps)
        except IntegrityError as exc:
            raise StoreError(f"cannot store the episode of question {question_id!r}: {exc.orig}") from exc
        return int(episode_id)

    def add_step(self, episode_id: int, step: Step, *, judge: str | None = None, finish: Finish | None = None
                 ) -> None:
        """Append one step to a running episode (the unique (episode, t) key refuses a duplicate t). In the same
        transaction: with `judge`, the step's verdict (`step.judge_verdict`) recorded as that judge's judgment (as
        `record_judgment`); with `finish`, the episode's end (as `finish_episode`). The live episode writes each
        step so, in one call."""
        try:
            with self._write() as conn:
                _insert_steps(conn, episode_id, [step])
                conn.execute(episodes.update().where(episodes.c.id == episode_id)
                             .values(n_steps=func.coalesce(episodes.c.n_steps, 0) + 1))
                if judge is not None:
                    insert_judgment(conn, episode_id, step.t, judge, step.judge_verdict or "", None,
                                    is_override=False)
                if finish is not None:
                    _finish(conn, episode_id, finish)
        except IntegrityError as exc:
            raise StoreError(f"cannot add step t={step.t} to episode {episode_id}: {exc.orig}") from exc

    def finish_episode(self, episode_id: int, *, total_return: float, status: str = "finished",
                       outcome: Outcome | None = None) -> None:
        """Mark the episode ended with its return (and, when graded, its outcome)."""
        with self._write() as conn:
            _finish(conn, episode_id, Finish(total_return, status, outcome))

    def count_finished_episodes(self, *, stage: str | None = None) -> int:
        """How many episodes are not running (what GRPO/PPO rounds read), optionally of one stage."""
        query = select(func.count()).select_from(episodes).where(episodes.c.status != "running")
        if stage is not None:
            query = query.where(episodes.c.stage == stage)
        with self._read() as conn:
            return int(conn.scalar(query) or 0)

    def get_episode(self, episode_id: int) -> Episode:
        """The episode with its steps (ordered by t) and their siblings; KeyError if there is none."""
        with self._read() as conn:
            row = conn.execute(select(episodes).where(episodes.c.id == episode_id)).mappings().first()
            if row is None:
                raise KeyError(f"no episode {episode_id}")
            return _episode(row, _load_steps(conn, episode_id))

    def list_episodes(
        self,
        *,
        dataset: str | None = None,
        question_id: str | None = None,
        policy: str | None = None,
        run: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
    ) -> list[Episode]:
        """Newest first, without steps (`steps` is None); `run`: the episodes of one evaluation or rollout run."""
        query = select(episodes).order_by(episodes.c.id.desc()).limit(limit).offset(offset)
        for column, value in (("dataset", dataset), ("question_id", question_id), ("policy", policy), ("run", run)):
            if value is not None:
                query = query.where(episodes.c[column] == value)
        with self._read() as conn:
            return [_episode(row, None) for row in conn.execute(query).mappings()]
