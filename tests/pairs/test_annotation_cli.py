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


def test_export_pairs_equal_the_labels_and_round_trip_into_the_pair_queue(tmp_path: Path, url: str, capsys) -> None:
    """Item 1: ann full order (3 pairs), bob best-only with the same best (2 pairs): agreement 2/3. Item 2: ann
    alone, a tie (0 pairs). Refusal: no pairs. Export: 5; with --min-agreement 0.9 none; HF folder: 5 rows."""
    _cli(tmp_path, url, "import", str(_write(tmp_path / "ok.jsonl", [PREF, PREF, REFUSAL])))
    with open_store(url) as s:
        a, b, r = (i.id for i in s.list_annotation_items())
        s.label_annotation_item(a, "ann", "rank", [[0], [1], [2]], per_item=2)
        s.label_annotation_item(a, "bob", "rank", [[0], [1, 2]], per_item=2)
        s.label_annotation_item(b, "ann", "tie", per_item=2)
        s.label_annotation_item(r, "ann", "unanswerable", per_item=2)
    capsys.readouterr()
    out = tmp_path / "pairs.jsonl"
    assert _cli(tmp_path, url, "export", "--out", str(out), "--json") == 0
    assert json.loads(capsys.readouterr().out)["pairs"] == 5
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["source"] for r in rows} == {"human"} and {r["annotator"] for r in rows} == {"ann", "bob"}
    assert rows[0]["metadata"]["annotation_item"] == a and rows[0]["metadata"]["agreement"] == pytest.approx(2 / 3)
    assert rows[0]["prompt"] == [{"role": "user", "content": "Q"}]
    assert _cli(tmp_path, url, "export", "--out", str(tmp_path / "none.jsonl"), "--min-agreement", "0.9") == 0
    assert (tmp_path / "none.jsonl").read_text() == ""
    assert _cli(tmp_path, url, "export", "--out", str(tmp_path / "hf"), "--format", "hf") == 0
    import datasets

    assert datasets.load_from_disk(str(tmp_path / "hf")).num_rows == 5
    assert cli_main(["pairs", "import", str(out), "--db", url, "--home", str(tmp_path)]) == 0
    with open_store(url) as s:
        assert s.count_pairs("source") == {"human": 5}
        s.resolve_annotation_item(a, "rev", "rank", [[2], [0, 1]])
    capsys.readouterr()
    assert _cli(tmp_path, url, "export", "--out", str(out), "--min-agreement", "0.9", "--json") == 0
    assert json.loads(capsys.readouterr().out)["pairs"] == 2  # the resolution alone: 2 over 0 and 1
    assert _cli(tmp_path, url, "status", "--json") == 0
    status = json.loads(capsys.readouterr().out)
    assert status["items_preference"] == 2 and status["resolved"] == 1 and status["items_compared"] == 1


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
