"""bench.search_headroom: the bounds on hand-made questions, the oracle hop, and a real run (the tiny Llama, demo
questions) whose recorded answers the re-read states give back."""
from __future__ import annotations

import json

import pytest

from bench import search_headroom
from bench.search_headroom import QuestionBounds, oracle_view, summarize
from evorag_core.env.state import AgentView, Hop
from evorag_core.policy.agent import reader_passages
from evorag_core.types import Passage
from tests.paths import DEMO


def _row(qid: str, agent: float, path: tuple[float, ...], evidence: float, *, missed: bool = False) -> QuestionBounds:
    return QuestionBounds(qid, agent, path, evidence, 1.0, missed, not missed)


def test_the_bounds_take_the_best_state_and_the_added_evidence_never_less_than_the_agent():
    stop_early = _row("a", 0.0, (1.0, 0.0), 0.0)  # the first search's state held the answer; the second lost it
    search_more = _row("b", 0.0, (0.0,), 0.5, missed=True)  # the missing gold passage would have given half
    worse = _row("c", 1.0, (1.0,), 0.0, missed=True)  # an added passage that misleads the reader is no bound
    assert (stop_early.oracle_stop, stop_early.oracle_evidence, stop_early.oracle_search) == (1.0, 0.0, 1.0)
    assert (search_more.oracle_stop, search_more.oracle_search) == (0.0, 0.5)
    assert (worse.oracle_evidence, worse.oracle_search) == (1.0, 1.0)

    summary = summarize([stop_early, search_more, worse])
    assert summary["all"]["n"] == 3 and summary["all"]["agent"] == pytest.approx(1 / 3)
    assert summary["all"]["oracle_search"] == pytest.approx(2.5 / 3)
    assert summary["all"]["oracle_search_minus_agent"]["diff"] == pytest.approx(0.5)
    assert "gold_only_minus_agent" not in summary["all"]
    assert summary["first_search_missed"]["n"] == 2 and summary["full_support"]["n"] == 1
    assert summary["first_search_missed"]["oracle_evidence"] == pytest.approx(0.75)


def test_the_oracle_hop_is_read_as_a_further_search():
    found = [Passage(f"p{i}", f"Title {i}", f"text {i}") for i in range(3)]
    gold = Passage("g", "Gold", "the answer")
    view = AgentView("q?", (Hop("q?", tuple(found)),), (), 2, 5)
    assert oracle_view(view, []) is view
    more = oracle_view(view, [gold])
    assert [h.query for h in more.chain][:1] == ["q?"] and more.chain[-1].passages == (gold,)
    assert more.t == 3 and gold in more.passages
    assert gold in reader_passages(more, 5)  # the reader's selection takes it: first of its hop's ranking


@pytest.mark.slow
def test_a_real_run_is_reproduced_and_bounded(tiny_agent_run, tmp_path):
    run, rows, answered = tiny_agent_run.path, tiny_agent_run.rows, tiny_agent_run.answered
    out = tmp_path / "out.json"
    argv = ["--runs", str(run), "--data", str(DEMO), "--ranker-path", "", "--threads", "1", "--out", str(out)]
    for key, value in tiny_agent_run.sets.items():
        argv += ["--set", f"{key}={value}"]
    assert search_headroom.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["answered"] == len(answered) and report["reproduced"] == len(answered)
    whole = report["summary"]["all"]
    assert whole["n"] == len(rows)
    assert whole["agent"] <= whole["oracle_stop"] <= whole["oracle_search"]
    assert whole["oracle_evidence"] <= whole["oracle_search"]
    for q in report["questions"]:
        assert len(q["path"]) >= 1  # every demo episode searched at least once (the first query is the question)
