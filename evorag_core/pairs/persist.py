"""What a rollout leaves in the store: the main episode with its steps (`env.rows.store_steps`) and sampled siblings (`rollout_siblings`), then the
pairs the `PairSelector` lets through, each with its metadata (`pair_metadata`); `save_rollout` writes one episode
and its pairs in two short transactions and returns a `SavedRollout`. `load_rollout` reads a stored episode back as
the `EpisodeRollout` it was saved from (its config JSON keeps the main record, the K raw samples of each branch state
and every branch with its per-step raw signals), which pairs/rescore.py scores again under another schedule.
No schema change: all of it lives in the episode's existing `config` JSON column.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from evorag_core.config import RolloutConfig
from evorag_core.env.actions import action_to_dict, parse_action
from evorag_core.env.episode import EpisodeRecord
from evorag_core.env.rows import action_argument, episode_outcome, store_steps
from evorag_core.pairs.branches import Branch, BranchState, EpisodeRollout, RolloutPair
from evorag_core.errors import ConfigError
from evorag_core.pairs.selection import PairSelector, build_pairs
from evorag_core.types import Question

if TYPE_CHECKING:
    from evorag_core.store import Episode, Sibling, Store

__all__ = ["pair_metadata", "rollout_siblings", "SavedRollout", "save_rollout", "load_rollout"]


def pair_metadata(pair: RolloutPair, rollout: EpisodeRollout, episode_db_id: int | None,
                  cfg: RolloutConfig) -> dict[str, Any]:
    """Everything a consumer needs besides prompt/chosen/rejected: per-signal returns of both branches (for the
    preference model's heads), where the pair came from and which thresholds it passes."""
    rec = rollout.record
    margin = pair.margin
    return {
        "episode_db_id": episode_db_id,
        "episode": rec.episode_id,
        "question_id": rec.question_id,
        "dataset": rec.dataset,
        "stage": rec.stage,
        "t": pair.t,
        "t_max": rec.t_max,
        "schedule": rec.schedule,
        "preset": rec.preset,
        "policy": rec.meta.get("policy"),
        "return_chosen": pair.chosen.ret,
        "return_rejected": pair.rejected.ret,
        "signals_chosen": dict(pair.chosen.signals),
        "signals_rejected": dict(pair.rejected.signals),
        "chosen_branch": pair.chosen.summary(),
        "rejected_branch": pair.rejected.summary(),
        "for_policy": margin >= cfg.policy_margin,
        "for_preference": margin >= cfg.preference_margin,
        "greedy_side": {True: "chosen", False: "rejected", None: None}[pair.greedy_side],
        "key": pair.key,
    }


def rollout_siblings(rollout: EpisodeRollout) -> dict[int, tuple[Sibling, ...]]:
    """The K sampled siblings (with their branch returns) of the steps where the rollout branched, by t."""
    from evorag_core.store import Sibling

    return {state.t: tuple(Sibling(action_to_dict(a)["action"], action_argument(a), lp, state.branch(c).ret)
                           for a, c, lp in state.sampled)
            for state in rollout.states}


@dataclass(frozen=True)
class SavedRollout:
    episode_id: int
    pair_ids: tuple[int, ...]
    steps: int
    candidates: int


def save_rollout(store: Store, rollout: EpisodeRollout, selector: PairSelector, cfg: RolloutConfig,
                 policy_name: str, *, run: str | None = None, adapter: str | None = None,
                 data_path: str | None = None) -> SavedRollout:
    """Write the episode (its steps, the siblings, a summary of every branch in its config JSON), then the pairs
    the selector lets through now (held-back pairs of earlier episodes included; their metadata names their own
    episode). Two short transactions: the episode, then its pairs."""
    from evorag_core.store import NewPair

    rec = rollout.record
    config = {
        "rollout": dict(cfg.__dict__), "t_max": rec.t_max, "top_k": rec.top_k, "preset": rec.preset,
        "episode_key": rec.episode_id, "answer": rec.answer, "decisions": rollout.decisions,
        "branches": {str(s.t): [b.summary() for b in s.branches] for s in rollout.states},
        "prompts": {str(s.t): s.prompt for s in rollout.states},  # the annotation queue's items train on these
        "sampled": {str(s.t): [[action_to_dict(a), c, lp] for a, c, lp in s.sampled] for s in rollout.states},
        "record": rec.to_dict(),  # lossless: load_rollout rebuilds the rollout from it to re-score it
    }
    steps = store_steps(rec, rollout_siblings(rollout))
    episode_id = store.add_episode(
        question_id=rec.question_id, dataset=rec.dataset, question=rec.question, policy=policy_name,
        stage=rec.stage, schedule=rec.schedule, config=config, steps=steps,
        status="truncated" if rec.truncated else "finished", total_return=rec.total_return,
        source="rollout", adapter=adapter, data_path=data_path, run=run,
        outcome=episode_outcome(rec),  # graded against the record's gold answers, as answerable
    )
    offered = [replace(p, meta=pair_metadata(p, rollout, episode_id, cfg)) for p in rollout.pairs]
    ready = selector.offer(offered)
    new = [
        NewPair(p.prompt, p.chosen.completion, p.rejected.completion, source="rollout", margin=p.margin,
                stage=p.meta.get("stage"), metadata=dict(p.meta))
        for p in ready
    ]
    ids = store.add_pairs(new)
    selector.stats.episodes += 1
    selector.stats.steps += len(steps)
    n_siblings = sum(len(s.siblings) for s in steps)
    selector.stats.candidates += n_siblings
    selector.stats.branches += sum(len(s.branches) for s in rollout.states)
    selector.stats.decisions += rollout.decisions
    return SavedRollout(episode_id, tuple(ids), len(steps), n_siblings)


def load_rollout(episode: Episode) -> EpisodeRollout:
    """The `EpisodeRollout` a stored rollout episode was saved from (see the module docstring), its pairs rebuilt
    over the rollout's own margin. The question carries what the record knows (id, text, gold answers and pids)."""
    config = episode.config or {}
    if "record" not in config or "sampled" not in config:
        raise ConfigError(f"episode {episode.id} is not a rollout stored with its records (source "
                          f"{episode.source!r}); roll it out again with `evorag rollout` to re-score it")
    record = EpisodeRecord.from_dict(config["record"])
    question = Question(record.question_id, record.dataset, record.question, tuple(record.gold_answers),
                        gold_pids=frozenset(record.gold_pids))
    states = tuple(
        BranchState(int(t), config["prompts"][t],
                    tuple((parse_action(a), c, float(lp)) for a, c, lp in config["sampled"][t]),
                    tuple(Branch.from_summary(b) for b in config["branches"][t]))
        for t in sorted(config["branches"], key=int)
    )
    rollout_cfg = config.get("rollout") or {}
    margin = min(float(rollout_cfg.get("policy_margin", RolloutConfig.policy_margin)),
                 float(rollout_cfg.get("preference_margin", RolloutConfig.preference_margin)))
    pairs = tuple(p for s in states for p in build_pairs(s, margin))
    return EpisodeRollout(question, record, states, pairs, int(config.get("decisions", 0)))
