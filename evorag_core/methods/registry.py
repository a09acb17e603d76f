"""The one method registry: every answering method by name, built from a runtime and typed options. `evorag eval`,
`evorag run`, the studio's Evaluate tab and the benchmarks build methods here.

`build_method("agent", rt, MethodOptions(adapter="round-3"))` -> a `Method` (`run_question(question) ->
QuestionResult`, `name`, `label`). Builders load what they need (the policy LM, a trained controller) when called."""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from evorag_core.errors import ConfigError
from evorag_core.methods.agent import build_agent_method
from evorag_core.methods.arena.method import build_arena_method
from evorag_core.methods.base import EpisodeMethod, MethodOptions, QuestionResult
from evorag_core.methods.baselines import BASELINES, build_baseline
from evorag_core.methods.dynakrag.method import build_dynakrag_method
from evorag_core.methods.oracle import OraclePolicy
from evorag_core.methods.r2ag.method import build_r2ag_method
from evorag_core.methods.script import ScriptPolicy, load_script
from evorag_core.types import Question

if TYPE_CHECKING:
    from evorag_core.runtime import Runtime

__all__ = ["Method", "MethodOptions", "METHODS", "LM_FREE_METHODS", "build_method"]


class Method(Protocol):
    """What the evaluator runs: one question in, one result out."""

    name: str
    label: str

    def run_question(self, question: Question) -> QuestionResult: ...


Builder = Callable[[MethodOptions, "Runtime"], Method]


def _script(opts: MethodOptions, rt: Runtime) -> Method:
    if opts.script is None:
        raise ConfigError("--method script needs --script FILE")
    return EpisodeMethod(ScriptPolicy(load_script(opts.script)), rt.make_env)


def _baseline(name: str) -> Builder:
    return lambda opts, rt: build_baseline(name, opts, rt)


METHODS: Mapping[str, Builder] = MappingProxyType({
    "script": _script,
    "oracle": lambda opts, rt: EpisodeMethod(OraclePolicy(), rt.make_env),
    "dynakrag": build_dynakrag_method,  # ablations: --set dynakrag.controller=uniform|sufficiency=false|...
    "arena": build_arena_method,
    "r2ag": build_r2ag_method,  # --set r2ag.steering=scripted for the LM-free steering
    "agent": build_agent_method,
    **{name: _baseline(name) for name in BASELINES},
})
LM_FREE_METHODS: tuple[str, ...] = ("oracle", "script")  # need no language model (the studio lists the others)


def build_method(name: str, rt: Runtime, options: MethodOptions | None = None) -> Method:
    """The method `name` on `rt` with `options` (none: the defaults)."""
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; expected one of {', '.join(sorted(METHODS))}")
    return METHODS[name](options if options is not None else MethodOptions(), rt)
