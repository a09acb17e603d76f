"""The one way an adapter reaches a backend: verified, then loaded.

`load_verified` runs the registry's check (`registry.verify_folder`: files, sha256 against the folder's metadata and,
given it, against the registry's checksum, base model, LoRA shapes, finite tensors) on the folder right before the
backend reads it, unloads an adapter already loaded under the same name, then loads. Every caller that puts
adapter weights on a backend uses it: the CLI (`lm.backends.load_backend`), the studio's policy loader, the
evaluation pool, the rollout workers, the reader's own adapter, the ablation and the hot-swap watcher. Activation
checked the folder once; weights flipped on disk after that are refused here, at every load.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from evorag_core.adapters.registry import verify_folder
from evorag_core.errors import AdapterError

__all__ = ["load_verified"]


def load_verified(backend: Any, name: str, folder: Path | str, expected_checksum: str | None = None) -> None:
    """Verify adapter folder `folder` for `backend.model_id` (and, when given, against the registry's
    `expected_checksum`), unload `name` if the backend has it loaded, then load the folder as `name` (not activated).
    AdapterError if the folder is refused (the backend is then untouched) or the backend cannot load it."""
    folder = Path(folder).expanduser()
    verify_folder(name, folder, backend.model_id, expected_checksum)
    if name in backend.list_adapters():
        unload = getattr(backend, "unload_adapter", None)
        if unload is None:
            raise AdapterError(f"adapter {name!r} is already loaded and this backend cannot unload it to reload")
        unload(name)
    backend.load_adapter(name, folder)
