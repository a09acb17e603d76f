"""Activating a registered adapter only when it is intact: the adapter registry's one safety rule.

`verify_registered` checks the folder (`evorag_core.adapters.files.verify_adapter`: files, sha256 against its metadata, base
model id, LoRA shapes) and that the weights are still the ones the registry recorded (its checksum column).
`activate` runs it before flipping the active row, so a corrupt or incompatible adapter is refused with an
`AdapterError` (saying what stays live) and the adapter active before stays active.

`activate` is the one activation path: `evorag adapters activate`, the studio's Activate button, the curriculum and
the GPU check call it; the store's `mark_adapter_active` only flips the row. Running backends follow the active row
through `evorag_core.adapters.watcher.AdapterWatcher`, which runs `verify_registered` again before loading (the folder
may have changed since activation).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from evorag_core.errors import AdapterError

from evorag_core.adapters.files import META_FILE, read_adapter_meta, verify_adapter

if TYPE_CHECKING:
    from torch import nn

    from evorag_core.store import Adapter, Store

__all__ = ["verify_registered", "activate", "adapter_json"]


def verify_registered(adapter: Adapter, base_model_id: str, model: nn.Module | None = None) -> None:
    """Raise AdapterError unless the store's `adapter` row points to an intact adapter for `base_model_id`."""
    path = Path(adapter.path)
    try:
        verify_adapter(path, base_model_id, model)
    except AdapterError as exc:
        raise AdapterError(f"adapter {adapter.name!r} refused: {exc}") from None
    recorded = adapter.checksum
    if recorded and read_adapter_meta(path).get("sha256") != recorded:
        raise AdapterError(
            f"adapter {adapter.name!r} refused: {path / META_FILE} records other weights than the registry "
            f"(sha256 {recorded[:12]}…); the folder was replaced after registration"
        )


def activate(store: Store, name: str, base_model_id: str) -> Adapter:
    """Verify adapter `name`, then make it the active one; returns its row. KeyError if it is not registered;
    AdapterError, naming the adapter that stays live, if it is corrupt, missing or fits another base model."""
    row = store.get_adapter(name)
    try:
        verify_registered(row, base_model_id)
    except AdapterError as exc:
        live = store.active_adapter()
        kept = f"adapter {live.name} stays live" if live is not None else "the base model stays live"
        raise AdapterError(f"{exc}; not activated: {kept}") from None
    return store.mark_adapter_active(name)


def adapter_json(adapter: Adapter) -> dict[str, Any]:
    """The CLI's JSON form: {name, round, objective, path, active, created, metrics}."""
    return {
        "name": adapter.name, "round": adapter.round_id, "objective": adapter.objective, "path": adapter.path,
        "active": bool(adapter.active), "created": adapter.created_at.isoformat(), "metrics": dict(adapter.metrics),
    }
