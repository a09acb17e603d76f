"""bench/gpu_check.py, the script a session with a lent GPU runs as is, keeps working: here on the CPU with a tiny
random model, every section (backend figures, agent episode, rollouts, warm-up and timed DPO/GRPO/PPO rounds with hot
swaps, a round under `accelerate launch`, the JSON) runs and reports ok."""
from __future__ import annotations

import json

import pytest
import torch


def _gpu_check_on_the_cpu(tmp_path, monkeypatch, *args: str) -> tuple[int, dict]:
    """gpu_check.main on a tiny random model on the CPU with `args` added; (exit code, the JSON report)."""
    from bench import gpu_check
    from tests.tiny_model import build_tiny_model

    monkeypatch.delenv("OUT", raising=False)
    torch.set_num_threads(1)
    source = build_tiny_model(tmp_path / "source", vocab_size=1024)
    out = tmp_path / "gpu_check.json"
    code = gpu_check.main(["--device", "cpu", "--random-from", str(source), "--shrink", "--hash-embedder",
                           "--dtypes", "float32", "--questions", "6", "--epochs", "1", "--home", str(tmp_path / "home"),
                           "--out", str(out), "--set", "policy.threads=1", *args])
    return code, json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_gpu_check_runs_every_section_on_the_cpu(tmp_path, monkeypatch):
    """Every section in one run (a run costs its setup: model, index, rollouts): the backend figures, an agent
    episode, rollouts, warm-up and timed DPO/GRPO/PPO rounds hot-swapped in, then with `--accelerate` a GRPO round by
    `accelerate launch -m training.worker --once` in a child process (DPO under a launch: tests/training/
    test_multi_process.py)."""
    code, report = _gpu_check_on_the_cpu(tmp_path, monkeypatch, "--train-dtypes", "float32", "--accelerate",
                                          "--accelerate-objectives", "grpo", "--set", "train.dtype=float32")
    assert code == 0 and report["ok"] and not report["errors"], report.get("errors")
    assert report["backend"][0]["greedy_repeatable"] and report["backend"][0]["episode"]["done"]
    assert report["rollouts"]["pairs_queued"] > 0
    assert [r["objective"] for r in report["rounds"]] == ["dpo", "grpo", "ppo"]
    assert all(r["hot_swapped"] and r["logprob_change_max"] > 0 for r in report["rounds"])
    launched = report["accelerate_rounds"]
    assert [r["objective"] for r in launched] == ["grpo"]
    assert all(r["status"] == "succeeded" and r["rc"] == 0 for r in launched), launched
