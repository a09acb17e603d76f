"""Training rounds as a leased job queue: queued -> running(lease) -> succeeded | failed | cancelled.

Cancelling: a queued round is cancelled at once; a running one records a cancel request that its worker reads
between training steps (`cancel_requested`) before it stops and calls `confirm_cancel` (pairs released, nothing
consumed). A cancel-requested round whose lease expires is reaped as cancelled, never retried.

A worker claims a round with a lease, heartbeats to extend it, and finishes it. `expire_leases` reaps rounds
whose lease ran out: failed (or queued again while attempts < max_attempts), their claimed pairs released.
A lease is lost only when reaped; until then the owner's heartbeat still extends it.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select

from evorag_core.errors import StoreError
from evorag_core.store.base import StoreBase, check_choice, utcnow
from evorag_core.store.pairs import release_round_pairs
from evorag_core.store.records import ROUND_STATUSES, ExpiryReport, Round
from evorag_core.store.schema import pairs, rounds

__all__ = ["RoundOps"]


def _get(conn: Connection, round_id: int) -> Round:
    row = conn.execute(select(rounds).where(rounds.c.id == round_id)).mappings().first()
    if row is None:
        raise KeyError(f"no round {round_id}")
    return Round(**row)


def _lock(conn: Connection, round_id: int) -> Round:
    row = conn.execute(select(rounds).where(rounds.c.id == round_id).with_for_update()).mappings().first()
    if row is None:
        raise KeyError(f"no round {round_id}")
    return Round(**row)


class RoundOps(StoreBase):
    def enqueue_round(self, objective: str, config: Mapping[str, Any] | None = None, *, max_attempts: int = 1) -> int:
        """Queue a training round; it is retried after an expired lease while attempts < max_attempts."""
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1; got {max_attempts}")
        with self._write() as conn:
            result = conn.execute(
                rounds.insert().values(
                    objective=objective, config=dict(config or {}), status="queued", created_at=utcnow(),
                    attempts=0, max_attempts=max_attempts,
                )
            )
            return int(result.inserted_primary_key[0])

    def get_round(self, round_id: int) -> Round:
        with self._read() as conn:
            return _get(conn, round_id)

    def list_rounds(self, *, status: str | None = None, limit: int = 100) -> list[Round]:
        """Newest first."""
        query = select(rounds).order_by(rounds.c.id.desc()).limit(limit)
        if status is not None:
            check_choice("status", status, ROUND_STATUSES)
            query = query.where(rounds.c.status == status)
        with self._read() as conn:
            return [Round(**row) for row in conn.execute(query).mappings()]

    def claim_round(
        self, worker_id: str, lease_s: float, *, objective: str | None = None, now: datetime | None = None
    ) -> Round | None:
        """Atomically take the oldest queued round (optionally of one objective) with a lease; None if none."""
        if lease_s <= 0:
            raise ValueError(f"lease_s must be positive; got {lease_s}")
        now = now or utcnow()
        pick = select(rounds.c.id).where(rounds.c.status == "queued")
        if objective is not None:
            pick = pick.where(rounds.c.objective == objective)
        pick = pick.order_by(rounds.c.id).limit(1).with_for_update(skip_locked=True)
        with self._write() as conn:
            round_id = conn.scalar(pick)
            if round_id is None:
                return None
            taken = conn.execute(
                rounds.update()
                .where(rounds.c.id == round_id, rounds.c.status == "queued")
                .values(
                    status="running", lease_owner=worker_id, lease_seconds=lease_s,
                    lease_expires_at=now + timedelta(seconds=lease_s), heartbeat_at=now,
                    started_at=func.coalesce(rounds.c.started_at, now), attempts=rounds.c.attempts + 1,
                    error=None,
                )
            )
            return _get(conn, round_id) if taken.rowcount == 1 else None

    def heartbeat(
        self, round_id: int, worker_id: str, progress: Mapping[str, Any] | None = None, *, now: datetime | None = None
    ) -> bool:
        """Extend the lease and record progress ({step, total, loss, eta}). False if the worker no longer
        holds the round (reaped, cancelled, finished): the worker should stop."""
        now = now or utcnow()
        with self._write() as conn:
            current = _lock(conn, round_id)
            if current.status != "running" or current.lease_owner != worker_id:
                return False
            values: dict[str, Any] = {
                "heartbeat_at": now,
                "lease_expires_at": now + timedelta(seconds=current.lease_seconds or 0.0),
            }
            if progress is not None:
                values["progress"] = dict(progress)
            conn.execute(rounds.update().where(rounds.c.id == round_id).values(**values))
            return True

    def finish_round(
        self,
        round_id: int,
        *,
        metrics: Mapping[str, Any] | None = None,
        error: str | None = None,
        worker_id: str | None = None,
    ) -> Round:
        """End a running round: succeeded (its claimed pairs become consumed) or, with `error`, failed
        (its claimed pairs are released). With `worker_id`, refuses unless that worker holds the lease.
        A cancel request that came after the worker's last check (its adapter already registered) is too late:
        the round still succeeds."""
        now = utcnow()
        with self._write() as conn:
            current = _lock(conn, round_id)
            if current.status != "running":
                raise StoreError(f"round {round_id} is {current.status}, not running (was its lease reaped?)")
            if worker_id is not None and current.lease_owner != worker_id:
                raise StoreError(f"round {round_id} is leased to {current.lease_owner!r}, not {worker_id!r}")
            if error is None:
                conn.execute(
                    pairs.update()
                    .where(pairs.c.round_id == round_id, pairs.c.status == "claimed")
                    .values(status="consumed", updated_at=now)
                )
            else:
                release_round_pairs(conn, [round_id], now)
            conn.execute(
                rounds.update()
                .where(rounds.c.id == round_id)
                .values(
                    status="succeeded" if error is None else "failed",
                    metrics=dict(metrics) if metrics is not None else current.metrics,
                    error=error, finished_at=now, lease_expires_at=None,
                )
            )
            return _get(conn, round_id)

    def cancel_round(self, round_id: int, *, now: datetime | None = None) -> Round:
        """Cancel a round. A queued round is cancelled at once (it never starts). A running round gets a cancel
        request (`cancel_requested_at`; status_label "cancelling"): its worker sees it at its next training step
        or phase (`cancel_requested`), stops, and ends the round with `confirm_cancel`, which releases its pairs.
        Asking again is harmless; a finished round is refused with StoreError."""
        now = now or utcnow()
        with self._write() as conn:
            current = _lock(conn, round_id)
            if current.status == "queued":
                release_round_pairs(conn, [round_id], now)
                conn.execute(
                    rounds.update()
                    .where(rounds.c.id == round_id)
                    .values(status="cancelled", cancel_requested_at=now, finished_at=now, lease_expires_at=None)
                )
            elif current.status == "running":
                if current.cancel_requested_at is None:
                    conn.execute(rounds.update().where(rounds.c.id == round_id).values(cancel_requested_at=now))
            else:
                raise StoreError(
                    f"round {round_id} is {current.status}; only a queued or running round can be cancelled"
                )
            return _get(conn, round_id)

    def cancel_requested(self, round_id: int) -> bool:
        """True once someone asked to cancel the round (a cheap read: the worker calls it between steps)."""
        with self._read() as conn:
            when = conn.scalar(select(rounds.c.cancel_requested_at).where(rounds.c.id == round_id))
        return when is not None

    def confirm_cancel(self, round_id: int, *, worker_id: str | None = None) -> Round:
        """The worker stopped a running round whose cancel was requested: status cancelled, its claimed pairs
        back in the queue (none consumed). With `worker_id`, refuses unless that worker holds the lease."""
        now = utcnow()
        with self._write() as conn:
            current = _lock(conn, round_id)
            if current.status != "running" or current.cancel_requested_at is None:
                raise StoreError(f"round {round_id} is {current.status_label}, not a running round asked to cancel")
            if worker_id is not None and current.lease_owner != worker_id:
                raise StoreError(f"round {round_id} is leased to {current.lease_owner!r}, not {worker_id!r}")
            release_round_pairs(conn, [round_id], now)
            conn.execute(
                rounds.update()
                .where(rounds.c.id == round_id)
                .values(status="cancelled", finished_at=now, lease_expires_at=None)
            )
            return _get(conn, round_id)

    def expire_leases(self, now: datetime | None = None) -> ExpiryReport:
        """Reap running rounds whose lease expired before `now`; see the module docstring."""
        now = now or utcnow()
        return self._reap(rounds.c.lease_expires_at < now, now, lambda r: (
            f"attempt {r.attempts}: the lease of worker {r.lease_owner!r} expired at "
            f"{r.lease_expires_at:%Y-%m-%d %H:%M:%S} UTC (last heartbeat {r.heartbeat_at:%H:%M:%S})"))

    def reap_worker(self, owner_prefix: str, why: str) -> ExpiryReport:
        """Reap the running rounds leased to a worker known to be dead (lease owner starting with `owner_prefix`,
        e.g. `host:pid:` of a process that exited) at once, as an expired lease would be, with `why` in the note."""
        if not owner_prefix:
            raise ValueError("owner_prefix must not be empty")
        escaped = owner_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return self._reap(rounds.c.lease_owner.like(f"{escaped}%", escape="\\"), utcnow(),
                          lambda r: f"attempt {r.attempts}: worker {r.lease_owner!r} {why}")

    def _reap(self, which: Any, now: datetime, note: Any) -> ExpiryReport:
        """Running rounds matching `which`: cancelled (if asked to), queued again while attempts remain, else failed
        with `note(round)`; their claimed pairs released - all in one transaction."""
        overdue = (
            select(rounds)
            .where(rounds.c.status == "running", which)
            .order_by(rounds.c.id)
            .with_for_update(skip_locked=True)
        )
        failed: list[int] = []
        requeued: list[int] = []
        cancelled: list[int] = []
        with self._write() as conn:
            for r in [Round(**row) for row in conn.execute(overdue).mappings()]:
                if r.cancel_requested_at is not None:  # asked to cancel and its worker died: cancelled, no retry
                    conn.execute(
                        rounds.update()
                        .where(rounds.c.id == r.id, rounds.c.status == "running")
                        .values(status="cancelled", finished_at=now, lease_expires_at=None)
                    )
                    cancelled.append(r.id)
                    continue
                retry = r.attempts < r.max_attempts
                conn.execute(
                    rounds.update()
                    .where(rounds.c.id == r.id, rounds.c.status == "running")
                    .values(
                        status="queued" if retry else "failed", error=note(r),
                        lease_owner=None if retry else r.lease_owner, lease_expires_at=None,
                        finished_at=None if retry else now,
                    )
                )
                (requeued if retry else failed).append(r.id)
            released = release_round_pairs(conn, failed + requeued + cancelled, now)
        return ExpiryReport(failed=tuple(failed), requeued=tuple(requeued), released_pairs=released,
                            cancelled=tuple(cancelled))
