"""`agent`: the EVO-RAG LM policy acting in the environment (optionally with a LoRA adapter)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from evorag_core.env.actions import Action, Answer
from evorag_core.env.episode import step_info
from evorag_core.env.state import AgentView
from evorag_core.types import Question
from evorag_core.methods.base import EpisodeMethod, MethodOptions
from evorag_core.lm.backends import load_backend

if TYPE_CHECKING:
    from evorag_core.lm.base import PolicyBackend
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.runtime import Runtime

__all__ = ["AgentPolicy", "agent_on", "build_agent_method"]


class AgentPolicy:
    """EpisodePolicy over an `LMPolicy`: greedy decisions; the step info carries the completion, its log-prob and
    the fallback reason (if any), so results and the store keep what the training objectives need."""

    name = "agent"

    def __init__(self, lm: LMPolicy, adapter: str | None = None):
        self.lm = lm
        self.adapter = adapter
        self.label = f"agent (LM {lm.backend.model_id}" + (f" + adapter {adapter})" if adapter else ", base)")

    def begin(self, question: Question) -> None:
        self.lm.backend.activate(self.adapter)

    def act(self, view: AgentView) -> tuple[Action, Mapping[str, Any]]:
        from evorag_core.policy.agent import reader_passages  # torch-heavy: imported when used

        d = self.lm.act(view)
        # log-probs, completion; the fallback, ARENA reply, answer source, withheld span, hop plan (those it has)
        info = step_info(d, action_logprob=d.action_logprob, argument_logprob=d.argument_logprob)
        if d.query is not None:
            info["query"] = d.query
        if isinstance(d.action, Answer):  # the passages the reader read, in its order (re-reading, the studio)
            info["reader_pids"] = [p.pid for p in reader_passages(view, self.lm.cfg.reader_passages)]
        return d.action, info


def build_agent_method(opts: MethodOptions, rt: Runtime) -> EpisodeMethod:
    backend, adapter = load_backend(rt, opts.adapter)
    return agent_on(backend, rt, adapter, opts.rank_with_rm)


def agent_on(backend: PolicyBackend, rt: Runtime, adapter: str | None = None,
             rank_with_rm: Path | str | None = None) -> EpisodeMethod:
    """The agent method on an already loaded backend (several methods can share one model). `rank_with_rm`: a
    saved preference model (folder); the agent then takes the best of the greedy decision and `policy.siblings`
    samples by that model at every state (best-of-K)."""
    from evorag_core.policy.agent import LMPolicy

    lm = LMPolicy(backend, rt.cfg.policy, rt.cfg.answer)
    if rank_with_rm:
        from evorag_core.preference import ranked_policy_from_path

        policy = ranked_policy_from_path(lm, rank_with_rm, rt.cfg.policy.siblings, adapter)
    else:
        policy = AgentPolicy(lm, adapter)
    method = EpisodeMethod(policy, rt.make_env)
    method.backend = backend
    return method
