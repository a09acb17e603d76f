"""The curriculum's stage-switch bookkeeping without a model: a known sequence of dev returns fed through
`controller_step` (what each round record stores) switches at the round the EMA / epsilon / patience arithmetic says,
`curriculum_summary` reports that round with its EMA, and `replay_controller` (resume) rebuilds the same controller
from the records and refuses records written with other settings."""
from __future__ import annotations

import pytest

from evorag_core.config import apply_overrides, load_config
from evorag_core.env.scheduler import StageSwitchController
from evorag_core.errors import TrainingError
from training.curriculum import controller_step, curriculum_summary, read_state, replay_controller

# alpha 0.5, epsilon 0.05, patience 2. EMA: 0.2, 0.4, 0.5, 0.54, 0.57 -> improvements over the best EMA so far:
# -, 0.2, 0.1, 0.04 (< 0.05: stale 1), 0.03 (stale 2 = patience: switch after round 5; round 6 is refinement).
RETURNS = [0.2, 0.6, 0.6, 0.58, 0.6, 0.7]
SETTINGS = {"curriculum.ema_alpha": 0.5, "curriculum.epsilon": 0.05, "curriculum.patience": 2}


def records_for(returns, cfg, single_stage=None):
    """Round records as run_curriculum writes them (its decision fields; dev and policy round filled in)."""
    controller = StageSwitchController(cfg.curriculum.ema_alpha, cfg.curriculum.epsilon, cfg.curriculum.patience)
    stage, out = single_stage or "discovery", []
    for r, value in enumerate(returns, start=1):
        record = {"round": r, "stage": stage, "dev": {"mean_return": value, "em": 0.0, "f1": 0.0, "avg_steps": 2.0},
                  "policy_round": {"status": "succeeded", "adapter": f"r{r}-dpo"}}
        record.update(controller_step(controller, stage, value, single_stage))
        out.append(record)
        stage = record["next_stage"]
    return out


@pytest.fixture()
def cfg():
    return apply_overrides(load_config(), SETTINGS)


def test_switch_fires_at_the_round_the_arithmetic_says(cfg):
    records = records_for(RETURNS, cfg)
    assert [r["stage"] for r in records] == ["discovery"] * 5 + ["refinement"]
    assert [r["switched"] for r in records] == [False] * 4 + [True, False]
    assert [r["controller"]["stale"] for r in records[:5]] == [0, 0, 0, 1, 2]
    assert [r["controller"]["ema"] for r in records[:5]] == pytest.approx([0.2, 0.4, 0.5, 0.54, 0.57])
    summary = curriculum_summary(records, cfg)
    assert summary["controller"] == {"ema_alpha": 0.5, "epsilon": 0.05, "patience": 2}
    assert summary["switch"]["round"] == 5 and summary["switch"]["first_refinement_round"] == 6
    assert summary["switch"]["ema"] == pytest.approx(0.57)
    assert summary["switch"]["improvement"] == pytest.approx(0.03) and summary["switch"]["stale"] == 2
    assert [p["round"] for p in summary["dev_curve"]] == list(range(1, 7))
    assert [p["mean_return"] for p in summary["dev_curve"]] == RETURNS
    assert summary["stages_run"] == ["discovery", "refinement"] and summary["final_adapter"] == "r6-dpo"


def test_a_big_improvement_resets_the_stale_count(cfg):
    """0.9 after one stale round: EMA 0.72, improvement 0.18 -> stale back to 0; 0.9 again: EMA 0.81, improvement
    0.09 -> still 0; no switch in the budget."""
    records = records_for([0.2, 0.6, 0.6, 0.58, 0.9, 0.9], cfg)
    assert [r["controller"]["stale"] for r in records] == [0, 0, 0, 1, 0, 0]
    assert curriculum_summary(records, cfg)["switch"] is None


def test_single_stage_never_switches_but_logs_the_controller(cfg):
    records = records_for(RETURNS, cfg, single_stage="discovery")
    assert {r["stage"] for r in records} == {"discovery"} and not any(r["switched"] for r in records)
    assert records[4]["controller"]["stage"] == "refinement"  # what the controller would have chosen
    assert curriculum_summary(records, cfg, "discovery")["switch"] is None


def test_replay_rebuilds_the_controller_and_refuses_other_settings(cfg, tmp_path):
    import json

    records = records_for(RETURNS[:5], cfg)
    state = tmp_path / "state.jsonl"
    state.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert read_state(state) == records and read_state(tmp_path / "none.jsonl") == []
    controller = replay_controller(cfg, read_state(state))
    assert controller.stage == "refinement" and controller.ema == pytest.approx(0.57)
    assert controller.history == [r["controller"] for r in records]
    with pytest.raises(TrainingError, match="round 4"):
        replay_controller(apply_overrides(cfg, {"curriculum.patience": 1}), records)  # would switch after round 4
    with pytest.raises(TrainingError, match="record 1"):
        replay_controller(cfg, records, single_stage="refinement")
