"""Ranking with the preference model: score sibling candidates at a state, and `RankedPolicy`, best-of-K decisions for the agent."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import torch

from evorag_core.errors import ConfigError
from evorag_core.env.episode import step_info
from evorag_core.preference.encoder import PrefixEncoder
from evorag_core.preference.examples import candidate_text
from evorag_core.preference.model import PreferenceModel


def rank_candidates(model: PreferenceModel, decisions: Sequence[Any],
                    observations: Sequence[str | None] | None = None) -> list[float]:
    """The overall preference score of each candidate decision (anything with `.prompt` and `.completion`);
    higher is better. `observations[i]`: what decision i's SEARCH retrieves (`candidate_text`); required when the
    model was trained with observations. The model needs an encoder (`PreferenceModel.load(path, encoder)` or
    `.attach`)."""
    if model.encoder is None:
        raise ConfigError("the preference model has no encoder attached; load it with an encoder or call attach()")
    if model.cfg.observation and observations is None:
        raise ConfigError("this preference model reads what each SEARCH candidate retrieves: pass observations "
                          "(RankedPolicy previews them in the episode's environment)")
    texts = [candidate_text(d.completion, observations[i] if model.cfg.observation else None)
             for i, d in enumerate(decisions)]
    scores: list[float] = [math.nan] * len(decisions)
    by_prompt: dict[str, list[int]] = {}
    for i, d in enumerate(decisions):
        by_prompt.setdefault(d.prompt, []).append(i)
    for prompt, idx in by_prompt.items():
        feats = model.encoder.encode(prompt, [texts[i] for i in idx])[:, 0]
        with torch.no_grad():
            values = model.overall(torch.as_tensor(feats)).tolist()
        for i, v in zip(idx, values):
            scores[i] = float(v)
    return scores


class RankedPolicy:
    """Best-of-K with the preference model, as an `EpisodePolicy` (methods/base.py): at each state the greedy
    decision and `k` sampled siblings (merged when identical) are scored by `rank_candidates`; the best-scoring one
    is taken. `adapter` (a name loaded in the LM's backend) is activated at `begin`, like the agent method does; the
    encoder always reads the base weights. A model trained with observations needs the episode's environment
    (`attach_env`, called by `run_episode`) to preview what each SEARCH candidate retrieves."""

    def __init__(self, lm_policy, reward_model: PreferenceModel, k: int = 4, *, temperature: float | None = None,
                 seed: int = 0, include_greedy: bool = True, adapter: str | None = None) -> None:
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}")
        self.lm, self.model, self.k = lm_policy, reward_model, k
        self.temperature, self.seed, self.include_greedy, self.adapter = temperature, seed, include_greedy, adapter
        self.name = "agent-rm"
        self.label = f"agent best-of-{k} by preference model" + (f" + adapter {adapter}" if adapter else "")
        self._calls = 0
        self._env = None
        if reward_model.encoder is None:
            backend = getattr(lm_policy, "backend", None)
            if backend is None:
                raise ConfigError("attach an encoder to the preference model, or pass an LMPolicy with a backend")
            reward_model.attach(PrefixEncoder.from_backend(backend, ((reward_model.cfg.layer,
                                                                      reward_model.cfg.pooling),)))

    def begin(self, question) -> None:
        self._calls = 0
        backend = getattr(self.lm, "backend", None)
        if backend is not None and hasattr(backend, "activate"):
            backend.activate(self.adapter)

    def attach_env(self, env) -> None:
        self._env = env

    def _observations(self, view, decisions: Sequence[Any]) -> list[str | None] | None:
        if not self.model.cfg.observation:
            return None
        if self._env is None:
            raise ConfigError("this preference model reads what each SEARCH candidate retrieves; the policy needs "
                              "the episode's environment (attach_env, as run_episode does)")
        from evorag_core.env.actions import Search
        from evorag_core.policy.prompts import render_search_result

        chars = self.lm.cfg.passage_chars
        return [render_search_result(view, self._env.preview_search(d.action.query), chars)
                if isinstance(d.action, Search) else None for d in decisions]

    def act(self, view) -> tuple[Any, dict[str, Any]]:
        self._calls += 1
        found = list(self.lm.candidates(view, k=self.k, temperature=self.temperature,
                                        seed=self.seed * 100_003 + self._calls))
        if self.include_greedy:
            found.insert(0, self.lm.act(view))
        first: dict[str, Any] = {}
        for d in found:
            first.setdefault(d.completion, d)
        unique = list(first.values())
        observations = self._observations(view, unique)
        scores = rank_candidates(self.model, unique, observations)
        best = max(range(len(unique)), key=scores.__getitem__)
        choice = unique[best]
        info = step_info(choice, rm_score=scores[best], rm_candidates=len(unique),
                         rm_observed=sum(1 for o in observations or () if o))
        for name in ("action_logprob", "argument_logprob"):
            if hasattr(choice, name):
                info[name] = float(getattr(choice, name))
        return choice.action, info


def ranked_policy_from_path(lm_policy, path: Path | str, k: int = 4, adapter: str | None = None) -> RankedPolicy:
    """For the agent's `--rank-with-rm PATH` option: load the saved model and wrap the LM policy."""
    return RankedPolicy(lm_policy, PreferenceModel.load(path), k, adapter=adapter)
