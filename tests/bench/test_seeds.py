"""bench.seeds: several seeds of one reader round against the base, from the runs' reader rows (no model)."""
from __future__ import annotations

import json

import pytest

from bench import seeds as bs


def _home(tmp_path, name, base, adapter):
    home = tmp_path / name / "learn"
    home.mkdir(parents=True)
    for policy, answers in (("base", base), ("dpo", adapter)):
        rows = [{"dump": "fixedk.jsonl", "question_id": qid, "prediction": pred, "kind": "span", "gold": ["g"],
                 "em": em, "f1": f1} for qid, (pred, em, f1) in answers.items()]
        (home / f"learning_reader_{policy}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return home


BASE = {f"q{i}": ("wrong", 0.0, 0.0) for i in range(30)}


def test_the_seed_mean_and_each_seed_against_the_base(tmp_path):
    """Seed a answers q0..q9 right, seed b q0..q4: seed means per question are 1.0 (q0-q4), 0.5 (q5-q9), 0 else,
    so the seed-mean F1 is (5 + 2.5) / 30 = 0.25; each seed's own diff is 10/30 and 5/30."""
    right = ("g", 1.0, 1.0)
    a = _home(tmp_path, "a", BASE, {**BASE, **{f"q{i}": right for i in range(10)}})
    b = _home(tmp_path, "b", BASE, {**BASE, **{f"q{i}": right for i in range(5)}})
    base, runs = bs.load_runs([a, b], a, "dpo", None)
    result = bs.combine(base, runs, resamples=2000)
    assert result.n == 30 and result.base == {"em": 0.0, "f1": 0.0}
    assert [r.name for r in result.seeds] == ["a", "b"]
    assert [r.changed for r in result.seeds] == [10, 5]
    assert result.seeds[0].vs_base["f1"].diff == pytest.approx(10 / 30)
    assert result.seed_mean["f1"].diff == pytest.approx(7.5 / 30)
    assert result.seed_mean["f1"].p_value < 0.05 and result.every_seed_positive and result.target_met
    assert "seed mean" in bs.report(result)


def test_one_seed_no_better_than_the_base_misses_the_target(tmp_path):
    """The seed mean is above the base (p < 0.05) but one seed is not: the declared rule says not met."""
    right = ("g", 1.0, 1.0)
    a = _home(tmp_path, "a", BASE, {**BASE, **{f"q{i}": right for i in range(20)}})
    b = _home(tmp_path, "b", BASE, BASE)
    result = bs.combine(*bs.load_runs([a, b], a, "dpo", None), resamples=2000)
    assert result.seed_mean["f1"].p_value < 0.05
    assert not result.every_seed_positive and not result.target_met


def test_runs_whose_base_answers_differ_are_refused_by_question(tmp_path):
    a = _home(tmp_path, "a", BASE, BASE)
    b = _home(tmp_path, "b", {**BASE, "q3": ("other", 0.0, 0.0)}, BASE)
    with pytest.raises(ValueError, match="q3: .*'wrong' vs .*'other'"):
        bs.load_runs([a, b], a, "dpo", None)


def test_a_malformed_row_names_its_file_and_line(tmp_path):
    a = _home(tmp_path, "a", BASE, BASE)
    (a / "learning_reader_dpo.jsonl").write_text('{"dump": "fixedk.jsonl"}\n')
    with pytest.raises(ValueError, match="learning_reader_dpo.jsonl:1: not a reader row"):
        bs.load_runs([a], a, "dpo", None)


def test_the_command_writes_json(tmp_path, capsys):
    right = ("g", 1.0, 1.0)
    a = _home(tmp_path, "a", BASE, {**BASE, "q1": right})
    out = tmp_path / "seeds.json"
    bs.main(["--homes", str(a), "--out", str(out), "--resamples", "500"])
    data = json.loads(out.read_text())
    assert data["n"] == 30 and data["seeds"][0]["changed"] == 1 and data["target_met"] is False
    assert "| a |" in capsys.readouterr().out
