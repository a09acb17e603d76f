"""`evorag tune-weights` end to end on the demo data with a tiny random Llama: an ablation run first (its rollouts,
base row and time-dynamic row), then a two-trial optuna search on dev questions over that run's rollouts, the best
table written as a `--config` snippet, and the held-out comparison of the tuned and the hand table that takes the
ablation's base and hand rows instead of computing them again; rerun, nothing is trained or evaluated twice."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evorag_core.cli.main import main as cli_main
from evorag_core.config import load_config
from evorag_core.env.scheduler import WeightTable
from tests.paths import DEMO
from tests.training.test_ablation import SETTINGS
from training.ablation.pipeline import load_state


def _adapter_stamps(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("adapter_model.safetensors")}


@pytest.mark.slow
def test_tune_weights_writes_the_best_table_and_compares_it_on_held_out_questions_reusing_the_ablation(
        tiny, tmp_path, capsys):
    torch.set_num_threads(1)
    home = tmp_path / "home"
    sets = [a for k, v in {**SETTINGS, "policy.model": str(tiny)}.items() for a in ("--set", f"{k}={v}")]
    common = ["--home", str(home), "--data", str(DEMO), "--train", "0:3", "--max-steps", "1", "--eval-t-max", "4",
              *sets]
    ablation = (tmp_path / "ablation").resolve()
    assert cli_main(["ablate", "schedules", "--variants", "", "--eval", "40:44", "--resamples", "200",
                     "--out", str(ablation), *common]) == 0
    held = load_state(ablation)
    capsys.readouterr()

    out = (tmp_path / "tune").resolve()
    argv = ["tune-weights", "--method", "bo", "--trials", "2", "--eval", "44:47", "--heldout", "40:44",
            "--rows-from", str(ablation), "--out", str(out), *common]
    assert cli_main(argv) == 0
    summary = json.loads((out / "tune.json").read_text())
    assert [t["state"] for t in summary["trials"]] == ["COMPLETE", "COMPLETE"]
    tuning = load_state(out)
    assert tuning["rollouts"]["store"] == held["rollouts"]["store"]  # the ablation's rollouts, not rolled out again
    assert tuning["rollouts"]["episode_ids"] == held["rollouts"]["episode_ids"]
    assert {"bo-0", "bo-1"} <= set(tuning["variants"]) and tuning["base"]["n"] == 3  # dev questions 44:47
    best = WeightTable.from_config(load_config(out / "best_weights.toml").weights)
    hand = WeightTable.from_config(load_config().weights)
    assert summary["best_dev_f1"] == max(tuning["variants"][f"bo-{i}"]["eval"]["f1"] for i in (0, 1))

    compared = load_state(out / "heldout")
    assert [r["name"] for r in summary["heldout"]["rows"]] == ["base", "hand", "tuned"]
    assert compared["base"]["reused_from"] == str(ablation)
    assert compared["variants"]["hand"]["reused_from"] == {"run": str(ablation), "variant": "time-dynamic"}
    assert (Path(compared["variants"]["hand"]["eval"]["results"]).read_text()
            == Path(held["variants"]["time-dynamic"]["eval"]["results"]).read_text())
    tuned = compared["variants"]["tuned"]
    if best == hand:  # the hand table won on dev: its held-out row is the ablation's too
        assert tuned["reused_from"]["variant"] == "time-dynamic"
    else:  # another table: trained on the same rollouts and evaluated on the held-out questions
        assert "reused_from" not in tuned and tuned["round"]["status"] == "succeeded" and tuned["eval"]["n"] == 4
    assert (out / "heldout" / "ablation.md").is_file()

    stamps = _adapter_stamps(out)
    assert cli_main(argv) == 0  # rerun: the study holds its 2 trials, every row is done
    assert _adapter_stamps(out) == stamps
    assert len(json.loads((out / "tune.json").read_text())["trials"]) == 2
