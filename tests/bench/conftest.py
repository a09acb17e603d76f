"""The benches' end-to-end tests run on a tiny random Llama whose vocabulary is built from the demo data."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.paths import DEMO


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    rows = [json.loads(line) for line in DEMO.open(encoding="utf-8")]
    texts = [r["question"] for r in rows] + [f"{p['title']}: {p['text']}" for r in rows for p in r["passages"]]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts, vocab_size=2048)


# the tiny agent's settings for re-read benches: the hop planner decides its searches (the random model would search
# to the end), short arguments, the demo file's passages pooled
AGENT_SETS = {"policy.device": "cpu", "policy.threads": 1, "env.t_max": 4, "policy.max_query_tokens": 6,
              "policy.max_answer_tokens": 4, "policy.passage_chars": 160, "env.corpus": "pooled",
              "policy.hop_gate": 100}


@dataclass(frozen=True)
class AgentRun:
    path: Path  # the `evorag eval --method agent` run file (6 demo questions)
    sets: dict  # the settings it ran with (the re-read must use the same), the tiny model's path included
    rows: list[dict]
    answered: list[dict]  # the rows whose episode ended in ANSWER


@pytest.fixture
def tiny_agent_run(tiny, tmp_path) -> AgentRun:
    """The tiny agent's greedy episodes of 6 demo questions, as a bench.agent run file."""
    from evorag_core.cli.main import main as cli_main

    sets = {**AGENT_SETS, "policy.model": str(tiny)}
    run = tmp_path / "agent.jsonl"
    argv = ["eval", "--method", "agent", "--data", str(DEMO), "--home", str(tmp_path / "home"), "--limit", "6",
            "--out", str(run), "--no-store", "--no-progress", "--json"]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    assert cli_main(argv) == 0
    rows = [json.loads(line) for line in run.read_text().splitlines()]
    answered = [r for r in rows if r["extras"]["episode"]["steps"][-1]["action"] == "ANSWER"]
    assert answered, "the tiny agent answered no demo question: nothing to re-read"
    return AgentRun(run, sets, rows, answered)
