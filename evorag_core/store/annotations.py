"""The annotation queue (migration 0006): items, one label per annotator and item, and leases like a round's.

Each item goes to `per_item` annotators (the `[annotate] annotators_per_item` setting). `claim_annotation_item`
gives an annotator the oldest item they have neither labelled nor skipped whose labels (skips do not count) plus
the live leases of others are fewer than `per_item`, with a lease of `lease_s` seconds; an annotator who already
holds a live lease gets that item back (a reload shows the same item). Leases that ran out are deleted at the next
claim, so an abandoned item is offered again. Claiming is one transaction: the item row is locked (PostgreSQL:
FOR UPDATE SKIP LOCKED, then counted again under the lock; SQLite: the write lock from BEGIN IMMEDIATE), so no
item is shown to more than `per_item` annotators at once, however many claim together.

A label is accepted from the lease holder, or from anyone while the item still has room (a lease that expired and
was taken by someone else refuses it: StoreError). A reviewer's resolution is kept on the item.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, delete, exists, func, select
from sqlalchemy.exc import IntegrityError

from evorag_core.errors import StoreError
from evorag_core.store.base import StoreBase, check_choice, utcnow
from evorag_core.store.records import (
    ANNOTATION_KINDS,
    ANNOTATION_SOURCES,
    DECISIONS,
    AnnotationItem,
    AnnotationLabel,
    AnnotationProgress,
    NewAnnotationItem,
)
from evorag_core.store.schema import annotation_items as items
from evorag_core.store.schema import annotation_labels as labels
from evorag_core.store.schema import annotation_leases as leases

__all__ = ["AnnotationOps"]

_CANDIDATES = 20  # items examined per claim before giving up on ones locked by concurrent claimers


def _item(conn: Connection, item_id: int) -> AnnotationItem:
    row = conn.execute(select(items).where(items.c.id == item_id)).mappings().first()
    if row is None:
        raise KeyError(f"no annotation item {item_id}")
    return AnnotationItem(**row)


def _counted_labels(item_id: Any):
    """Labels that count towards an item's annotators (every decision but skip)."""
    return select(func.count()).select_from(labels).where(labels.c.item_id == item_id, labels.c.decision != "skip")


def _live_leases(item_id: Any, now: datetime, *, other_than: str | None = None):
    query = select(func.count()).select_from(leases).where(leases.c.item_id == item_id, leases.c.expires_at >= now)
    return query if other_than is None else query.where(leases.c.annotator != other_than)


def _taken(conn: Connection, item_id: int, now: datetime, annotator: str) -> int:
    """How many annotator slots of the item are used by others: their labels and live leases."""
    n_labels = conn.scalar(_counted_labels(item_id).where(labels.c.annotator != annotator)) or 0
    return int(n_labels) + int(conn.scalar(_live_leases(item_id, now, other_than=annotator)) or 0)


def _check_decision(decision: str, ranking: Sequence[Sequence[int]] | None) -> list[list[int]] | None:
    check_choice("decision", decision, DECISIONS)
    if decision != "rank":
        return None
    if not ranking:
        raise ValueError("a 'rank' decision needs a ranking (tiers of candidate indices, best first)")
    return [[int(i) for i in tier] for tier in ranking]


