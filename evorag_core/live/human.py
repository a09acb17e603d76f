"""A person acting in the policy's place (the studio's "Act yourself"): the action a person chose, the
policy's proposal at the same state, and the human-correction pair that prefers the person's action over the
proposal after the prompt the policy saw there (as a rollout pair would: prompt, chosen and rejected completions).

Completions are written as the policy writes its replies (`evorag_core.policy.prompts.completion_text`):
"SEARCH: <query>", "ANSWER: <answer>", "BACKTRACK", "REFUSE" - what DPO trains on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from evorag_core.env.actions import ACTION_NAMES, Action, Answer, Backtrack, Refuse, Search, action_to_dict
from evorag_core.errors import ActionParseError

__all__ = ["HUMAN_SOURCE", "Proposal", "Correction", "human_action", "completion_of", "correction_of",
           "correction_metadata"]

HUMAN_SOURCE = "human-correction"  # the pair source (evorag_core.store.records.PAIR_SOURCES)


@dataclass(frozen=True)
class Proposal:
    """What the episode's policy would do at the state before step `t`: the action, what its step would record
    (`info`), its reply text, and the prompt it was written after (LM policies; None for the oracle or a script).
    `live` is True when the episode's own policy computed it (the next Step at this state then takes it as is);
    False when a copy did (policies that consume a plan, like the oracle or a script, are asked through a copy)."""

    t: int
    action: Action
    info: Mapping[str, Any]
    completion: str
    prompt: str | None
    live: bool


@dataclass(frozen=True)
class Correction:
    """A person's step that replaced a different proposal: `chosen` (theirs) preferred over `rejected` (the
    policy's) after `prompt`, the state before step `t`."""

    t: int
    prompt: str
    chosen: str
    rejected: str
    proposal: Action
    human: Action
    proposal_logprob: float | None = None  # log P(rejected | prompt) under the policy, when it reported one


def human_action(name: str | None, argument: str | None) -> Action:
    """The action a person chose in the page: SEARCH needs a query, ANSWER an answer; the others take none (a
    typed argument is ignored)."""
    name = (name or "").strip().upper()
    arg = " ".join((argument or "").split())
    if name == "SEARCH":
        if not arg:
            raise ActionParseError("SEARCH needs a query: type it in the box next to the action")
        return Search(arg)
    if name == "ANSWER":
        if not arg:
            raise ActionParseError("ANSWER needs an answer: type it in the box next to the action")
        return Answer(arg)
    if name == "BACKTRACK":
        return Backtrack()
    if name == "REFUSE":
        return Refuse()
    raise ActionParseError(f"choose an action: {', '.join(ACTION_NAMES)}")


def completion_of(action: Action, info: Mapping[str, Any] | None = None) -> str:
    """The reply text of an action: the policy's own completion when its step info has one, else the action as the
    policy would write it ("SEARCH: x", "BACKTRACK")."""
    if info and info.get("completion"):
        return str(info["completion"])
    act = action_to_dict(action)
    arg = act.get("query", act.get("answer"))
    return f"{act['action']}: {arg}" if arg is not None else act["action"]


def correction_of(proposal: Proposal, human: Action) -> Correction | None:
    """The pair a person's step at `proposal`'s state makes: None when they did what the policy proposed (nothing
    to prefer). ValueError when the policy has no prompt to train on (the oracle, a script)."""
    chosen = completion_of(human)
    if human == proposal.action or chosen == proposal.completion:
        return None
    if proposal.prompt is None:
        raise ValueError("correction pairs need a language-model policy: its prompt at this state is what the pair "
                         "trains on (choose an LM policy and Reset)")
    logprob = proposal.info.get("logprob")
    return Correction(proposal.t, proposal.prompt, chosen, proposal.completion, proposal.action, human,
                      None if logprob is None else float(logprob))


def correction_metadata(correction: Correction, **episode: Any) -> dict[str, Any]:
    """The pair's metadata: the episode it came from (`episode`: ids, question, policy), the state t, both actions
    and the policy's log-probability of its proposal when it reported one."""
    meta = dict(episode)
    meta.update(t=correction.t, proposal=action_to_dict(correction.proposal), human=action_to_dict(correction.human))
    if correction.proposal_logprob is not None:
        meta["proposal_logprob"] = correction.proposal_logprob
    return meta
