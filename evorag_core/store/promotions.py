"""Gated promotion's records: promotion reports (an adapter evaluated against the live one or the base model) and
the activation log (why each adapter went live). Reports are written by `evorag_core.promotion.gate`; activation rows
by `AdapterOps.mark_adapter_active` / `deactivate_adapters`, in the transaction that flips the active row."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select

from evorag_core.store.base import StoreBase, utcnow
from evorag_core.store.records import Activation, Promotion
from evorag_core.store.schema import activations, promotions

__all__ = ["PromotionOps"]


class PromotionOps(StoreBase):
    def add_promotion(self, adapter: str, *, against: str | None, metric: str, passed: bool | None, verdict: str,
                      report: Mapping[str, Any], round_id: int | None = None) -> Promotion:
        """Record one promotion report of `adapter` (it must be registered); returns its row."""
        self.get_adapter(adapter)  # type: ignore[attr-defined]  # KeyError for an unknown adapter
        with self._write() as conn:
            new_id = conn.execute(promotions.insert().values(
                adapter=adapter, against=against, round_id=round_id, metric=metric, passed=passed, verdict=verdict,
                report=dict(report), created_at=utcnow())).inserted_primary_key[0]
        return self.get_promotion(int(new_id))

    def get_promotion(self, promotion_id: int) -> Promotion:
        with self._read() as conn:
            row = conn.execute(select(promotions).where(promotions.c.id == promotion_id)).mappings().first()
        if row is None:
            raise KeyError(f"no promotion report {promotion_id}")
        return Promotion(**row)

    def list_promotions(self, adapter: str | None = None) -> list[Promotion]:
        """Reports oldest first (of one adapter, given its name)."""
        query = select(promotions).order_by(promotions.c.id)
        if adapter is not None:
            query = query.where(promotions.c.adapter == adapter)
        with self._read() as conn:
            return [Promotion(**row) for row in conn.execute(query).mappings()]

    def latest_promotions(self) -> dict[str, Promotion]:
        """Each adapter's newest report, by adapter name."""
        newest = select(func.max(promotions.c.id)).group_by(promotions.c.adapter).scalar_subquery()
        with self._read() as conn:
            rows = conn.execute(select(promotions).where(promotions.c.id.in_(newest))).mappings()
            return {row["adapter"]: Promotion(**row) for row in rows}

    def list_activations(self, limit: int = 100) -> list[Activation]:
        """The activation log, newest first."""
        with self._read() as conn:
            rows = conn.execute(select(activations).order_by(activations.c.id.desc()).limit(limit)).mappings()
            return [Activation(**row) for row in rows]

    def last_activation(self) -> Activation | None:
        """Why the model that is live now is live (None: nothing was ever activated)."""
        rows = self.list_activations(limit=1)
        return rows[0] if rows else None