class AnnotationOps(StoreBase):
    def add_annotation_items(self, batch: Sequence[NewAnnotationItem]) -> list[int]:
        """Queue items in one transaction (all or none); an item whose `key` is already queued (or repeated in the
        batch) is left out. Returns the new ids in input order."""
        now = utcnow()
        for new in batch:
            check_choice("kind", new.kind, ANNOTATION_KINDS)
            check_choice("source", new.source, ANNOTATION_SOURCES)
        with self._write() as conn:
            keys = [n.key for n in batch if n.key is not None]
            seen = set(conn.scalars(select(items.c.key).where(items.c.key.in_(keys)))) if keys else set()
            ids = []
            for new in batch:
                if new.key is not None and new.key in seen:
                    continue
                seen.add(new.key)
                row = {"kind": new.kind, "source": new.source, "key": new.key, "payload": dict(new.payload),
                       "created_at": now}
                ids.append(int(conn.execute(items.insert().values(**row)).inserted_primary_key[0]))
            return ids

    def get_annotation_item(self, item_id: int) -> AnnotationItem:
        with self._read() as conn:
            return _item(conn, item_id)

    def list_annotation_items(self, *, kind: str | None = None, limit: int | None = None) -> list[AnnotationItem]:
        """Items, oldest first."""
        query = select(items).order_by(items.c.id).limit(limit)
        if kind is not None:
            check_choice("kind", kind, ANNOTATION_KINDS)
            query = query.where(items.c.kind == kind)
        with self._read() as conn:
            return [AnnotationItem(**row) for row in conn.execute(query).mappings()]

    def annotation_labels(self, item_id: int | None = None, *, annotator: str | None = None) -> list[AnnotationLabel]:
        """Labels (skips included), oldest first."""
        query = select(labels).order_by(labels.c.id)
        if item_id is not None:
            query = query.where(labels.c.item_id == item_id)
        if annotator is not None:
            query = query.where(labels.c.annotator == annotator)
        with self._read() as conn:
            return [AnnotationLabel(**row) for row in conn.execute(query).mappings()]

    def claim_annotation_item(self, annotator: str, *, per_item: int, lease_s: float,
                              now: datetime | None = None) -> AnnotationItem | None:
        """The item to show `annotator` now, leased to them for `lease_s` seconds; None when nothing is open to them.
        See the module docstring for the rule."""
        if not annotator:
            raise ValueError("claiming an item needs the annotator's name")
        if per_item < 1 or lease_s <= 0:
            raise ValueError(f"per_item must be >= 1 and lease_s > 0; got {per_item}, {lease_s}")
        now = now or utcnow()
        until = now + timedelta(seconds=lease_s)
        with self._write() as conn:
            conn.execute(delete(leases).where(leases.c.expires_at < now))
            held = conn.scalar(select(leases.c.item_id).where(leases.c.annotator == annotator)
                               .order_by(leases.c.item_id).limit(1))
            if held is not None:
                conn.execute(leases.update().where(leases.c.item_id == held, leases.c.annotator == annotator)
                             .values(expires_at=until))
                return _item(conn, held)
            mine = exists().where(labels.c.item_id == items.c.id, labels.c.annotator == annotator)
            room = (_counted_labels(items.c.id).scalar_subquery()
                    + _live_leases(items.c.id, now).scalar_subquery()) < per_item
            open_ids = select(items.c.id).where(items.c.resolved_at.is_(None), ~mine, room).order_by(items.c.id)
            for item_id in list(conn.scalars(open_ids.limit(_CANDIDATES))):
                locked = conn.scalar(select(items.c.id).where(items.c.id == item_id)
                                     .with_for_update(skip_locked=True))
                if locked is None or _taken(conn, item_id, now, annotator) >= per_item:
                    continue  # another claimer holds it, or filled it meanwhile
                conn.execute(leases.insert().values(item_id=item_id, annotator=annotator, expires_at=until))
                return _item(conn, item_id)
            return None

    def label_annotation_item(self, item_id: int, annotator: str, decision: str,
                              ranking: Sequence[Sequence[int]] | None = None, *, per_item: int,
                              now: datetime | None = None) -> AnnotationLabel:
        """Record `annotator`'s label and end their lease. StoreError when the item is resolved, already labelled
        by them, or its slots went to others after their lease expired."""
        tiers = _check_decision(decision, ranking)
        now = now or utcnow()
        try:
            with self._write() as conn:
                row = conn.execute(select(items.c.resolved_at).where(items.c.id == item_id).with_for_update()).first()
                if row is None:
                    raise KeyError(f"no annotation item {item_id}")
                if row.resolved_at is not None:
                    raise StoreError(f"item {item_id} was resolved by a reviewer; it takes no more labels")
                if conn.scalar(select(labels.c.id).where(labels.c.item_id == item_id,
                                                         labels.c.annotator == annotator)) is not None:
                    raise StoreError(f"{annotator} has already labelled item {item_id}")
                holds = conn.scalar(select(leases.c.item_id).where(leases.c.item_id == item_id,
                                                                   leases.c.annotator == annotator)) is not None
                if not holds and decision != "skip" and _taken(conn, item_id, now, annotator) >= per_item:
                    raise StoreError(f"item {item_id} went to other annotators after your lease expired; "
                                     "your label was not stored")
                conn.execute(delete(leases).where(leases.c.item_id == item_id, leases.c.annotator == annotator))
                new = {"item_id": item_id, "annotator": annotator, "decision": decision, "ranking": tiers,
                       "created_at": now}
                label_id = conn.execute(labels.insert().values(**new)).inserted_primary_key[0]
        except IntegrityError as exc:
            raise StoreError(f"{annotator} has already labelled item {item_id}") from exc
        return AnnotationLabel(id=int(label_id), **new)

    def undo_last_label(self, annotator: str, *, lease_s: float, now: datetime | None = None) -> AnnotationItem | None:
        """Delete `annotator`'s newest label (of an unresolved item) and lease that item to them again, so it is
        shown next; None when they have nothing to undo. Their other lease, if any, is given back."""
        now = now or utcnow()
        with self._write() as conn:
            last = conn.execute(
                select(labels.c.id, labels.c.item_id).join(items, items.c.id == labels.c.item_id)
                .where(labels.c.annotator == annotator, items.c.resolved_at.is_(None))
                .order_by(labels.c.id.desc()).limit(1)
            ).first()
            if last is None:
                return None
            conn.execute(delete(labels).where(labels.c.id == last.id))
            conn.execute(delete(leases).where(leases.c.annotator == annotator))
            conn.execute(leases.insert().values(item_id=last.item_id, annotator=annotator,
                                                expires_at=now + timedelta(seconds=lease_s)))
            return _item(conn, last.item_id)

    def resolve_annotation_item(self, item_id: int, reviewer: str, decision: str,
                                ranking: Sequence[Sequence[int]] | None = None) -> AnnotationItem:
        """A reviewer's label for the item: it replaces the annotators' labels in exports. Skip is no resolution."""
        if decision == "skip":
            raise ValueError("a resolution is a label: rank, tie, answerable or unanswerable")
        tiers = _check_decision(decision, ranking)
        with self._write() as conn:
            _item(conn, item_id)
            conn.execute(items.update().where(items.c.id == item_id).values(
                resolution={"decision": decision, "ranking": tiers}, resolved_by=reviewer, resolved_at=utcnow()))
            conn.execute(delete(leases).where(leases.c.item_id == item_id))
            return _item(conn, item_id)

    def annotation_progress(self, annotator: str, *, per_item: int, now: datetime | None = None) -> AnnotationProgress:
        """Items `annotator` labelled (a skip is no label: counted apart), skipped, and still open to them; the
        queue's complete items (as many labels as `per_item`, or resolved) of all items."""
        now = now or utcnow()
        n_labels = _counted_labels(items.c.id).scalar_subquery()
        complete = (n_labels >= per_item) | items.c.resolved_at.isnot(None)
        mine = exists().where(labels.c.item_id == items.c.id, labels.c.annotator == annotator)
        with self._read() as conn:
            given = dict(conn.execute(select(labels.c.decision, func.count()).where(
                labels.c.annotator == annotator).group_by(labels.c.decision)).all())
            open_ = conn.scalar(select(func.count()).select_from(items).where(
                items.c.resolved_at.is_(None), ~mine,
                n_labels + _live_leases(items.c.id, now, other_than=annotator).scalar_subquery() < per_item))
            total = conn.scalar(select(func.count()).select_from(items))
            finished = conn.scalar(select(func.count()).select_from(items).where(complete))
        skipped = int(given.pop("skip", 0))
        return AnnotationProgress(int(sum(given.values())), int(open_ or 0), int(finished or 0), int(total or 0),
                                  skipped=skipped)

    def annotation_counts(self) -> dict[str, int]:
        """Items by kind, labels by decision, resolved items and live leases (for `evorag annotate status`)."""
        now = utcnow()
        with self._read() as conn:
            out = {f"items_{k}": n for k, n in conn.execute(
                select(items.c.kind, func.count()).group_by(items.c.kind)).all()}
            out.update({f"labels_{d}": n for d, n in conn.execute(
                select(labels.c.decision, func.count()).group_by(labels.c.decision)).all()})
            out["resolved"] = conn.scalar(select(func.count()).select_from(items)
                                          .where(items.c.resolved_at.isnot(None))) or 0
            out["leases_live"] = conn.scalar(select(func.count()).select_from(leases)
                                             .where(and_(leases.c.expires_at >= now))) or 0
        return out
