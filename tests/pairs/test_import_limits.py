"""`evorag pairs import` and `evorag annotate import` refuse what used to get through (#44 item 7), each with a
DatasetFormatError naming the line (exit 2) and nothing stored: a line nested 100,000 deep (was a RecursionError
traceback, exit 1), a line over MAX_LINE_BYTES (a 50 MB line was stored, then sent in full each time the item was
shown), stage `bogus-stage`, margin or branch return NaN / Infinity, and a refusal item whose episode_db_id and t
name no stored step (its label only failed later, with a toast)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evorag_core.cli.main import main as cli_main
from evorag_core.pairs.io import MAX_DEPTH, MAX_LINE_BYTES
from evorag_core.store import Step, open_store

PAIR = {"prompt": [{"role": "user", "content": "Q"}], "prompt_format": "raw",
        "chosen": [{"role": "assistant", "content": "SEARCH: Ansel Travine"}],
        "rejected": [{"role": "assistant", "content": "ANSWER: Sable River"}],
        "source": "human", "stage": "discovery", "margin": 0.5}
ITEM = {"kind": "preference", "question": "On which river?", "prompt": "P", "stage": "refinement",
        "candidates": [{"completion": "SEARCH: Ansel Travine", "branch_return": 0.5}, {"completion": "REFUSE"}]}
REFUSAL = {"kind": "refusal", "question": "Who?", "passages": [{"title": "A", "text": "B"}]}
DEEP = "[" * 100_000 + "]" * 100_000
LONG = json.dumps({**PAIR, "prompt": [{"role": "user", "content": "x" * MAX_LINE_BYTES}]})
NESTED = json.dumps({**PAIR, "metadata": {"a": json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)}})


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'evorag.db'}"


def _import(tmp_path: Path, url: str, command: str, rows: list) -> int:
    path = tmp_path / f"{command}.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return cli_main([command, "import", str(path), "--db", url, "--home", str(tmp_path)])


PAIR_CASES = [
    (DEEP, None, f"nested deeper than {MAX_DEPTH} levels"),
    (NESTED, None, f"nested deeper than {MAX_DEPTH} levels"),
    (LONG, None, f"the line is longer than {MAX_LINE_BYTES:,} bytes"),
    ({**PAIR, "stage": "bogus-stage"}, "stage", "must be one of discovery, refinement or null, got 'bogus-stage'"),
    (json.dumps({**PAIR, "margin": float("nan")}), "margin", "must be a finite number or null, got nan"),
    ({**PAIR, "margin": float("inf")}, "margin", "must be a finite number or null, got inf"),
]


@pytest.mark.parametrize("bad,field,problem", PAIR_CASES,
                         ids=["deep", "nested", "long", "stage", "nan-margin", "inf-margin"])
def test_pairs_import_refuses_the_line_and_stores_nothing(bad, field, problem, tmp_path, url, capsys):
    """Line 2 of three (a good pair each side) is bad: exit 2, the message names line 2 (and the field)."""
    assert _import(tmp_path, url, "pairs", [PAIR, bad, PAIR]) == 2
    err = capsys.readouterr().err
    where = "line 2" + (f", field '{field}'" if field else "")
    assert f"evorag pairs: error: {tmp_path / 'pairs.jsonl'}, record {where}: {problem}" in err
    assert "Traceback" not in err
    with open_store(url) as store:
        assert store.list_pairs(limit=None) == []


def test_the_limits_take_a_line_just_within_them(tmp_path, url, capsys):
    """MAX_LINE_BYTES of text and MAX_DEPTH levels are taken: only more is refused."""
    content = "x" * (MAX_LINE_BYTES - len(json.dumps({**PAIR, "prompt": [{"role": "user", "content": ""}]})))
    fits = json.dumps({**PAIR, "prompt": [{"role": "user", "content": content}]})
    deep = json.dumps({**PAIR, "metadata": {"a": json.loads("[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2))}})
    assert len(fits.encode()) == MAX_LINE_BYTES
    assert _import(tmp_path, url, "pairs", [fits, deep]) == 0, capsys.readouterr().err
    with open_store(url) as store:
        assert store.count_pairs("status") == {"queued": 2}


ITEM_CASES = [
    (DEEP, None, f"nested deeper than {MAX_DEPTH} levels"),
    (LONG, None, f"the line is longer than {MAX_LINE_BYTES:,} bytes"),
    ({**ITEM, "stage": "bogus-stage"}, "stage", "must be one of discovery, refinement or null"),
    ({**ITEM, "candidates": [{"completion": "REFUSE", "branch_return": float("nan")}, {"completion": "BACKTRACK"}]},
     "candidates[0].branch_return", "must be a finite number or null, got nan"),
    ({**REFUSAL, "episode_db_id": 99, "t": 1}, "episode_db_id", "no stored episode 99"),
    ({**REFUSAL, "episode_db_id": 1, "t": 7}, "t", "episode 1 has no step t=7"),
    ({**REFUSAL, "episode_db_id": 1}, "t", "episode_db_id and t go together"),
    ({**REFUSAL, "t": -1}, "t", "must be a non-negative integer or null"),
]


@pytest.mark.parametrize("bad,field,problem", ITEM_CASES,
                         ids=["deep", "long", "stage", "nan-return", "no-episode", "no-step", "no-t", "negative-t"])
def test_annotate_import_refuses_the_line_and_queues_nothing(bad, field, problem, tmp_path, url, capsys):
    """Stored: episode 1 with steps t = 1, 2. Line 2 of three is bad: exit 2 naming line 2 (and the field)."""
    with open_store(url) as store:
        store.add_episode(question_id="demo-001", dataset="demo", question="Who?", policy="oracle",
                          stage="discovery", schedule="table2", config={},
                          steps=[Step(1, "SEARCH", "x", ()), Step(2, "REFUSE", None, (), judge_verdict="answerable")])
    assert _import(tmp_path, url, "annotate", [ITEM, bad, REFUSAL]) == 2
    err = capsys.readouterr().err
    where = "line 2" + (f", field '{field}'" if field else "")
    assert f"record {where}: {problem}" in err and "Traceback" not in err
    with open_store(url) as store:
        assert store.list_annotation_items() == []
    assert _import(tmp_path, url, "annotate", [ITEM, {**REFUSAL, "episode_db_id": 1, "t": 2}]) == 0
