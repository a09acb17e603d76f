"""Cancelling running GRPO and PPO rounds (the hand-written step loops, `training/loop.StepLog`): the same contract
as DPO's in tests/training/test_round_cancel.py - stopped within one optimiser step, `cancelled`, no adapter - on the tiny
Llama and the hand-written rollouts of tests/training/test_rounds.py (its fixtures).
"""
from __future__ import annotations

import pytest

from tests.training.test_round_cancel import run_and_cancel_at_step
from tests.training.test_rounds import world, write_rollouts  # noqa: F401  (fixture: config, home, store; the tiny model comes from conftest.py)


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["grpo", "ppo"])
def test_cancelling_a_running_rl_round_stops_it_within_one_step(world, objective):
    """2 episodes, batch 4, 300 epochs -> hundreds of steps; another thread cancels once 2 steps are reported and
    reads the last step reported then (`at_cancel`): the round ends at step at_cancel or at_cancel + 1."""
    cfg, home, store = world
    write_rollouts(store)
    rid = store.enqueue_round(objective, {"epochs": 300})
    done, steps, at_cancel = run_and_cancel_at_step(store, cfg, home, rid, 2)
    assert at_cancel[0] >= 2, "training never reached step 2"
    assert done.status == "cancelled", done.error
    assert at_cancel[0] <= steps[-1] <= at_cancel[0] + 1 < 300
    assert done.progress["step"] == steps[-1] and store.list_adapters() == []
