"""The policy language model: loading, the backend protocol, the transformers backend and the agent policy."""
from __future__ import annotations

from .agent import LMPolicy, PolicyDecision, allowed_actions
from .base import Generation, PolicyBackend, encode_pair
from .hf_backend import TransformersBackend
from .loading import load_model, resolve_model

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
