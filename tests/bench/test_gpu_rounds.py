"""bench/gpu_rounds.py without a model: the rows it plans (full and outcome-only reward per seed) and the summary of
a run folder - each adapter against the base, outcome-only against full, on the questions both finished, a torn
last line (a run killed mid-write) skipped, an unfinished row reported as such."""
from __future__ import annotations

import json
from pathlib import Path

from evorag_core.methods.base import QuestionResult


def _result(qid: str, f1: float, steps: int = 2, prediction: str | None = None) -> dict:
    return QuestionResult(question_id=qid, dataset="hotpotqa", question=f"q {qid}", prediction=prediction or f"a{f1}",
                          gold=("g",), em=float(f1 == 1.0), f1=f1, steps=steps, passages=(),
                          support_recall=0.5, refused=False).to_dict()


def _write(path: Path, rows: list[dict], torn: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)


def test_plan_has_full_and_outcome_only_per_seed():
    from bench.gpu_rounds import FULL, OUTCOME, plan_variants
    from evorag_core.config import load_config
    from evorag_core.env.scheduler import WeightTable

    variants = plan_variants(WeightTable.from_config(load_config(None, {}).weights), [0, 1])
    assert [v.name for v in variants] == [FULL, OUTCOME, f"{FULL}@s1", f"{OUTCOME}@s1"]
    assert variants[0].schedule == variants[2].schedule == FULL  # a seed copy keeps the weights
    assert variants[1].schedule == variants[3].schedule == OUTCOME


def test_summary_compares_on_the_questions_both_sides_finished(tmp_path):
    from bench.gpu_rounds import summarize

    names = ["time-dynamic", "no-reward", "time-dynamic@s1", "no-reward@s1"]
    state = {"plan": {"data": "d.jsonl", "train": [0, 4], "eval": [4, 10], "objective": "dpo", "max_steps": 0,
                      "seed": 0, "eval_t_max": 8, "variants": [{"name": n} for n in names]},
             "rollouts": {"minutes": 1.5, "episode_ids": [1, 2, 3, 4]},
             "base": {"em": 0.0, "f1": 0.5, "avg_steps": 2.0, "support_recall": 0.5, "seconds": 9.0},
             "variants": {"time-dynamic": {"store": {"pairs": 30}, "round": {"status": "succeeded", "steps": 4},
                                           "eval": {"f1": 0.75}},
                          "no-reward": {"store": {"pairs": 20}, "round": {"status": "succeeded", "steps": 3}},
                          "time-dynamic@s1": {"store": {"pairs": 30}, "round": {"status": "failed",
                                                                                "error": "loss is NaN"}}}}
    (tmp_path / "state.json").write_text(json.dumps(state))
    ids = [f"q{i}" for i in range(6)]
    _write(tmp_path / "eval" / "base.jsonl", [_result(q, 0.5, prediction="same") for q in ids])
    _write(tmp_path / "eval" / "time-dynamic.jsonl",
           [_result(q, 1.0 if i < 3 else 0.5, steps=1, prediction=None if i < 3 else "same")
            for i, q in enumerate(ids)])
    # the outcome-only row was cut after three questions, the fourth line half written
    _write(tmp_path / "eval" / "no-reward.jsonl", [_result(q, 0.0) for q in ids[:3]], torn='{"question_id": "q3", "da')

    s = summarize(tmp_path, resamples=200)
    assert s["rollout_episodes"] == 4 and s["base"]["evaluated"] == 6 and s["n_eval"] == 6
    full = s["rows"]["time-dynamic"]
    assert full["finished"] and full["evaluated"] == 6 and full["pairs"] == 30
    assert full["vs_base"]["n"] == 6 and full["vs_base"]["same_answer"] == 3
    assert abs(full["vs_base"]["f1"]["diff"] - 0.25) < 1e-9 and full["vs_base"]["steps"]["diff"] == -1.0
    outcome = s["rows"]["no-reward"]
    assert not outcome["finished"] and outcome["evaluated"] == 3
    assert outcome["vs_base"]["n"] == 3 and abs(outcome["vs_base"]["f1"]["diff"] + 0.5) < 1e-9
    assert outcome["vs_full"]["n"] == 3 and abs(outcome["vs_full"]["f1"]["diff"] + 1.0) < 1e-9
    failed = s["rows"]["time-dynamic@s1"]
    assert failed["round"]["status"] == "failed" and failed["round"]["error"] == "loss is NaN"
    assert failed["evaluated"] == 0 and failed["vs_base"] is None
    assert s["rows"]["no-reward@s1"]["vs_base"] is None and s["rows"]["no-reward@s1"]["vs_full"] is None
