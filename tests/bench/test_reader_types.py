"""bench.reader_types' comparison from recorded rows (no model): `--merge` reports earlier rows against a recorded
reader, and `--without SET:A:B` repeats the comparison without the questions at those positions of the set's file."""
from __future__ import annotations

import json

import pytest

from bench import reader_types as rt


def _row(q, em: float) -> dict:
    return {"set": "2wiki", "id": q.id, "question": q.question, "answers": list(q.answers), "pred": "x" if em else "y",
            "kind": "span", "em": em, "f1": em, "gold_yes_no": False}


def test_without_leaves_the_declared_positions_out_of_the_second_comparison(benchmarks, tmp_path):
    from evorag_core.data.datasets import load_dataset

    qs = load_dataset(benchmarks / rt.FILES["2wiki"]).questions[50:54]
    before = [_row(q, 0.0) for q in qs]
    after = [_row(q, em) for q, em in zip(qs, (1.0, 0.0, 1.0, 1.0))]  # better on 50, 52 and 53
    rec, part, out = tmp_path / "rec.json", tmp_path / "part.json", tmp_path / "out.json"
    rec.write_text(json.dumps({"rows": before}))
    part.write_text(json.dumps({"seconds": 1.0, "variants": {"new": {"overrides": {}}}, "rows": {"new": after}}))
    assert rt.main(["--split", "heldout", "--merge", str(part), "--before", str(rec), "--without", "2wiki:52:54",
                    "--out", str(out)]) == 0
    entry = json.loads(out.read_text())["variants"]["new"]
    assert entry["vs_before"]["n"] == 4 and entry["vs_before"]["f1"]["diff"] == pytest.approx(0.75)
    kept = entry["vs_before_without"]
    assert kept["without"] == ["2wiki:52:54"] and kept["n"] == 2  # positions 52 and 53 left out
    assert kept["f1"]["diff"] == pytest.approx(0.5) and kept["changed"] == 1
