"""bench/curriculum.py on the demo data with a tiny random Llama (every code path the real one): the curriculum runs
both stages, the single-stage run as many rounds, the three policies are evaluated; the JSON carries the switch (round,
EMA, epsilon, patience), both dev-return curves and the paired comparisons, and the figure is written. The switch
round is the one a controller fed the recorded dev returns gives. A re-run after an interruption (the single-stage
run cut after 2 of its 3 rounds) redoes only round 3, from round 2's adapter, and evaluates that arm alone again."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evorag_core.env.scheduler import StageSwitchController
from evorag_core.store import open_store
from tests.paths import DEMO, REPO


def run_bench(tiny: Path, home: Path, out: Path) -> str:
    # patience 1, epsilon 100: every EMA change is stale, so the switch fires after round 2 and round 3 is the last
    argv = [sys.executable, "-m", "bench.curriculum", "--data", str(DEMO), "--dev", "0:2", "--train", "2:8",
            "--eval", "40:43", "--rounds", "4", "--train-per-round", "2", "--model", str(tiny), "--threads", "1",
            "--workers", "2", "--max-length", "160", "--epochs", "1", "--max-steps", "0", "--lr", "2e-2",
            "--passage-chars", "160", "--t-max", "3", "--eval-t-max", "3", "--siblings", "2", "--max-states", "1",
            "--set", "policy.max_query_tokens=6", "--set", "policy.max_answer_tokens=4", "--set", "preference.layer=2",
            "--set", "curriculum.patience=1", "--set", "curriculum.epsilon=100", "--home", str(home), "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_curriculum_bench_reports_the_switch_the_curves_and_the_comparison(tiny, tmp_path):
    home, out = tmp_path / "home", tmp_path / "results" / "curriculum.json"
    printed = run_bench(tiny, home, out)
    result = json.loads(out.read_text())

    cur, single = result["curriculum"]["summary"], result["single"]["summary"]
    assert cur["controller"] == {"ema_alpha": 0.5, "epsilon": 100.0, "patience": 1}
    assert cur["switch"]["round"] == 2 and cur["switch"]["first_refinement_round"] == 3
    assert cur["switch"]["stale"] == 1 and cur["switch"]["ema"] == cur["dev_curve"][1]["ema"]
    assert [p["stage"] for p in cur["dev_curve"]] == ["discovery", "discovery", "refinement"]
    assert single["rounds"] == 3 and single["stages_run"] == ["discovery"] and single["switch"] is None
    assert single["single_stage"] == "discovery" and result["single"]["exit_code"] == 0
    # the switch round is the controller's: replay the recorded dev returns through a fresh controller
    controller = StageSwitchController(0.5, 100.0, 1)
    stages = [controller.update(p["mean_return"]) for p in cur["dev_curve"]]
    assert stages.index("refinement") + 1 == cur["switch"]["round"]
    assert [p["ema"] for p in cur["dev_curve"]] == pytest.approx([h["ema"] for h in controller.history])

    for arm in ("curriculum", "single"):
        assert result[arm]["exit_code"] == 0 and result[arm]["summary"]["all_rounds_trained"]
        assert result[arm]["summary"]["final_adapter"] == "r3-dpo" and Path(result[arm]["adapter_path"]).is_dir()
        assert "train --curriculum" in result[arm]["command"]
    ev = result["eval"]
    for name in ("base", "curriculum", "single"):
        assert ev[name]["n"] == 3 and {"em", "f1", "avg_steps", "refusal_rate"} <= set(ev[name])
    for a, b in (("curriculum", "base"), ("single", "base"), ("curriculum", "single")):
        cmp = ev[a][f"vs_{b}"]
        assert cmp["n"] == 3 and all(0.0 <= cmp[m]["p_value"] <= 1.0 for m in ("em", "f1", "steps"))
    assert "switch after round 2" in printed and "vs single" in printed

    html = Path(result["figure"]["html"])
    assert html == out.with_suffix(".html") and "dev mean return" in html.read_text()
    if importlib.util.find_spec("kaleido") is not None and Path("/usr/bin/chromium").exists():
        assert result["figure"]["png_error"] is None
        assert Path(result["figure"]["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert result["figure"]["png"] is None and result["figure"]["png_error"]

    # interrupted: the single-stage run lost its round 3 (its record; its adapter r3-dpo stays registered and active)
    state_file, rounds_file = home / "curriculum_state.json", home / "single" / "state.jsonl"
    before = rounds_file.read_text().splitlines()
    state = json.loads(state_file.read_text())
    del state["single"]
    state_file.write_text(json.dumps(state))
    rounds_file.write_text("\n".join(before[:2]) + "\n")
    run_bench(tiny, home, out)
    after = rounds_file.read_text().splitlines()
    assert after[:2] == before[:2] and len(after) == 3
    redone = json.loads(after[2])
    assert redone["round"] == 3 and redone["adapter_in"] == "r2-dpo"  # round 2's adapter, not the cut-off r3-dpo
    with open_store(f"sqlite:///{home / 'single' / 'evorag.db'}") as store:
        assert [a.name for a in store.list_adapters()] == ["r1-dpo", "r2-dpo", "r3-dpo", "r4-dpo"]
        assert store.active_adapter().name == "r4-dpo"
    again = json.loads(out.read_text())
    assert again["single"]["summary"]["final_adapter"] == "r4-dpo" and again["eval"]["single"]["n"] == 3
    assert again["curriculum"] == result["curriculum"]  # the finished arm was not run again
    assert result["eval"]["started"] == ["base", "curriculum", "single"]
    assert again["eval"]["started"] == ["single"]  # base and curriculum answers were complete: read, not rerun
