"""The policy backend the settings name (transformers, vLLM in process, or a served model), optionally with an adapter loaded: the one place
every method, command and the studio build their language model from."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from evorag_core.adapters.load import load_verified
from evorag_core.adapters.resolve import resolve_adapter
from evorag_core.config import PolicyConfig
from evorag_core.lm.base import PolicyBackend

if TYPE_CHECKING:
    from evorag_core.runtime import Runtime

__all__ = ["policy_backend", "load_backend"]


def policy_backend(cfg: PolicyConfig, home: Path) -> PolicyBackend:
    """The backend `cfg.backend` names (a PolicyConfig): transformers (default), vLLM, or "openai" (an
    OpenAI-compatible server at `cfg.base_url`, lm/openai_backend.py)."""
    if cfg.backend == "openai":
        from evorag_core.lm.openai_backend import OpenAIBackend

        return OpenAIBackend(cfg, home)
    if cfg.backend == "vllm":
        from evorag_core.lm.vllm_backend import VLLMBackend

        return VLLMBackend(cfg, home)
    from evorag_core.lm.hf_backend import TransformersBackend

    return TransformersBackend(cfg, home)


def load_backend(rt: Runtime, adapter: str | None = None) -> tuple[PolicyBackend, str | None]:
    """The configured policy backend (`policy_backend`), with `adapter` (store name or folder) verified and loaded
    (`load_verified`: a registered name is checked against the registry's checksum)."""
    source = resolve_adapter(adapter, rt.home) if adapter else None  # a bad name fails before the model loads
    backend = policy_backend(rt.cfg.policy, rt.home)
    if source is None:
        return backend, None
    load_verified(backend, source.name, source.folder, source.checksum)
    return backend, source.name
