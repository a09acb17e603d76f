"""LoRA adapters produced by training rounds; at most one is active (also enforced by a unique partial index).

Rows are registered inactive; `evorag_core.adapters.registry.activate` is the one way to make one live (it verifies the folder,
then calls `mark_adapter_active`)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from evorag_core.errors import StoreError
from evorag_core.store.base import StoreBase, check_choice, utcnow
from evorag_core.store.records import ACTIVATION_KINDS, ADAPTER_ROLES, Adapter
from evorag_core.store.schema import activations, adapters

__all__ = ["AdapterOps"]


class AdapterOps(StoreBase):
    def register_adapter(
        self,
        name: str,
        path: str,
        *,
        base_model: str,
        round_id: int | None = None,
        objective: str | None = None,
        checksum: str | None = None,
        metrics: Mapping[str, Any] | None = None,
        role: str = "policy",
    ) -> Adapter:
        """Record a saved adapter (name must be new), inactive: `evorag_core.adapters.registry.activate` verifies it and makes it
        the active one. `role`: what it is applied to when live (evorag_core/adapters/role.py)."""
        check_choice("role", role, ADAPTER_ROLES)
        row = {"name": name, "path": str(path), "base_model": base_model, "round_id": round_id,
               "objective": objective, "checksum": checksum, "metrics": dict(metrics or {}),
               "active": False, "created_at": utcnow(), "role": role}
        try:
            with self._write() as conn:
                conn.execute(adapters.insert().values(**row))
        except IntegrityError as exc:
            raise StoreError(f"cannot register adapter {name!r} (name taken or round unknown): {exc.orig}") from exc
        return self.get_adapter(name)

    def get_adapter(self, name: str) -> Adapter:
        with self._read() as conn:
            row = conn.execute(select(adapters).where(adapters.c.name == name)).mappings().first()
        if row is None:
            raise KeyError(f"no adapter named {name!r}")
        return Adapter(**row)

    def list_adapters(self) -> list[Adapter]:
        """Oldest first."""
        with self._read() as conn:
            return [Adapter(**row) for row in conn.execute(select(adapters).order_by(adapters.c.id)).mappings()]

    def mark_adapter_active(self, name: str, *, kind: str = "activated", reason: str | None = None,
                            who: str | None = None, promotion_id: int | None = None) -> Adapter:
        """Make `name` the only active adapter, and log why (`kind`, `reason`, `who`, the promotion report), in one
        transaction (all adapter rows locked on PostgreSQL).

        This only flips the row and checks nothing: activate through `evorag_core.adapters.registry.activate`, which verifies the
        adapter's files, checksum and base model first (the CLI, the studio and the curriculum all do)."""
        check_choice("kind", kind, ACTIVATION_KINDS)
        with self._write() as conn:
            lock_all = select(adapters.c.name).order_by(adapters.c.id).with_for_update()  # id order: no deadlock
            if name not in set(conn.scalars(lock_all)):
                raise KeyError(f"no adapter named {name!r}")
            conn.execute(adapters.update().where(adapters.c.active, adapters.c.name != name).values(active=False))
            conn.execute(adapters.update().where(adapters.c.name == name).values(active=True))
            conn.execute(activations.insert().values(adapter=name, kind=kind, reason=reason, who=who,
                                                     promotion_id=promotion_id, created_at=utcnow()))
            return Adapter(**conn.execute(select(adapters).where(adapters.c.name == name)).mappings().one())

    def deactivate_adapters(self, *, who: str | None = None, reason: str | None = None) -> int:
        """No adapter active afterwards (the base model is used, and the activation log says so when one was
        active); returns how many were active."""
        with self._write() as conn:
            n = conn.execute(adapters.update().where(adapters.c.active).values(active=False)).rowcount
            if n:
                conn.execute(activations.insert().values(adapter=None, kind="deactivated", reason=reason, who=who,
                                                         created_at=utcnow()))
            return n

    def active_adapter(self) -> Adapter | None:
        with self._read() as conn:
            row = conn.execute(select(adapters).where(adapters.c.active)).mappings().first()
        return Adapter(**row) if row is not None else None
