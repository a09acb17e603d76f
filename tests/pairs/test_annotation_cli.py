"""`evorag annotate import | from-rollouts | export | status` against a SQLite store."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evorag_core.cli.main import main as cli_main
from evorag_core.store import Sibling, Step, open_store

PREF = {"kind": "preference", "question": "On which river?", "prompt": "<|im_start|>user\nQ<|im_end|>\n"
        "<|im_start|>assistant\n", "stage": "discovery",
        "candidates": [{"completion": "SEARCH: Ansel Travine", "preview": "Found:\n[1] Travine: ...",
                        "branch_return": 0.5}, {"completion": "ANSWER: Sable River"}, {"completion": "REFUSE"}]}
REFUSAL = {"kind": "refusal", "question": "Who?", "passages": [{"title": "A", "text": "B"}]}


def _cli(tmp_path: Path, url: str, *argv: str) -> int:
    return cli_main(["annotate", *argv, "--db", url, "--home", str(tmp_path)])


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'evorag.db'}"


def _write(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_import_is_all_or_nothing_with_the_bad_line_named(tmp_path: Path, url: str, capsys) -> None:
    bad = dict(PREF, candidates=[{"completion": "SEARCH: x"}])
    assert _cli(tmp_path, url, "import", str(_write(tmp_path / "bad.jsonl", [PREF, REFUSAL, bad]))) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and "candidates" in err
    assert _cli(tmp_path, url, "import", str(_write(tmp_path / "j.jsonl", [PREF, "{not json"]))) == 2
    assert "line 2" in capsys.readouterr().err
    with open_store(url) as s:
        assert s.list_annotation_items() == []
    assert _cli(tmp_path, url, "import", str(_write(tmp_path / "ok.jsonl", [PREF, REFUSAL, PREF])), "--json") == 0
    assert json.loads(capsys.readouterr().out)["imported"] == 3


def test_export_leaves_out_unresolved_disagreements_and_gives_agreeing_pairs_once(tmp_path: Path, url: str,
                                                                                  capsys) -> None:
    """#46 defect 6. Item a: ann full order 0>1>2 (3 pairs), bob best-only 0>{1,2} (2 pairs): agreement 2/3, a
    disagreement. Item c: ann and bob both 1>{0,2}: agreement 1, 2 pairs - once each, not once per annotator (before:
    4). Item b: ann alone, a tie (0 pairs). Refusal: no pairs.
    Export: c's 2 pairs, a left out and counted (before: a's 5 pairs, 1>2 from ann beside bob's tie, no word).
    --include-disagreements: 2 + a's 3 distinct pairs = 5, and a warning. --min-agreement 0.9: c's 2. HF: 2 rows.
    Once a reviewer resolves a (2 over 0 and 1): its 2 pairs + c's 2, nothing left out."""
    _cli(tmp_path, url, "import", str(_write(tmp_path / "ok.jsonl", [PREF, PREF, REFUSAL, PREF])))
    with open_store(url) as s:
        a, b, r, c = (i.id for i in s.list_annotation_items())
        s.label_annotation_item(a, "ann", "rank", [[0], [1], [2]], per_item=2)
        s.label_annotation_item(a, "bob", "rank", [[0], [1, 2]], per_item=2)
        s.label_annotation_item(b, "ann", "tie", per_item=2)
        s.label_annotation_item(r, "ann", "unanswerable", per_item=2)
        s.label_annotation_item(c, "ann", "rank", [[1], [0, 2]], per_item=2)
        s.label_annotation_item(c, "bob", "rank", [[1], [0, 2]], per_item=2)
    capsys.readouterr()
    out = tmp_path / "pairs.jsonl"
    assert _cli(tmp_path, url, "export", "--out", str(out)) == 0
    said = capsys.readouterr()
    assert said.out.startswith(f"wrote 2 pairs to {out} (trl); left out 1 item whose annotators disagree and no "
                               "reviewer resolved") and said.err == ""
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in rows] == [
        ("ANSWER: Sable River", "SEARCH: Ansel Travine"), ("ANSWER: Sable River", "REFUSE")]
    assert {r["source"] for r in rows} == {"human"} and {r["annotator"] for r in rows} == {"ann"}
    assert all(r["metadata"]["annotators"] == ["ann", "bob"] and r["metadata"]["annotation_item"] == c for r in rows)
    assert rows[0]["metadata"]["agreement"] == 1.0 and rows[0]["prompt"] == [{"role": "user", "content": "Q"}]

    both = tmp_path / "both.jsonl"
    assert _cli(tmp_path, url, "export", "--out", str(both), "--include-disagreements", "--json") == 0
    said = capsys.readouterr()
    assert json.loads(said.out) | {"out": None} == {"pairs": 5, "left_out_disagreements": 0,
                                                    "included_disagreements": 1, "out": None, "format": "trl",
                                                    "min_agreement": None}
    assert "warning: the export includes the pairs of 1 item whose annotators disagree" in said.err
    disputed = [json.loads(line)["metadata"] for line in both.read_text().splitlines()]
    disputed = [m for m in disputed if m["annotation_item"] == a]
    assert [m["annotators"] for m in disputed] == [["ann", "bob"], ["ann", "bob"], ["ann"]]  # 0>1, 0>2, 1>2
    assert disputed[0]["agreement"] == pytest.approx(2 / 3)

    assert _cli(tmp_path, url, "export", "--out", str(tmp_path / "x.jsonl"), "--min-agreement", "0.9", "--json") == 0
    assert json.loads(capsys.readouterr().out)["pairs"] == 2
    assert _cli(tmp_path, url, "export", "--out", str(tmp_path / "hf"), "--format", "hf") == 0
    import datasets

    assert datasets.load_from_disk(str(tmp_path / "hf")).num_rows == 2
    assert cli_main(["pairs", "import", str(both), "--db", url, "--home", str(tmp_path)]) == 0
    with open_store(url) as s:
        assert s.count_pairs("source") == {"human": 5}
        s.resolve_annotation_item(a, "rev", "rank", [[2], [0, 1]])
    capsys.readouterr()
    assert _cli(tmp_path, url, "export", "--out", str(out), "--json") == 0
    said = json.loads(capsys.readouterr().out)
    assert (said["pairs"], said["left_out_disagreements"]) == (4, 0)  # the resolution's 2 over 0 and 1, and c's 2
    assert _cli(tmp_path, url, "status", "--json") == 0
    status = json.loads(capsys.readouterr().out)
    assert status["items_preference"] == 3 and status["resolved"] == 1 and status["items_compared"] == 2


