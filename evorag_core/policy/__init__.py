"""The policy language model: loading, the backend protocol, the transformers backend and the agent policy."""
from __future__ import annotations

from evorag_core.policy.agent import LMPolicy, PolicyDecision, allowed_actions
from evorag_core.policy.base import Generation, PolicyBackend, encode_pair
from evorag_core.policy.hf_backend import TransformersBackend
from evorag_core.policy.loading import load_model, resolve_model

__all__ = [
    "Generation",
    "PolicyBackend",
    "encode_pair",
    "TransformersBackend",
    "load_model",
    "resolve_model",
    "LMPolicy",
    "PolicyDecision",
    "allowed_actions",
]
