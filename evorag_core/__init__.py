"""EVO-RAG Studio's library: phase-aware multi-hop RAG agents, their seven reward signals, preference pairs,
the preference model, adapters, evaluation and the related methods (R²AG, DynaKrag, ARENA).

The public API is importable from here; each name is loaded from its package on first use, so `import evorag_core`
stays light (no torch, no models). The packages, bottom-up: store, data, retrieval, env, adapters, lm, reader,
policy, pairs, preference, methods, live, evaluation, cli (README "Architecture").

    from evorag_core import Runtime, build_method, evaluate, home_dir, load_config, load_dataset
    rt = Runtime(load_config(), home_dir(), load_dataset("data/demo/demo.jsonl"))
    summary, results = evaluate(build_method("oracle", rt), rt.dataset.questions[:5])
"""
from __future__ import annotations

import importlib
from typing import Any

# public name -> the module that defines it (one place; tests/test_architecture.py checks every entry resolves)
_EXPORTS: dict[str, str] = {
    # records, settings, errors, metrics, objectives
    **dict.fromkeys(("Passage", "Question", "Dataset", "Corpus"), "evorag_core.types"),
    **dict.fromkeys(("Config", "load_config", "apply_overrides", "home_dir"), "evorag_core.config"),
    **dict.fromkeys(("EvoRagError", "ConfigError", "AdapterError", "StoreError"), "evorag_core.errors"),
    **dict.fromkeys(("exact_match", "f1_score", "support_recall", "refusal_accuracy"), "evorag_core.metrics"),
    **dict.fromkeys(("OBJECTIVES", "Objective"), "evorag_core.objectives"),
    "Runtime": "evorag_core.runtime",
    # data and retrieval
    **dict.fromkeys(("load_dataset", "write_jsonl"), "evorag_core.data.datasets"),
    "build_corpus": "evorag_core.data.corpus",
    # the environment
    **dict.fromkeys(("Search", "Backtrack", "Answer", "Refuse"), "evorag_core.env.actions"),
    **dict.fromkeys(("RagEnv", "StepResult"), "evorag_core.env.env"),
    "SIGNAL_NAMES": "evorag_core.env.signals",
    **dict.fromkeys(("weights_at", "step_reward", "StageSwitchController"), "evorag_core.env.scheduler"),
    # the policy model and readers
    **dict.fromkeys(("policy_backend", "load_backend"), "evorag_core.lm.backends"),
    "LMPolicy": "evorag_core.policy.agent",
    "Reader": "evorag_core.reader.answers",
    # pairs, preference, adapters
    "run_rollouts": "evorag_core.pairs.rollout",
    "load_rollout": "evorag_core.pairs.persist",
    **dict.fromkeys(("Variant", "rescore", "rescore_rollout"), "evorag_core.pairs.rescore"),
    **dict.fromkeys(("train_preference_model", "RankedPolicy"), "evorag_core.preference"),
    "activate": "evorag_core.adapters.registry",
    "verify_adapter": "evorag_core.adapters.files",
    # methods and evaluation
    **dict.fromkeys(("METHODS", "MethodOptions", "build_method"), "evorag_core.methods.registry"),
    **dict.fromkeys(("evaluate", "summarize", "compare_results"), "evorag_core.evaluation.runner"),
    # the store
    **dict.fromkeys(("Store", "open_store"), "evorag_core.store"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evorag_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
