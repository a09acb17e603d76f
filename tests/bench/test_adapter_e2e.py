"""bench/adapter_e2e.py without a model: adapter runs against a base run of the same questions - each arm's
bootstrap, the seed mean, and the reader's figures on the questions whose base run retrieved every gold passage."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evorag_core.methods.base import QuestionResult


def _run(path: Path, f1s: list[float], support: list[float | None]) -> Path:
    rows = [QuestionResult(question_id=f"q{i}", dataset="hotpotqa", question=f"question {i}", prediction=f"a{f1}",
                           gold=("g",), em=float(f1 == 1.0), f1=f1, steps=3, passages=(), support_recall=s,
                           refused=False).to_dict() for i, (f1, s) in enumerate(zip(f1s, support))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_report_against_the_base(tmp_path):
    from bench.adapter_e2e import main

    support = [1.0, 1.0, 0.5, 1.0]
    base = _run(tmp_path / "base.jsonl", [0.0, 1.0, 0.0, 0.5], support)
    s0 = _run(tmp_path / "s0.jsonl", [1.0, 1.0, 1.0, 0.5], support)
    s1 = _run(tmp_path / "s1.jsonl", [0.0, 1.0, 1.0, 0.0], support)
    out = tmp_path / "e2e.json"
    assert main(["--base", str(base), "--adapter", f"s0={s0}", "--adapter", f"s1={s1}", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["summaries"]["s0"]["f1"] == pytest.approx(0.875)
    assert result["vs_base"]["s0"]["f1"]["diff"] == pytest.approx(0.5)
    assert result["vs_base"]["s1"]["f1"]["diff"] == pytest.approx(0.125)
    assert result["vs_base"]["s0"]["changes"]["changed"] == 2
    assert result["seed_mean_vs_base"]["f1"]["mean_a"] == pytest.approx((0.875 + 0.5) / 2)
    full = result["full_support"]  # q2 (half its gold retrieved) is left out
    assert (full["n"], full["of"]) == (3, 4)
    assert full["base"]["f1"] == pytest.approx(0.5)
    assert full["s0"]["f1"] == pytest.approx(2.5 / 3)
    assert full["s1"]["f1"] == pytest.approx(1 / 3)


def test_no_full_support_question(tmp_path, capsys):
    """Runs whose questions have no gold passages (support recall None) or never all of them: no full-support figure."""
    from bench.adapter_e2e import main

    base = _run(tmp_path / "base.jsonl", [0.0, 1.0], [None, 0.5])
    s0 = _run(tmp_path / "s0.jsonl", [1.0, 1.0], [None, 0.5])
    out = tmp_path / "e2e.json"
    assert main(["--base", str(base), "--adapter", f"s0={s0}", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["full_support"] == {"n": 0, "of": 2}
    assert "no question of the base run retrieved every gold passage" in capsys.readouterr().out


def test_bad_arguments_are_named(tmp_path, capsys):
    from bench.adapter_e2e import main

    base = _run(tmp_path / "base.jsonl", [0.0], [1.0])
    with pytest.raises(SystemExit):
        main(["--base", str(base), "--adapter", "no-name-given", "--out", str(tmp_path / "o.json")])
    assert "NAME=RUNS_JSONL" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--base", str(base), "--adapter", f"s0={tmp_path / 'missing.jsonl'}", "--out", str(tmp_path / "o.json")])
    assert "no run file" in capsys.readouterr().err
