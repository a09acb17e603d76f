"""Preference pairs and their queue: queued -> claimed(round) -> consumed, or released back to queued.

Nothing is deleted: a person discards a pair (status 'discarded') and may restore it. `claim_pairs` is atomic:
on PostgreSQL the queued rows are picked with SELECT ... FOR UPDATE SKIP LOCKED, on SQLite the transaction holds
the write lock from BEGIN IMMEDIATE; the UPDATE is conditional on status='queued' either way, and the claimed
rows are read back by (id, round), so a pair is never handed to two claimers.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, overload

from sqlalchemy import Connection, Select, func, select

from evorag_core.errors import StoreError
from evorag_core.store.base import StoreBase, check_choice, utcnow
from evorag_core.store.records import PAIR_SOURCES, PAIR_STATUSES, NewPair, Pair
from evorag_core.store.schema import pairs, rounds

__all__ = ["PairOps", "GROUPABLE", "lock_round", "release_round_pairs"]

GROUPABLE: tuple[str, ...] = ("status", "source", "annotator", "stage", "round_id")
_CLAIMING_ROUND_STATUSES = ("queued", "running")


class _Unset(Enum):
    UNSET = "unset"


UNSET = _Unset.UNSET


def _new_row(p: NewPair, now: datetime) -> dict[str, Any]:
    check_choice("source", p.source, PAIR_SOURCES)
    return {
        "prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected, "source": p.source,
        "annotator": p.annotator, "margin": p.margin, "stage": p.stage, "status": "queued", "round_id": None,
        "created_at": now, "updated_at": now, "metadata": dict(p.metadata),
    }


def _filtered(query: Select[Any], filters: Mapping[str, Any]) -> Select[Any]:
    if filters.get("status") is not None:
        check_choice("status", filters["status"], PAIR_STATUSES)
    for name, value in filters.items():
        if value is not None:
            query = query.where(pairs.c[name] == value)
    return query


def lock_round(conn: Connection, round_id: int) -> str:
    """Lock the round's row (PostgreSQL; SQLite already holds the write lock) and return its status.
    Round row first, then its pairs: every writer takes the locks in this order."""
    status = conn.scalar(select(rounds.c.status).where(rounds.c.id == round_id).with_for_update())
    if status is None:
        raise KeyError(f"no round {round_id}")
    return status


def release_round_pairs(conn: Connection, round_ids: Sequence[int], now: datetime) -> int:
    """Put every pair claimed by these rounds back in the queue; returns how many."""
    if not round_ids:
        return 0
    result = conn.execute(
        pairs.update()
        .where(pairs.c.round_id.in_(list(round_ids)), pairs.c.status == "claimed")
        .values(status="queued", round_id=None, updated_at=now)
    )
    return result.rowcount


class PairOps(StoreBase):
    def add_pair(
        self,
        prompt: str,
        chosen: str,
        rejected: str,
        *,
        source: str = "rollout",
        annotator: str | None = None,
        margin: float | None = None,
        stage: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> int:
        """Queue one pair (`chosen` preferred over `rejected` at state `prompt`); returns its id."""
        new = NewPair(prompt, chosen, rejected, source, annotator, margin, stage, dict(metadata or {}))
        return self.add_pairs([new])[0]

    def add_pairs(self, batch: Iterable[NewPair]) -> list[int]:
        """Queue many pairs in one transaction; returns their ids in input order."""
        now = utcnow()
        rows = [_new_row(p, now) for p in batch]
        if not rows:
            return []
        with self._write() as conn:
            result = conn.execute(pairs.insert().returning(pairs.c.id, sort_by_parameter_order=True), rows)
            return [int(i) for i in result.scalars()]

    def get_pair(self, pair_id: int) -> Pair:
        with self._read() as conn:
            row = conn.execute(select(pairs).where(pairs.c.id == pair_id)).mappings().first()
        if row is None:
            raise KeyError(f"no pair {pair_id}")
        return Pair(**row)

    def list_pairs(
        self,
        *,
        status: str | None = None,
        source: str | None = None,
        annotator: str | None = None,
        stage: str | None = None,
        round_id: int | None = None,
        limit: int | None = 100,
        offset: int = 0,
    ) -> list[Pair]:
        """Pairs matching every given filter, oldest first."""
        filters = {"status": status, "source": source, "annotator": annotator, "stage": stage, "round_id": round_id}
        query = _filtered(select(pairs), filters).order_by(pairs.c.id).limit(limit).offset(offset)
        with self._read() as conn:
            return [Pair(**row) for row in conn.execute(query).mappings()]

    @overload
    def count_pairs(self, group_by: str, **filters: Any) -> dict[Any, int]: ...
    @overload
    def count_pairs(self, group_by: Sequence[str] = (), **filters: Any) -> dict[tuple[Any, ...], int]: ...

    def count_pairs(self, group_by: str | Sequence[str] = (), **filters: Any) -> dict[Any, int]:
        """Counts by one column (`count_pairs("status") -> {"queued": 3, ...}`) or by several
        (`count_pairs(("source", "status")) -> {("human", "queued"): 2, ...}`; `()` -> `{(): total}`).
        Keyword filters are those of `list_pairs`; groups with no pair are absent."""
        names = (group_by,) if isinstance(group_by, str) else tuple(group_by)
        for name in names:
            check_choice("group_by", name, GROUPABLE)
        for name in filters:
            check_choice("filter", name, GROUPABLE)
        columns = [pairs.c[name] for name in names]
        query = _filtered(select(*columns, func.count()).select_from(pairs), filters).group_by(*columns)
        with self._read() as conn:
            rows = conn.execute(query).all()
        if isinstance(group_by, str):
            return {row[0]: row[1] for row in rows}
        return {tuple(row[:-1]): row[-1] for row in rows}

    def update_pair(
        self,
        pair_id: int,
        *,
        prompt: str | _Unset = UNSET,
        chosen: str | _Unset = UNSET,
        rejected: str | _Unset = UNSET,
        annotator: str | None | _Unset = UNSET,
        margin: float | None | _Unset = UNSET,
        stage: str | None | _Unset = UNSET,
        metadata: Mapping[str, Any] | _Unset = UNSET,
    ) -> Pair:
        """Edit the content of a pair (not its queue status); fields left out keep their value."""
        given = {"prompt": prompt, "chosen": chosen, "rejected": rejected, "annotator": annotator,
                 "margin": margin, "stage": stage, "metadata": metadata}
        values = {k: (dict(v) if k == "metadata" else v) for k, v in given.items() if v is not UNSET}
        return self._set(pair_id, values, allowed_from=PAIR_STATUSES)

    def discard_pair(self, pair_id: int) -> Pair:
        """Mark a pair 'discarded' (kept in the database, never trained on). A claimed pair is refused."""
        return self._set(pair_id, {"status": "discarded"}, allowed_from=("queued", "consumed", "discarded"))

    def restore_pair(self, pair_id: int) -> Pair:
        """Put a discarded pair back in the queue."""
        return self._set(pair_id, {"status": "queued", "round_id": None}, allowed_from=("discarded",))

    def claim_pairs(self, round_id: int, n: int, *, source: str | None = None, stage: str | None = None,
                    after: int = 0) -> list[Pair]:
        """Atomically move up to `n` of the oldest queued pairs to 'claimed' by `round_id` and return them; with
        `after`, only pairs stored after the pair of that id (`last_pair_id()` before a rollout: its own pairs)."""
        if n < 1:
            raise ValueError(f"n must be at least 1; got {n}")
        with self._write() as conn:
            status = lock_round(conn, round_id)
            if status not in _CLAIMING_ROUND_STATUSES:
                raise StoreError(f"round {round_id} is {status}; only a queued or running round can claim pairs")
            pick = _filtered(select(pairs.c.id), {"status": "queued", "source": source, "stage": stage})
            if after:
                pick = pick.where(pairs.c.id > after)
            pick = pick.order_by(pairs.c.id).limit(n).with_for_update(skip_locked=True)
            ids = list(conn.scalars(pick))
            if not ids:
                return []
            conn.execute(
                pairs.update()
                .where(pairs.c.id.in_(ids), pairs.c.status == "queued")
                .values(status="claimed", round_id=round_id, updated_at=utcnow())
            )
            mine = select(pairs).where(pairs.c.id.in_(ids), pairs.c.round_id == round_id, pairs.c.status == "claimed")
            return [Pair(**row) for row in conn.execute(mine.order_by(pairs.c.id)).mappings()]

    def last_pair_id(self) -> int:
        """The id of the newest stored pair (0: none yet); ids only grow, so pairs stored later have larger ones."""
        with self._read() as conn:
            return int(conn.scalar(select(func.max(pairs.c.id))) or 0)

    def release_pairs(self, round_id: int) -> int:
        """Return the round's claimed pairs to the queue; returns how many."""
        with self._write() as conn:
            lock_round(conn, round_id)
            return release_round_pairs(conn, [round_id], utcnow())

    def consume_pairs(self, round_id: int) -> int:
        """Mark the round's claimed pairs consumed (trained on); returns how many."""
        with self._write() as conn:
            lock_round(conn, round_id)
            result = conn.execute(
                pairs.update()
                .where(pairs.c.round_id == round_id, pairs.c.status == "claimed")
                .values(status="consumed", updated_at=utcnow())
            )
            return result.rowcount

    def _set(self, pair_id: int, values: dict[str, Any], *, allowed_from: tuple[str, ...]) -> Pair:
        with self._write() as conn:
            status = conn.scalar(select(pairs.c.status).where(pairs.c.id == pair_id).with_for_update())
            if status is None:
                raise KeyError(f"no pair {pair_id}")
            if status not in allowed_from:
                raise StoreError(f"pair {pair_id} is {status}; expected one of {', '.join(allowed_from)}")
            if values:
                conn.execute(pairs.update().where(pairs.c.id == pair_id).values(**values, updated_at=utcnow()))
            return Pair(**conn.execute(select(pairs).where(pairs.c.id == pair_id)).mappings().one())
