"""The policies the studio can run, by name: the oracle, a script, and the language-model policy with or
without a LoRA adapter. `PolicyProvider` loads the language model once per process and swaps adapters.

Policy choices (the dropdown's values):
  "oracle"      the upper bound that reads gold passages (an environment check)
  "script"      replays a JSON list of actions typed in the page
  "lm:live"     the LM with whatever adapter is active when the episode starts (base model if none), in its role:
                a reader adapter (adapters/role.py) reads the answers, the decisions run on the base model
  "lm:base"     the LM without adapter
  "lm:<name>"   the LM with the named adapter
"""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from evorag_core.env.actions import Action
from evorag_core.env.episode import step_info
from evorag_core.config import Config
from evorag_core.errors import ActionParseError, EvoRagError
from evorag_core.live.episode import Candidate, LivePolicy
from evorag_core.methods.oracle import ORACLE_LABEL, OraclePolicy
from evorag_core.methods.script import ScriptPolicy, load_script
from evorag_core.env.state import AgentView
from evorag_core.types import Question

if TYPE_CHECKING:
    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.policy.agent import LMPolicy

__all__ = [
    "FeatureUnavailable",
    "BASE",
    "LIVE",
    "PolicyProvider",
    "policy_choices",
    "parse_script",
]

BASE = "lm:base"
LIVE = "lm:live"


class FeatureUnavailable(EvoRagError):
    """A part of the system the studio would use is not installed or not built yet."""


def parse_script(text: str):
    """A script typed in the page: a JSON list of actions (or an object of lists keyed by question id)."""
    if not text or not text.strip():
        raise ActionParseError("the script policy needs a JSON list of actions, e.g. "
                               '[{"action": "SEARCH", "query": "..."}, {"action": "REFUSE"}]')
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ActionParseError(f"the script is not valid JSON: {exc}") from None
    return load_script(raw)


def policy_choices(adapter_names: Sequence[str]) -> list[tuple[str, str]]:
    """(label, value) pairs for the policy dropdown."""
    out = [("oracle (upper bound, reads gold)", "oracle"), ("script (JSON actions)", "script"),
           ("LM · live adapter", LIVE), ("LM · base model", BASE)]
    out += [(f"LM · adapter {name}", f"lm:{name}") for name in adapter_names]
    return out