def test_from_rollouts_makes_items_once(tmp_path: Path, url: str, capsys) -> None:
    """A stored rollout episode with branches at t=1 (two candidates) and t=2 (one): one preference item; its
    judged ANSWER step: one refusal item. Running again queues nothing new."""
    branches = {"1": [{"completion": "SEARCH: Ansel Travine", "return": 0.7, "observation": "Found:\n[1] ..."},
                      {"completion": "ANSWER: Sable River", "return": -0.2, "observation": ""}],
                "2": [{"completion": "ANSWER: Sable River", "return": 1.0}]}
    steps = [Step(1, "SEARCH", "Ansel Travine", ("demo:demo-001:0", "demo:demo-001:1"),
                  siblings=(Sibling("SEARCH", "Ansel Travine", -0.1, 0.7), Sibling("ANSWER", "Sable River", -2, -0.2))),
             Step(2, "ANSWER", "Sable River", (), judge_verdict="answerable")]
    with open_store(url) as s:
        s.add_episode(question_id="demo-001", dataset="demo", question="On which river?", policy="lm", stage="discovery",
                      schedule="table2", config={"branches": branches, "prompts": {"1": "PROMPT1", "2": "PROMPT2"}},
                      steps=steps, source="rollout", run="r1")
    assert _cli(tmp_path, url, "from-rollouts", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"found": 2, "queued": 2, "preference": 1, "refusal": 1}
    assert _cli(tmp_path, url, "from-rollouts", "--json") == 0
    assert json.loads(capsys.readouterr().out)["queued"] == 0
    with open_store(url) as s:
        pref, refusal = s.list_annotation_items()
    assert pref.payload["prompt"] == "PROMPT1" and pref.payload["candidates"][0]["branch_return"] == 0.7
    assert pref.payload["chain"] == [] and refusal.payload["t"] == 2
    assert refusal.payload["passages"][0]["title"] == "Travine lamp"
