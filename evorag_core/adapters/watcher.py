"""Hot swap: a running backend follows the store's active adapter without reloading its base model.

`AdapterWatcher.poll()` reads the active adapter row (one cheap query, at most once per `min_interval_s`); when it
names another adapter than the backend runs, the watcher injects it next to the adapters already loaded through the
one load path (`adapters.load.load_verified`: files, checksum against the row's, base model, finite tensors) and
activates it; an adapter loaded before from the same folder is verified again before the switch. No active row
means the base model. A corrupt, non-finite or incompatible adapter is refused: the backend keeps the adapter it
had, and the refusal is remembered (and logged once) until the active row changes again. A served backend
(lm/openai_backend.py) also refuses at the switch when the server cannot be shown to serve the adapter
(adapters/served.py); it then serves no call until the adapter it had is proved again (the next `activate`, e.g.
`PinnedPolicy.act`'s).

A live reader adapter (role "reader", adapters/role.py) is not the policy's: the backend's policy runs the base model,
and `reader` names the adapter the answers are read with (`PinnedPolicy` hands it to its LMPolicy's reader).

Episodes in flight finish on the adapter they started with: `PinnedPolicy.begin()` polls the watcher and pins the
adapter live at that moment, and every decision of the episode re-activates the pinned adapter first (under a lock
shared by the episodes that use the same backend), whatever became active meanwhile.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from evorag_core.adapters.role import READER
from evorag_core.env.actions import Action
from evorag_core.env.episode import step_info
from evorag_core.env.state import AgentView
from evorag_core.errors import AdapterError
from evorag_core.types import Question

if TYPE_CHECKING:
    from evorag_core.store import Adapter, Store

__all__ = ["AdapterWatcher", "PinnedPolicy"]

log = logging.getLogger(__name__)

VerifyFn = Callable[["Adapter", str], None]  # (store Adapter row, base model id) -> raises AdapterError


def _default_verify(adapter: Adapter, base_model_id: str) -> None:
    """The check of `evorag_core.adapters.registry.activate` (the one activation path), run again before switching to
    an adapter loaded earlier: the folder may have changed since the row was activated."""
    from evorag_core.adapters.registry import verify_registered  # peft/safetensors, already loaded by a running backend

    verify_registered(adapter, base_model_id)


class AdapterWatcher:
    """Keeps `backend`'s active adapter equal to the store's active adapter row (see the module docstring)."""

    def __init__(self, store: Store, backend: Any, *, verify: VerifyFn | None = None, min_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.backend = backend
        self.verify = verify or _default_verify
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.current: str | None = backend.active_adapter
        self.refused: dict[tuple[str, str], str] = {}  # (name, path) -> reason
        self.lock = threading.RLock()
        self._loaded: dict[str, str] = {}  # name -> path injected by this watcher
        self.reader: str | None = None  # a live reader adapter's name on the backend (None: none live)
        self.reader_row: tuple[str, str] | None = None  # (name, path) of the live reader adapter loaded
        self._last_poll: float | None = None

    def poll(self, *, force: bool = False) -> str | None:
        """Follow the active row if it changed; returns the adapter the backend now runs (None: base model)."""
        with self.lock:
            now = self.clock()
            if not force and self._last_poll is not None and now - self._last_poll < self.min_interval_s:
                return self.current
            self._last_poll = now
            row = self.store.active_adapter()
            if row is None:
                self._switch(None)
                self.reader = self.reader_row = None
            elif row.role == READER:
                self._follow_reader(row)
            elif row.name != self.current or self._loaded.get(row.name, row.path) != row.path:
                self._follow(row)
                if self.current == row.name:  # followed (a refused one keeps what ran before, a reader too)
                    self.reader = self.reader_row = None
            return self.current

    def _follow_reader(self, row: Adapter) -> None:
        """A live reader adapter (adapters/role.py): the policy runs the base model, the answers are read with it
        (`reader`: the name it is loaded under, its own); refused like a policy adapter, keeping what ran before."""
        key = (row.name, str(row.path))
        if key in self.refused or self.reader_row == key:
            return
        try:
            self._load(row)
        except AdapterError as exc:
            self.refused[key] = str(exc)
            log.error("active reader adapter %s refused, keeping %s: %s", row.name, self.current or "the base model",
                      exc)
            return
        self._switch(None)
        self.reader, self.reader_row = row.name, key
        log.info("hot swap: reader adapter %s is live (%s); the policy runs the base model", row.name, row.path)

    def _follow(self, row: Adapter) -> None:
        key = (row.name, str(row.path))
        if key in self.refused:
            return
        try:
            self._load(row)
            self._switch(row.name)  # a served backend proves here that the server serves it (adapters/served.py)
        except AdapterError as exc:
            self.refused[key] = str(exc)
            log.error("active adapter %s refused, keeping %s: %s", row.name, self.current or "the base model", exc)
            return
        log.info("hot swap: adapter %s is live (%s)", row.name, row.path)

    def _load(self, row: Adapter) -> None:
        """Put the row's adapter on the backend under its name (not activated): loaded through the one load path
        unless this watcher loaded it from the same folder before, then verified again (AdapterError if refused)."""
        if self._loaded.get(row.name) != str(row.path):
            from evorag_core.adapters.load import load_verified

            self._loaded.pop(row.name, None)
            load_verified(self.backend, row.name, row.path, row.checksum)  # verify, unload the old copy, load
            self._loaded[row.name] = str(row.path)
        else:
            self.verify(row, self.backend.model_id)

    def _switch(self, name: str | None) -> None:
        if name != self.current:
            self.backend.activate(name)
            self.current = name


_UNSET = object()


class PinnedPolicy:
    """An `LMPolicy` as an episode policy whose adapter is fixed for the whole episode at `begin()`."""

    name = "lm"

    def __init__(self, lm: Any, watcher: AdapterWatcher):
        self.lm = lm
        self.watcher = watcher
        self.adapter: str | None = None
        self._reader_adapter: Any = _UNSET  # the reader's own adapter before any live reader adapter replaced it

    @property
    def label(self) -> str:
        return f"LM {self.lm.backend.model_id}" + (f" + adapter {self.adapter}" if self.adapter else " (base)")

    def begin(self, question: Question) -> None:
        self.adapter = self.watcher.poll()
        reader = getattr(self.lm, "reader", None)
        if reader is not None:  # a live reader adapter reads this episode's answers; else the configured one
            if self._reader_adapter is _UNSET:
                self._reader_adapter = reader.adapter
            reader.adapter = self.watcher.reader if self.watcher.reader is not None else self._reader_adapter

    def act(self, view: AgentView) -> tuple[Action, Mapping[str, Any]]:
        with self.watcher.lock:
            self.lm.backend.activate(self.adapter)
            decision = self.lm.act(view)
        return decision.action, step_info(decision, adapter=self.adapter)