class PolicyProvider:
    """Loads the policy language model once (lazily) and hands out per-episode policies.

    The model and its adapters are shared by every browser session; each LM call activates the episode's
    adapter under one lock, so two sessions with different adapters never step on each other.
    """

    def __init__(self, cfg: Config, home: Path):
        self.cfg, self.home = cfg, Path(home)
        self._lock = threading.RLock()
        self._backend: TransformersBackend | None = None
        self._loaded_adapters: dict[str, str] = {}  # name -> path loaded into the backend

    def make(self, choice: str, *, script: str = "", adapter_lookup: Callable[[str | None], Any] | None = None
             ) -> LivePolicy:
        """The policy for `choice` (see the module docstring). `adapter_lookup(name)` returns the store's Adapter
        row for a name, or the active adapter (or None) for name None."""
        if choice == "oracle":
            return LivePolicy(choice, ORACLE_LABEL, OraclePolicy())
        if choice == "script":
            return LivePolicy(choice, "script", ScriptPolicy(parse_script(script)))
        if choice.startswith("lm:"):
            return self._lm(choice, adapter_lookup)
        raise ValueError(f"unknown policy {choice!r}; expected oracle, script, {BASE}, {LIVE} or lm:<adapter>")

    def pending_load(self, choice: str, adapter_lookup: Callable[[str | None], Any] | None = None) -> str:
        """What `make(choice)` would load first, said for the page ('' when nothing: not an LM policy, or the model
        and the adapter are loaded already), e.g. "loading adapter r3 into the policy model…"."""
        if not choice.startswith("lm:"):
            return ""
        try:
            adapter = self._adapter_for(choice, adapter_lookup)
        except Exception:  # noqa: BLE001 - only a note: `make` reports the real error
            adapter = None
        with self._lock:
            model = self._backend is None
            load = adapter is not None and self._loaded_adapters.get(adapter.name) != adapter.path
        name = self._model_name()
        if model and load:
            return f"loading the policy model {name} and adapter {adapter.name} into it…"
        if model:
            return f"loading the policy model {name}…"
        return f"loading adapter {adapter.name} into the policy model…" if load else ""

    # -- the language-model policy -----------------------------------------------------------------------------
    def _adapter_for(self, choice: str, adapter_lookup: Callable[[str | None], Any] | None) -> Any:
        if choice == LIVE:
            return adapter_lookup(None) if adapter_lookup else None
        if choice == BASE:
            return None
        if adapter_lookup is None:
            raise FeatureUnavailable("adapters need the store, which is not available")
        return adapter_lookup(choice[3:])

    def _lm(self, choice: str, adapter_lookup: Callable[[str | None], Any] | None) -> LivePolicy:
        """The LM policy with `choice`'s adapter in its role (adapters/role.py): a policy adapter runs every LM call;
        a reader adapter only the answer read (`answer.adapter`), the decisions on the base model."""
        from evorag_core.adapters.role import READER, applied

        adapter = self._adapter_for(choice, adapter_lookup)
        name = adapter.name if adapter is not None else None
        backend = self._get_backend()
        reader = adapter is not None and getattr(adapter, "role", None) == READER
        if reader:
            from evorag_core.adapters.registry import verify_registered

            verify_registered(adapter, backend.model_id)  # the registry's checksum; the reader loads the folder
            with self._lock:
                lm = self._lm_policy(backend, applied(self.cfg, adapter.path, READER)[0].answer)
                self._loaded_adapters[adapter.name] = adapter.path  # loaded (as the reader's): pending_load says so
        else:
            if adapter is not None:
                self._ensure_adapter(backend, adapter)
            lm = self._lm_policy(backend)
        on_policy = None if reader else name  # the adapter the decisions run with
        label = f"LM {self._model_name()}" + (f" + {'reader ' if reader else ''}adapter {name}" if name else " (base)")
        return LivePolicy(
            choice, label, _LockedPolicy(lm, self, on_policy), adapter=name,
            sample=lambda view, k, temperature, seed: self._sample(lm, on_policy, view, k, temperature, seed),
        )

    def backend_for(self, choice: str, adapter_lookup: Callable[[str | None], Any] | None = None
                    ) -> tuple[TransformersBackend, str | None]:
        """(the shared backend, the adapter name or None for the base model) for an LM choice ("lm:base",
        "lm:live" or "lm:<name>"), the model and the adapter loaded; the caller runs it under `lock` after
        `use(name)` (ARENA's generator, which is not an episode policy; a reader adapter is not a generator's, so
        it generates on the base model)."""
        if not choice.startswith("lm:"):
            raise ValueError(f"{choice!r} is not a language-model choice ({BASE}, {LIVE} or lm:<adapter>)")
        adapter = self._adapter_for(choice, adapter_lookup)
        backend = self._get_backend()
        from evorag_core.adapters.role import READER

        if adapter is not None and getattr(adapter, "role", None) == READER:
            adapter = None
        if adapter is not None:
            self._ensure_adapter(backend, adapter)
        return backend, adapter.name if adapter is not None else None

    def model_name(self) -> str:
        """The policy model's name as the page shows it."""
        return self._model_name()

    def warm(self) -> None:
        """Load the language model now and cache the prompt heads every episode shares (`LMPolicy.warm_up`), so the
        first Step after a start is as fast as later ones (FeatureUnavailable when the policy package is missing)."""
        backend = self._get_backend()
        with self._lock:
            self._lm_policy(backend).warm_up()

    def _model_name(self) -> str:
        return "SmolLM2-135M-Instruct" if self.cfg.policy.model == "embedded" else self.cfg.policy.model

    def _get_backend(self):
        with self._lock:
            if self._backend is None:
                try:
                    from evorag_core.lm.hf_backend import TransformersBackend
                except ImportError as exc:
                    raise FeatureUnavailable(f"the LM policy is not available yet (evorag_core.policy: {exc})") from None
                self._backend = TransformersBackend(self.cfg.policy, self.home)
            return self._backend

    def _lm_policy(self, backend: TransformersBackend, answer: Any = None) -> LMPolicy:
        from evorag_core.policy.agent import LMPolicy

        return LMPolicy(backend, self.cfg.policy, answer if answer is not None else self.cfg.answer)

    def _ensure_adapter(self, backend: TransformersBackend, adapter: Any) -> None:
        """Load the store's adapter row onto the backend unless it is loaded from the same folder already,
        verified against the registry's checksum first (`load_verified`: AdapterError if refused)."""
        from evorag_core.adapters.load import load_verified

        with self._lock:
            if self._loaded_adapters.get(adapter.name) != adapter.path:
                self._loaded_adapters.pop(adapter.name, None)
                load_verified(backend, adapter.name, adapter.path, getattr(adapter, "checksum", None))
                self._loaded_adapters[adapter.name] = adapter.path

    def use(self, adapter: str | None) -> None:
        """Make `adapter` (None: the base model) the one the backend runs; call with the lock held."""
        self._backend.activate(adapter)

    def _sample(self, lm, adapter: str | None, view: AgentView, k: int, temperature: float, seed: int
                ) -> list[Candidate]:
        with self._lock:
            self.use(adapter)
            found = lm.candidates(view, k=k, temperature=temperature, seed=seed)
        return [Candidate(c.action, _logprob(c), getattr(c, "completion", None), getattr(c, "prompt", None))
                for c in found]

    @property
    def lock(self) -> threading.RLock:
        return self._lock


class _LockedPolicy:
    """An LMPolicy seen through the EpisodePolicy protocol, with its adapter activated under the lock."""

    acts_on_view = True  # greedy: the decision depends on the state only (the studio asks once, steps with it)

    def __init__(self, lm, provider: PolicyProvider, adapter: str | None):
        self.lm, self.provider, self.adapter = lm, provider, adapter
        self.name = getattr(lm, "name", "lm")

    def begin(self, question: Question) -> None:
        begin = getattr(self.lm, "begin", None)
        if begin is not None:
            begin(question)

    def prepare(self, view: AgentView) -> None:
        """Idle-time computation of the next greedy decision (`LMPolicy.prepare`), under the same lock as act."""
        prepare = getattr(self.lm, "prepare", None)
        if prepare is None:
            return
        with self.provider.lock:
            self.provider.use(self.adapter)
            prepare(view)

    def act(self, view: AgentView) -> tuple[Action, Mapping[str, Any]]:
        with self.provider.lock:
            self.provider.use(self.adapter)
            decision = self.lm.act(view)
        if isinstance(decision, tuple):
            return decision
        return decision.action, _info(decision)


def _logprob(decision: Any) -> float | None:
    value = getattr(decision, "logprob", None)
    return None if value is None else float(value)


def _info(decision: Any) -> dict[str, Any]:
    """What a step records about the LM's decision: log-prob, completion text, and its notes (the fallback when one
    was used, ARENA's reply, the answer's source passage, a withheld span: `env.episode.step_info`)."""
    return step_info(decision)
