"""Registering and activating an adapter only when it is intact: the adapter registry's one safety rule.

`verify_folder` checks a folder (`evorag_core.adapters.files.verify_adapter`: files, sha256 against its metadata, base
model id, LoRA shapes, finite tensors) and, given the registry's checksum, that the weights are still the ones the
registry recorded; `verify_registered` runs it on a store row. `register_verified` runs it before recording a new row
(a training round registers through it, so a diverged round registers nothing), and `activate` before flipping the
active row, so a corrupt, non-finite or incompatible adapter is refused with an `AdapterError` (saying what stays
live) and the adapter active before stays active.

`activate` is the one activation path (and it applies gated promotion's rule: an adapter whose evaluation did not
pass goes live only with a stated reason, logged as forced): `evorag adapters activate`, the studio's Activate button, the curriculum and
the GPU check call it; the store's `mark_adapter_active` only flips the row. Loading onto a backend goes through
`evorag_core.adapters.load.load_verified`, which runs `verify_folder` again (the folder may have changed since
activation); the hot-swap watcher (`evorag_core.adapters.watcher.AdapterWatcher`) follows the active row with it.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from evorag_core.errors import AdapterError

from evorag_core.adapters.files import META_FILE, read_adapter_meta, verify_adapter

if TYPE_CHECKING:
    from torch import nn

    from evorag_core.store import Adapter, Store

__all__ = ["verify_folder", "verify_registered", "register_verified", "activate", "adapter_json"]


def verify_folder(name: str, path: Path | str, base_model_id: str, checksum: str | None = None,
                  model: nn.Module | None = None) -> None:
    """Raise AdapterError (naming adapter `name`) unless `path` holds an intact adapter for `base_model_id` whose
    weights, when `checksum` (the registry's sha256) is given, are the ones the registry recorded."""
    path = Path(path)
    try:
        verify_adapter(path, base_model_id, model)
    except AdapterError as exc:
        raise AdapterError(f"adapter {name!r} refused: {exc}") from None
    if checksum and read_adapter_meta(path).get("sha256") != checksum:
        raise AdapterError(
            f"adapter {name!r} refused: {path / META_FILE} records other weights than the registry "
            f"(sha256 {checksum[:12]}…); the folder was replaced after registration"
        )


def verify_registered(adapter: Adapter, base_model_id: str, model: nn.Module | None = None) -> None:
    """Raise AdapterError unless the store's `adapter` row points to an intact adapter for `base_model_id`."""
    verify_folder(adapter.name, adapter.path, base_model_id, adapter.checksum, model)


def register_verified(store: Store, name: str, path: Path | str, *, base_model_id: str, checksum: str,
                      round_id: int | None = None, objective: str | None = None,
                      metrics: Mapping[str, Any] | None = None, role: str = "policy") -> Adapter:
    """Verify the folder (`verify_folder` against `checksum`), then record it in the store as adapter `name`
    (inactive, in `role`: adapters/role.py); returns its row. AdapterError, and nothing recorded, if it is corrupt,
    non-finite or foreign."""
    verify_folder(name, path, base_model_id, checksum)
    return store.register_adapter(name, str(path), base_model=base_model_id, round_id=round_id,
                                  objective=objective, checksum=checksum, metrics=metrics, role=role)


def activate(store: Store, name: str, base_model_id: str, *, kind: str = "activated", reason: str | None = None,
             who: str | None = None, promotion_id: int | None = None) -> Adapter:
    """Verify adapter `name`, then make it the active one, logging why (`kind`, `reason`, `who`); returns its row.

    Gated promotion (evorag_core/promotion/): an adapter whose newest promotion report did not pass (worse, not
    shown better, or no verdict) is activated only with a `reason`, logged as kind "forced". KeyError if it is not
    registered; AdapterError, naming the adapter that stays live, if it is corrupt, missing, fits another base
    model, or failed its evaluation and no reason was given."""
    row = store.get_adapter(name)
    live = store.active_adapter()
    kept = f"adapter {live.name} stays live" if live is not None else "the base model stays live"
    try:
        verify_registered(row, base_model_id)
    except AdapterError as exc:
        raise AdapterError(f"{exc}; not activated: {kept}") from None
    reason = (reason or "").strip() or None
    if kind != "promoted":
        reports = store.list_promotions(name)
        if reports and reports[-1].passed is not True:
            if reason is None:
                raise AdapterError(f"adapter {name!r} did not pass its evaluation ({reports[-1].verdict}); "
                                   f"activating it anyway needs a reason; not activated: {kept}")
            kind = "forced"
        promotion_id = promotion_id if promotion_id is not None else (reports[-1].id if reports else None)
    return store.mark_adapter_active(name, kind=kind, reason=reason, who=who, promotion_id=promotion_id)


def adapter_json(adapter: Adapter) -> dict[str, Any]:
    """The CLI's JSON form: {name, round, objective, role, path, active, created, metrics}."""
    return {
        "name": adapter.name, "round": adapter.round_id, "objective": adapter.objective, "role": adapter.role,
        "path": adapter.path,
        "active": bool(adapter.active), "created": adapter.created_at.isoformat(), "metrics": dict(adapter.metrics),
    }
