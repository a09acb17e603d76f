"""Re-scoring a stored rollout under another reward schedule (the ablations of issue #27 and adaptive weight
tuning): the trajectories and their raw per-step signals r_u^(k) do not change, only the weights w_k(u) do, hence
the step rewards, the branch returns G_t, which sibling wins and which pairs pass the margin.

A `Variant` names a schedule (time-dynamic | two-stage | no-reward), a reward preset (full | best2 | ...) and the
Start/Mid/End weight table. `rescore(branch, variant)` recomputes a branch's G_t and G_t^(k) from its `trace` with the
one step reward of env/scheduler.py (`weights_at`, `step_reward`), in the same order as a rollout sums them, so a
stored rollout re-scored under a variant equals a fresh rollout under that variant exactly (the policy never sees
rewards, so it takes the same actions). `rescore_rollout` does the whole episode: the main record's step weights
and rewards, every branch, and the pairs rebuilt from the new returns.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from evorag_core.env.episode import EpisodeRecord
from evorag_core.env.scheduler import PAPER_TABLE, SIGNAL_WEIGHT, WeightTable, step_reward, weights_at
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.errors import ConfigError
from evorag_core.pairs.branches import Branch, BranchState, EpisodeRollout
from evorag_core.pairs.selection import build_pairs

__all__ = ["Variant", "rescore", "rescore_record", "rescore_rollout"]


@dataclass(frozen=True)
class Variant:
    """One reward setting to score rollouts under."""

    name: str
    schedule: str = "time-dynamic"
    preset: str = "full"
    table: WeightTable = PAPER_TABLE

    def weights(self, stage: str, t: int, t_max: int) -> dict[str, float]:
        return weights_at(stage, t, t_max, schedule=self.schedule, preset=self.preset, table=self.table)


def rescore(branch: Branch, variant: Variant) -> Branch:
    """The branch with G_t and G_t^(k) recomputed under `variant` from its trace (raw signals + positions)."""
    if len(branch.trace) != branch.steps:
        raise ConfigError(f"branch {branch.completion!r} keeps {len(branch.trace)} of its {branch.steps} steps' "
                          "signals; it was rolled out before rollouts stored them - roll out again to re-score")
    by_signal = {name: 0.0 for name in SIGNAL_NAMES}
    rewards = []
    for step in branch.trace:
        w = variant.weights(step.stage, step.t, step.t_max)
        for name, value in step.signals.items():
            by_signal[name] += w[SIGNAL_WEIGHT[name]] * value
        rewards.append(step_reward(step.signals, w))
    return replace(branch, ret=float(sum(rewards)), signals=by_signal)


def rescore_record(record: EpisodeRecord, variant: Variant) -> EpisodeRecord:
    """The main trajectory with each step's weights and reward under `variant` (signals unchanged)."""
    steps = []
    for s in record.steps:
        w = variant.weights(record.stage, s.t, record.t_max)
        steps.append(replace(s, weights=w, reward=step_reward(s.signals, w)))
    meta = {**record.meta, "variant": variant.name}
    return replace(record, steps=tuple(steps), schedule=variant.schedule, preset=variant.preset, meta=meta)


def rescore_rollout(rollout: EpisodeRollout, variant: Variant, min_margin: float) -> EpisodeRollout:
    """The whole rollout under `variant`: record, branches, and the pairs over `min_margin` rebuilt."""
    states = tuple(BranchState(s.t, s.prompt, s.sampled, tuple(rescore(b, variant) for b in s.branches))
                   for s in rollout.states)
    pairs = tuple(p for s in states for p in build_pairs(s, min_margin))
    return replace(rollout, record=rescore_record(rollout.record, variant), states=states, pairs=pairs)
