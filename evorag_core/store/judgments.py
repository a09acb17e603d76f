"""Sufficiency judgments per step, and human overrides: the latest override wins over every judge."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import IntegrityError

from evorag_core.errors import StoreError
from evorag_core.store.base import StoreBase, utcnow
from evorag_core.store.records import Judgment
from evorag_core.store.schema import episodes, judgments, steps

__all__ = ["JudgmentOps", "HUMAN", "insert_judgment"]

HUMAN = "human"


def insert_judgment(conn: Connection, episode_id: int, t: int, judge: str, verdict: str, who: str | None, *,
                    is_override: bool) -> Judgment:
    """One judgment row, inside the caller's transaction (every writer of judgments goes through here)."""
    if not verdict:
        raise ValueError("a judgment needs a verdict")
    row: dict[str, Any] = {"episode_id": episode_id, "t": t, "judge": judge, "verdict": verdict,
                           "is_override": is_override, "who": who, "created_at": utcnow()}
    new_id = conn.execute(judgments.insert().values(**row)).inserted_primary_key[0]
    return Judgment(id=int(new_id), **row)


class JudgmentOps(StoreBase):
    def record_judgment(self, episode_id: int, t: int, *, judge: str, verdict: str, who: str | None = None) -> Judgment:
        """A judge's verdict (e.g. judge 'llm', verdict 'insufficient') on the evidence at step t."""
        return self._add_judgment(episode_id, t, judge, verdict, who, is_override=False)

    def set_override(self, episode_id: int, t: int, verdict: str, who: str) -> Judgment:
        """A person's verdict for step t; it wins over every judge, and a later override wins over it."""
        if not who:
            raise ValueError("an override needs the name of who made it")
        return self._add_judgment(episode_id, t, HUMAN, verdict, who, is_override=True)

    def set_override_rescored(self, episode_id: int, t: int, verdict: str, who: str, *, signals: dict[str, float],
                              reward: float) -> Judgment:
        """`set_override` and, in the same transaction, step t's recomputed signals and reward and the episode's
        return (the sum of its steps' rewards, when the episode has ended): a stored episode's `ref` follows a
        person's verdict as a live one's does. KeyError if the episode has no step t."""
        if not who:
            raise ValueError("an override needs the name of who made it")
        with self._write() as conn:
            done = conn.execute(steps.update().where(steps.c.episode_id == episode_id, steps.c.t == t)
                                .values(signals=dict(signals), reward=float(reward)))
            if done.rowcount != 1:
                raise KeyError(f"episode {episode_id} has no step t={t}")
            judgment = insert_judgment(conn, episode_id, t, HUMAN, verdict, who, is_override=True)
            total = select(func.sum(steps.c.reward)).where(steps.c.episode_id == episode_id).scalar_subquery()
            conn.execute(episodes.update().where(episodes.c.id == episode_id, episodes.c.status != "running")
                         .values(total_return=total))
        return judgment

    def judgments(self, episode_id: int, t: int | None = None) -> list[Judgment]:
        """All judgments of an episode (or of one step), oldest first."""
        query = select(judgments).where(judgments.c.episode_id == episode_id).order_by(judgments.c.id)
        if t is not None:
            query = query.where(judgments.c.t == t)
        with self._read() as conn:
            return [Judgment(**row) for row in conn.execute(query).mappings()]

    def effective_verdict(self, episode_id: int, t: int) -> str | None:
        """Latest override, else the latest recorded judgment, else the step's own judge verdict, else None."""
        latest = (
            select(judgments.c.verdict)
            .where(judgments.c.episode_id == episode_id, judgments.c.t == t)
            .order_by(judgments.c.is_override.desc(), judgments.c.id.desc())
            .limit(1)
        )
        with self._read() as conn:
            verdict = conn.scalar(latest)
            if verdict is None:
                verdict = conn.scalar(
                    select(steps.c.judge_verdict).where(steps.c.episode_id == episode_id, steps.c.t == t)
                )
        return verdict

    def _add_judgment(
        self, episode_id: int, t: int, judge: str, verdict: str, who: str | None, *, is_override: bool
    ) -> Judgment:
        try:
            with self._write() as conn:
                return insert_judgment(conn, episode_id, t, judge, verdict, who, is_override=is_override)
        except IntegrityError as exc:
            raise StoreError(f"cannot record a judgment for episode {episode_id}: {exc.orig}") from exc

