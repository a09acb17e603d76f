"""bench.refusal: a run with a refusal setting against the same run without it, from hand-made results (no model)."""
from __future__ import annotations

import json

import pytest

from bench import refusal as br
from evorag_core.methods.base import QuestionResult


def _result(qid: str, prediction: str | None, em: float, f1: float) -> QuestionResult:
    return QuestionResult(qid, "hotpotqa", "q?", prediction, ("gold",), em, f1, 1, (), None, prediction is None)


def test_right_answers_lost_and_wrong_ones_withheld_are_counted():
    """Base: q0-q3 right, q4-q9 wrong. With the setting: q0 and q4-q7 refused, q8 changed to another wrong answer."""
    base = {f"q{i}": _result(f"q{i}", "gold" if i < 4 else "x", float(i < 4), float(i < 4)) for i in range(10)}
    other = dict(base)
    for i in (0, 4, 5, 6, 7):
        other[f"q{i}"] = _result(f"q{i}", None, 0.0, 0.0)
    other["q8"] = _result("q8", "y", 0.0, 0.5)
    ids = [f"q{i}" for i in range(11)]  # q10 finished by neither run
    row = br.compare(base, other, ids, "answerable")
    assert (row["n"], row["missing"]) == (10, 1)
    assert (row["refusal_rate_base"], row["refusal_rate"]) == (0.0, 0.5)
    assert (row["right_lost"], row["right_base"]) == (1, 4)
    assert (row["wrong_withheld"], row["wrong_base"]) == (4, 6)
    assert row["answered"] == 5 and row["em_among_answered"] == pytest.approx(3 / 5)
    assert row["em_among_answered_base"] == pytest.approx(4 / 10)
    assert row["changed_otherwise"] == 1
    assert row["em"]["diff"] == pytest.approx(-0.1) and row["f1"]["diff"] == pytest.approx((-1 + 0.5) / 10)


def test_sets_are_checked_and_the_report_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit, match="SET:START:END:KIND"):
        br.parse_sets("hotpot-pooled:0:10")
    with pytest.raises(SystemExit, match="KIND one of answerable, out"):
        br.parse_sets("bamboogle:0:5:maybe")
    assert br.parse_sets("bamboogle:0:5:out") == [("bamboogle", 0, 5, "out")]
    from evorag_core.data.datasets import load_dataset

    ids = [q.id for q in load_dataset(br.BENCH / br.FILES["bamboogle"]).questions[:5]]
    for folder, refuse in (("base", False), ("with", True)):
        (tmp_path / folder).mkdir()
        rows = [_result(qid, None if refuse and k % 2 else "a", 0.0, 0.0).to_dict() for k, qid in enumerate(ids)]
        (tmp_path / folder / "bamboogle__fixed-k.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "refusal.json"
    assert br.main(["--base-runs", str(tmp_path / "base"), "--runs", str(tmp_path / "with"), "--sets",
                    "bamboogle:0:5:out", "--methods", "fixed-k", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["sets"]["bamboogle:0:5"]["fixed-k"]
    assert row["refusal_rate"] == pytest.approx(2 / 5) and row["wrong_withheld"] == 2 and row["kind"] == "out"
    assert "refusals 0.0 -> 0.4" in capsys.readouterr().out
