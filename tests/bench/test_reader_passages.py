"""bench.reader_passages on a real evaluation run (the tiny Llama, demo questions): re-reading each episode's last state
at the run's own `reader_passages` gives back every recorded answer, and another limit is compared with it."""
from __future__ import annotations

import json

import pytest

from bench import reader_passages
from tests.paths import DEMO


@pytest.mark.slow
def test_the_runs_own_limit_reproduces_every_recorded_answer(tiny_agent_run, tmp_path):
    run, rows, answered = tiny_agent_run.path, tiny_agent_run.rows, tiny_agent_run.answered
    out = tmp_path / "out.json"
    argv = ["--runs", str(run), "--data", str(DEMO), "--limits", "5,1", "--ranker-path", "", "--threads", "1",
            "--out", str(out)]
    for key, value in tiny_agent_run.sets.items():
        argv += ["--set", f"{key}={value}"]
    assert reader_passages.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["n"] == len(rows) and report["answered"] == len(answered)
    assert report["reproduced"] == len(answered)  # the rebuilt state reads as the live agent read it
    assert report["limits"]["5"]["changed"] == 0
    one = report["limits"]["1"]
    assert one["f1_vs_first"]["n"] == len(rows) and 0 <= one["changed"] <= len(answered)
