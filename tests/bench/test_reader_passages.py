"""bench.reader_passages on a real evaluation run (the tiny Llama, demo questions): re-reading each episode's last state
at the run's own `reader_passages` gives back every recorded answer, and another limit is compared with it."""
from __future__ import annotations

import json

import pytest

from bench import reader_passages
from evorag_core.cli.main import main as cli_main
from tests.paths import DEMO

SETS = {"policy.device": "cpu", "policy.threads": 1, "env.t_max": 4, "policy.max_query_tokens": 6,
        "policy.max_answer_tokens": 4, "policy.passage_chars": 160, "env.corpus": "pooled",
        "policy.hop_gate": 100}  # the planner decides: the random tiny model would search to the end


@pytest.mark.slow
def test_the_runs_own_limit_reproduces_every_recorded_answer(tiny, tmp_path):
    sets = {**SETS, "policy.model": str(tiny)}
    run = tmp_path / "agent.jsonl"
    argv = ["eval", "--method", "agent", "--data", str(DEMO), "--home", str(tmp_path / "home"), "--limit", "6",
            "--out", str(run), "--no-store", "--no-progress", "--json"]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    assert cli_main(argv) == 0
    rows = [json.loads(line) for line in run.read_text().splitlines()]
    answered = [r for r in rows if r["extras"]["episode"]["steps"][-1]["action"] == "ANSWER"]
    assert answered, "the tiny agent answered no demo question: nothing to re-read"

    out = tmp_path / "out.json"
    argv = ["--runs", str(run), "--data", str(DEMO), "--limits", "5,1", "--ranker-path", "", "--threads", "1",
            "--out", str(out)]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    assert reader_passages.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["n"] == len(rows) and report["answered"] == len(answered)
    assert report["reproduced"] == len(answered)  # the rebuilt state reads as the live agent read it
    assert report["limits"]["5"]["changed"] == 0
    one = report["limits"]["1"]
    assert one["f1_vs_first"]["n"] == len(rows) and 0 <= one["changed"] <= len(answered)
