"""Weight schedule and stage switch against the SPEC Table 2, by hand."""
import math

import pytest

from evorag_core.errors import ConfigError
from evorag_core.env.scheduler import PAPER_TABLE, StageSwitchController, step_reward, weights_at


def test_weights_hit_endpoints():
    """Discovery: t=1 -> Start column, t=T_max -> Mid column. Refinement: Mid -> End."""
    assert weights_at("discovery", 1, 20) == dict(PAPER_TABLE.start)
    assert weights_at("discovery", 20, 20) == pytest.approx(dict(PAPER_TABLE.mid))
    assert weights_at("refinement", 1, 20) == dict(PAPER_TABLE.mid)
    assert weights_at("refinement", 20, 20) == pytest.approx(dict(PAPER_TABLE.end))


def test_interpolation_midway():
    """Refinement, T_max = 11, t = 6: p = 0.5; kappa = 0.5*0.10 + 0.5*1.00 = 0.55; gamma = 0.5*0.5 + 0.5*1.2 = 0.85."""
    w = weights_at("refinement", 6, 11)
    assert w["kappa"] == pytest.approx(0.55)
    assert w["gamma"] == pytest.approx(0.85)
    assert w["rho"] == pytest.approx(0.5)


def test_two_stage_and_no_reward():
    """two-stage: constant at the stage's early endpoint; no-reward: kappa=1, everything else 0."""
    assert weights_at("discovery", 17, 20, schedule="two-stage") == dict(PAPER_TABLE.start)
    assert weights_at("refinement", 3, 20, schedule="two-stage") == dict(PAPER_TABLE.mid)
    w = weights_at("discovery", 5, 20, schedule="no-reward")
    assert w["kappa"] == 1.0 and sum(w.values()) == 1.0


def test_presets_zero_left_out_signals():
    """best2 keeps backtrack (delta) and answer (kappa) only."""
    w = weights_at("discovery", 1, 20, preset="best2")
    assert w == {"beta": 0, "lambda": 0, "gamma": 0, "delta": 0.3, "rho": 0, "eta": 0, "kappa": 0.05}
    w = weights_at("discovery", 1, 20, preset="efficiency-heavy")
    assert {k for k, v in w.items() if v} == {"delta", "eta", "kappa"}


def test_unknown_names_fail_loudly():
    with pytest.raises(ConfigError):
        weights_at("warmup", 1, 20)
    with pytest.raises(ConfigError):
        weights_at("discovery", 1, 20, schedule="cosine")
    with pytest.raises(ConfigError):
        weights_at("discovery", 1, 20, preset="best4")


def test_step_reward():
    """ret=+1 (beta 2.0), step=-1 (eta 0.02), dup=-0.5 (gamma 0.1): 2.0 - 0.02 - 0.05 = 1.93."""
    signals = {"ret": 1.0, "act": 0.0, "dup": -0.5, "bt": 0.0, "ref": 0.0, "step": -1.0, "ans": 0.0}
    assert step_reward(signals, weights_at("discovery", 1, 20)) == pytest.approx(1.93)


def test_stage_switch_controller():
    """alpha=0.5, eps=0.1, P=2. Returns 1.0, 2.0, 2.1, 2.1:
    EMA 1.0 (best 1.0) -> 1.5 (+0.5, best 1.5) -> 1.8 (+0.3) -> 1.95 (+0.15): no switch yet;
    then 2.0 -> EMA 1.975 (+0.025 < eps, stale 1), 2.0 -> 1.9875 (+0.0125, stale 2) -> refinement."""
    c = StageSwitchController(alpha=0.5, epsilon=0.1, patience=2)
    stages = [c.update(r) for r in (1.0, 2.0, 2.1, 2.1, 2.0, 2.0)]
    assert stages == ["discovery"] * 5 + ["refinement"]
    assert c.history[-1]["ema"] == pytest.approx(1.9875)
    assert c.update(-5.0) == "refinement"  # never switches back


def test_step_reward_weighted_sum_and_missing_weights():
    """ret=1 (w 2.0) + step=−1 (w 0.02) + bt=0 (w 0.3) = 1.98 (weights by weight name, as episodes store them); a
    signal without its weight fails loudly (the PPO loop's former `scalarize`, now this one step reward)."""
    assert math.isclose(step_reward({"ret": 1.0, "step": -1.0, "bt": 0.0}, {"beta": 2.0, "eta": 0.02, "delta": 0.3}), 1.98)
    with pytest.raises(ValueError, match="no weight for \\['act'\\]"):
        step_reward({"ret": 1.0, "act": -1.0}, {"beta": 2.0})
