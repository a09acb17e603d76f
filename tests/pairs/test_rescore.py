"""Re-scoring a stored rollout under another schedule/preset/table equals a fresh rollout under it (no drift): the
scripted policy takes the same actions whatever the weights, so only the returns, the winners and the pairs move."""
from __future__ import annotations

from dataclasses import replace

import pytest

from evorag_core.config import RewardConfig, RolloutConfig
from evorag_core.env.env import RagEnv
from evorag_core.env.judges import GoldCoverageJudge
from evorag_core.env.scheduler import PAPER_TABLE, WeightTable
from evorag_core.errors import ConfigError
from evorag_core.pairs.persist import load_rollout
from evorag_core.pairs.rescore import Variant, rescore, rescore_rollout
from evorag_core.pairs.rollout import rollout_question, run_rollouts
from evorag_core.pairs.selection import PairSelector
from evorag_core.store import open_store
from tests.pairs.test_rollout import ScriptedPolicy, demo_runtime  # noqa: F401  (fixture)

CFG = RolloutConfig(siblings=4, max_states=3, balance_ratio=0.0)
MARGIN = min(CFG.policy_margin, CFG.preference_margin)
TUNED = replace(PAPER_TABLE.to_config(), kappa_start=0.9, kappa_mid=0.6, gamma_mid=0.05, eta_mid=0.3)


def _fresh(runtime, question, variant: Variant):
    corpus = runtime.corpus_for(question)
    env = RagEnv(corpus, runtime.retriever_for(corpus), runtime.embed, GoldCoverageJudge(), runtime.cfg.env,
                 RewardConfig(schedule=variant.schedule, preset=variant.preset), variant.table)
    return rollout_question(env, ScriptedPolicy(), question, CFG, stage="discovery", meta={"policy": "scripted"})


def _returns(rollout):
    return [[(b.completion, b.ret, dict(b.signals)) for b in s.branches] for s in rollout.states]


@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    Variant("best2", preset="best2"), Variant("two-stage", schedule="two-stage"),
    Variant("no-reward", schedule="no-reward"), Variant("tuned", table=WeightTable.from_config(TUNED)),
], ids=lambda v: v.name)
def test_stored_rollout_rescored_equals_a_fresh_rollout(demo_runtime, tmp_path, variant):  # noqa: F811
    """Roll out 3 demo questions under time-dynamic/full and store them; load each back from the store and re-score
    it under `variant`; roll the same questions out afresh under `variant`. Branch returns, per-signal returns, the
    main record's weights and rewards, and the pairs (keys and margins) are identical."""
    questions = demo_runtime.dataset.questions[:3]
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        run_rollouts(questions, demo_runtime.make_env, ScriptedPolicy(), store, CFG, PairSelector(0.0),
                     policy_name="scripted", stage="discovery")
        stored = {e.question_id: load_rollout(store.get_episode(e.id)) for e in store.list_episodes(limit=None)}
    for q in questions:
        full = _fresh(demo_runtime, q, Variant("full"))
        assert _returns(stored[q.id]) == _returns(full)  # the round trip through the store loses nothing
        again = rescore_rollout(stored[q.id], variant, MARGIN)
        fresh = _fresh(demo_runtime, q, variant)
        assert _returns(again) == _returns(fresh) != _returns(full)
        assert [(s.weights, s.reward) for s in again.record.steps] == [(s.weights, s.reward) for s in fresh.record.steps]
        assert [(p.key, p.margin) for p in again.pairs] == [(p.key, p.margin) for p in fresh.pairs]
    # the variants do change something: under no-reward only kappa * ans counts
    if variant.name == "no-reward":
        assert all(set(k for k, v in b.signals.items() if v) <= {"ans"} for r in stored.values()
                   for s in rescore_rollout(r, variant, MARGIN).states for b in s.branches)


def test_rescore_without_a_trace_fails_loudly():
    from evorag_core.env.actions import Search
    from evorag_core.pairs.branches import Branch

    old = Branch("SEARCH: x", Search("x"), -1.0, True, 1, 1.0, {"ret": 1.0}, 2, True, "answer: y")
    with pytest.raises(ConfigError, match="roll out again"):
        rescore(old, Variant("full"))
