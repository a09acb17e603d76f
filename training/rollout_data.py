"""Training data from stored rollouts: the state before each step of an episode, rebuilt from the store.

The store keeps steps, not prompts: a step records its action, argument, the passages its SEARCH returned (pid
strings, or {pid, title, text} objects), its signals and weights, and the sibling candidates sampled at its state
(action, argument, log-prob, branch return). Replaying the steps the way `RagEnv` does (SEARCH appends a hop,
BACKTRACK drops the last one and remembers its query) gives the `AgentView` the policy saw before each step; the
policy's own renderer (`LMPolicy.prompt`) turns it into the prompt, so training reads the text the action was
sampled after. Passage ids are resolved through the episode's data file (`episode_data_file`), the job's
`data`, or the question registered in the store (`PassageResolver`).

- GRPO reads `CandidateGroup`s: one state, its sibling completions and their branch returns (r̃ per candidate).
- PPO reads `Replay`s: the states, the actions taken, and the scalarised rewards r̃_t = Σ_k w_k(t) r_t^(k).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from evorag_core.errors import ConfigError
from evorag_core.policy.prompts import LABELS, completion_text
from evorag_core.env.scheduler import step_reward
from evorag_core.env.state import AgentView, Hop
from evorag_core.types import Passage

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from evorag_core.config import PolicyConfig
    from evorag_core.store import Episode, Store


__all__ = [
    "StepState",
    "Replay",
    "CandidateGroup",
    "PassageResolver",
    "episode_data_file",
    "load_episodes",
    "replay_episode",
    "candidate_groups",
    "prompt_renderer",
    "Render",
]

Render = Callable[[AgentView], str]


@dataclass(frozen=True)
class StepState:
    t: int
    view: AgentView  # what the policy saw before acting
    completion: str  # the action taken, as the policy writes it ("SEARCH: ...")
    reward: float  # r̃_t
    siblings: tuple[Any, ...]  # store Sibling rows sampled at this state
    actor: str = "policy"  # who chose the action: "policy", or "human" (a person acted in the studio)


@dataclass(frozen=True)
class Replay:
    episode_id: int
    steps: tuple[StepState, ...]
    terminated: bool  # ended with ANSWER or REFUSE (else truncated: bootstrap from final_view)
    final_view: AgentView


@dataclass(frozen=True)
class CandidateGroup:
    episode_id: int
    t: int
    prompt: str
    completions: tuple[str, ...]
    returns: tuple[float, ...]  # branch return of each candidate: its r̃ in the group advantage
    logprobs: tuple[float | None, ...]  # as stored at sampling time (diagnostic)


class PassageResolver:
    """pid -> Passage. {pid, title, text} objects need nothing; pid strings are looked up in the episode's data file
    (`episode_data_file`), then in `default_data` (the job's `data`), then in the question as registered in the store
    (`Store.get_question`); data files are loaded once each."""

    def __init__(self, default_data: str | None = None, store: Store | None = None):
        self.default_data = default_data
        self.store = store
        self._tables: dict[str, dict[str, Passage]] = {}

    def __call__(self, raw: Any, episode: Episode) -> Passage:
        if isinstance(raw, Mapping):
            return Passage(str(raw["pid"]), str(raw.get("title", "")), str(raw.get("text", "")))
        pid = str(raw)
        tried: list[str] = []
        for source, table in self._sources(episode):
            tried.append(source)
            if pid in table:
                return table[pid]
        raise ConfigError(
            f"episode {episode.id}: passage {pid!r} not found (looked in: {', '.join(tried) or 'nothing'}); "
            "name the data file the episodes came from (job key 'data', `evorag train --data`)"
        )

    def _sources(self, episode: Episode) -> Iterator[tuple[str, dict[str, Passage]]]:
        for path in dict.fromkeys(p for p in (episode_data_file(episode), self.default_data) if p):
            yield str(path), self._file(str(path))
        if self.store is not None:
            key = f"store:{episode.dataset}/{episode.question_id}"
            if key not in self._tables:
                try:
                    question = self.store.get_question(episode.dataset, episode.question_id)
                    self._tables[key] = {p.pid: p for p in question.passages}
                except KeyError:
                    self._tables[key] = {}
            yield key, self._tables[key]

    def _file(self, path: str) -> dict[str, Passage]:
        if path not in self._tables:
            from evorag_core.data.datasets import load_dataset

            dataset = load_dataset(Path(path))
            self._tables[path] = {p.pid: p for q in dataset.questions for p in q.passages}
        return self._tables[path]


def prompt_renderer(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, model_id: str,
                    policy_cfg: PolicyConfig) -> Render:
    """`LMPolicy.prompt` of a transformers backend around `model` (built before LoRA is attached; only the
    tokenizer's chat template is used to render)."""
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.lm.hf_backend import TransformersBackend

    return LMPolicy(TransformersBackend.from_model(model, tokenizer, model_id=model_id), policy_cfg).prompt


def load_episodes(store: Store, *, ids: Sequence[int] = (), limit: int = 32, stage: str | None = None) -> list[Episode]:
    """Episodes with their steps: exactly `ids`, or the `limit` newest finished ones (of `stage`, if given) that are
    not evaluation episodes (source "eval": `evorag eval`, the Evaluate tab and gated promotion store their dev
    questions' episodes as traces; training on them would leak the held-out slice into the policy)."""
    if ids:
        return [store.get_episode(i) for i in ids]
    found: list[Any] = []
    offset = 0
    while len(found) < limit:
        page = store.list_episodes(limit=100, offset=offset)
        if not page:
            break
        offset += len(page)
        found += [e for e in page if e.status != "running" and e.source != "eval" and (stage is None or e.stage == stage)]
    return [store.get_episode(e.id) for e in sorted(found[:limit], key=lambda e: e.id)]


def episode_data_file(episode: Episode) -> str | None:
    """The data file an episode's question came from: its config's `data` (studio episodes) or the row's
    `data_path` (rollouts, evaluations); None where neither was recorded."""
    config = episode.config or {}
    return config.get("data") or config.get("data_path") or getattr(episode, "data_path", None)


def replay_episode(episode: Episode, resolve: PassageResolver, t_max: int) -> Replay:
    """The state before each stored step, with the step's completion and scalarised reward."""
    t_max = int((episode.config or {}).get("t_max", t_max))
    chain: list[Hop] = []
    history: list[str] = []
    states: list[StepState] = []
    for step in episode.steps or ():
        name = step.action.upper()
        if name not in LABELS:
            raise ConfigError(f"episode {episode.id}, t={step.t}: unknown action {step.action!r}")
        view = _view(episode.question, chain, history, step.t, t_max)
        completion = completion_text(name, step.argument or "")
        states.append(StepState(step.t, view, completion, step_reward(step.signals, step.weights), step.siblings,
                                getattr(step, "actor", "policy")))
        if name == "SEARCH":
            chain.append(Hop(step.argument or "", tuple(resolve(p, episode) for p in step.passages)))
            history.append(step.argument or "")
        elif name == "BACKTRACK" and chain:
            chain.pop()
    steps = episode.steps or ()
    terminated = bool(steps) and steps[-1].action.upper() in ("ANSWER", "REFUSE")
    final = _view(episode.question, chain, history, len(states) + 1, t_max)
    return Replay(episode.id, tuple(states), terminated, final)


def _view(question: str, chain: list[Hop], history: list[str], t: int, t_max: int) -> AgentView:
    dropped = list(history)
    for hop in chain:  # history minus the active chain = the backtracked queries (as RagEnv.view)
        dropped.remove(hop.query)
    return AgentView(question, tuple(chain), tuple(dropped), t, t_max)


def candidate_groups(replays: Iterable[Replay], render: Render, *, min_size: int = 2) -> list[CandidateGroup]:
    """One group per state with at least `min_size` scored siblings (siblings without a branch return are left out)."""
    groups: list[CandidateGroup] = []
    for replay in replays:
        for state in replay.steps:
            scored = [s for s in state.siblings if s.branch_return is not None and s.action.upper() in LABELS]
            if len(scored) < min_size:
                continue
            groups.append(CandidateGroup(
                episode_id=replay.episode_id, t=state.t, prompt=render(state.view),
                completions=tuple(completion_text(s.action.upper(), s.argument or "") for s in scored),
                returns=tuple(float(s.branch_return) for s in scored),
                logprobs=tuple(s.logprob for s in scored),
            ))
    return groups
