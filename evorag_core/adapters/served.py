"""Proving which adapter a policy server serves: the check that catches an adapter that silently never reached the
serving engine (a LoRA load that answered 200 but did nothing, a stale adapter under the same name, files replaced
after the load).

A server cannot be asked for a checksum, so the proof has two halves, both required after every swap:
- the server's half: its model listing (`GET /v1/models`) names the adapter, and the entry's `root` is the folder the
  client asked it to load (vLLM lists a runtime-loaded LoRA as `{"id": lora_name, "root": lora_path, "parent": base}`);
  a listing without the name, or with another folder, or without any folder, is refused;
- the client's half: the weights file in that folder still hashes to the checksum the client verified at load time
  (`evorag_adapter.json`'s sha256, which `registry.verify_registered` tied to the registry row). A folder whose
  files changed since the load is refused: the server holds what was there before, which is no longer what the
  registry says.
The client and the server must see the folder under the same path (shared storage); docs/serving.md says so.

`ServedAdapter` is what the client recorded at load time; `prove_served` is the pure check over a listing; `WeightsHash`
hashes a folder's weights once per (size, mtime) so the check costs one `stat` per swap, not a re-read.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from evorag_core.adapters.files import WEIGHTS_FILE
from evorag_core.checksum import sha256_file
from evorag_core.errors import AdapterError

__all__ = ["ServedAdapter", "WeightsHash", "prove_served", "served_entry"]


@dataclass(frozen=True)
class ServedAdapter:
    """An adapter the client asked the server to load: its name, the folder (absolute) and the weights' sha256."""

    name: str
    path: str
    sha256: str


def served_entry(listing: Sequence[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    """The listing's entry whose id is `name` (None if the server does not list it)."""
    return next((m for m in listing if m.get("id") == name), None)


def prove_served(listing: Sequence[Mapping[str, Any]], adapter: ServedAdapter, current_sha256: str) -> None:
    """Raise AdapterError unless `listing` (the server's /models data) serves `adapter.name` from `adapter.path` and the
    weights there still hash to `adapter.sha256` (`current_sha256`: their hash now)."""
    entry = served_entry(listing, adapter.name)
    if entry is None:
        names = ", ".join(str(m.get("id")) for m in listing) or "nothing"
        raise AdapterError(f"adapter {adapter.name!r} refused: the server does not serve it (it lists {names}); "
                           "the load did not reach the serving engine")
    root = entry.get("root")
    if not root:
        raise AdapterError(f"adapter {adapter.name!r} refused: the server lists the name but not the folder it serves "
                           "it from, so the served weights cannot be checked")
    if Path(str(root)).expanduser().resolve() != Path(adapter.path):
        raise AdapterError(f"adapter {adapter.name!r} refused: the server serves it from {root}, not from "
                           f"{adapter.path} (another adapter under the same name)")
    if current_sha256 != adapter.sha256:
        raise AdapterError(f"adapter {adapter.name!r} refused: {adapter.path}/{WEIGHTS_FILE} now has sha256 "
                           f"{current_sha256[:12]}…, not the {adapter.sha256[:12]}… verified when the server loaded it; "
                           "the server may serve other weights than the registry's")


class WeightsHash:
    """sha256 of an adapter folder's weights file, recomputed only when its size or mtime changed."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int, str]] = {}

    def __call__(self, folder: str | Path) -> str:
        file = Path(folder) / WEIGHTS_FILE
        try:
            stat = file.stat()
        except OSError as exc:
            raise AdapterError(f"{file}: unreadable ({exc})") from None
        key = str(file)
        cached = self._seen.get(key)
        if cached is not None and cached[:2] == (stat.st_size, stat.st_mtime_ns):
            return cached[2]
        digest = sha256_file(file)
        self._seen[key] = (stat.st_size, stat.st_mtime_ns, digest)
        return digest
