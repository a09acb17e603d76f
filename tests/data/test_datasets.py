"""Dataset loaders, format detection, malformed input, corpus modes, round trip and the real benchmark files.

The fixtures under tests/fixtures/ are invented records, hand-written in each benchmark's original format.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.paths import BENCHMARKS, FIXTURES
from evorag_core.data.datasets import build_corpus, dataset_stats, load_dataset, write_jsonl
from evorag_core.errors import ConfigError, DatasetFormatError
from evorag_core.types import Passage, Question


HOTPOT = FIXTURES / "hotpotqa_distractor_tiny.json"
TWOWIKI = FIXTURES / "2wiki_dev_tiny.json"
MUSIQUE = FIXTURES / "musique_ans_dev_tiny.jsonl"
BAMBOOGLE = FIXTURES / "bamboogle_tiny.csv"
COMMON = FIXTURES / "common_tiny.jsonl"
ALL_FIXTURES = [HOTPOT, TWOWIKI, MUSIQUE, BAMBOOGLE, COMMON]


def _write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _jsonl(*records: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


# --- field mapping of each original format ------------------------------------------------------

def test_hotpotqa_mapping():
    """Sentences joined with "" (they carry their own leading space); gold = titles in supporting_facts;
    hops = distinct supporting titles (record 2 names Lake Tessel twice -> 2; record 3 one title -> 1)."""
    ds = load_dataset(HOTPOT)
    assert ds.name == "hotpotqa" and ds.path == str(HOTPOT)
    assert [q.id for q in ds.questions] == ["5f0000000000000000000a01", "5f0000000000000000000a02",
                                            "5f0000000000000000000a03"]
    pid = "hotpotqa:5f0000000000000000000a01:{}".format
    assert ds.questions[0] == Question(
        id="5f0000000000000000000a01", dataset="hotpotqa",
        question="Which river flows through the town where the painter Ilse Marrow was born?",
        answers=("Velka River",), type="bridge", hops=2,
        passages=(
            Passage(pid(0), "Ilse Marrow", "Ilse Marrow (1901\u20131977) was a painter of harbour scenes. She was born in Dornbach."),
            Passage(pid(1), "Dornbach", "Dornbach is a small town in Norland. The Velka River flows through its old quarter."),
            Passage(pid(2), "Velka River", "The Velka River is a 120 km long river in Norland."),
            Passage(pid(3), "Harbour Lights", "Harbour Lights is a 1932 painting. It hangs in the Norland Museum. It was restored in 1990."),
        ),
        gold_pids=frozenset({pid(0), pid(1)}))
    q2, q3 = ds.questions[1], ds.questions[2]
    assert (q2.type, q2.hops, q2.answers) == ("comparison", 2, ("yes",))
    assert q2.gold_pids == {"hotpotqa:5f0000000000000000000a02:0", "hotpotqa:5f0000000000000000000a02:2"}
    assert (q3.hops, q3.gold_pids) == (1, {"hotpotqa:5f0000000000000000000a03:1"})


def test_2wiki_mapping():
    """2Wiki sentences have no leading space and are joined with one space."""
    ds = load_dataset(TWOWIKI)
    assert ds.name == "2wiki"
    q = ds.questions[0]
    pid = "2wiki:0a1b2c3d4e5f11ee8000000000000001:{}".format
    assert q == Question(
        id="0a1b2c3d4e5f11ee8000000000000001", dataset="2wiki",
        question="Who is the mother of the director of film Quiet Orchard?", answers=("Agnes Relling",),
        type="compositional", hops=2,
        passages=(
            Passage(pid(0), "Quiet Orchard", "Quiet Orchard is a 1961 drama film. It was directed by Tomas Relling."),
            Passage(pid(1), "Tomas Relling", "Tomas Relling (1920\u20131999) was a film director. His mother was Agnes Relling."),
            Passage(pid(2), "Agnes Relling", "Agnes Relling was a schoolteacher."),
            Passage(pid(3), "Loud Orchard", "Loud Orchard is a 1975 comedy film."),
        ),
        gold_pids=frozenset({pid(0), pid(1)}))
    assert [x.type for x in ds.questions] == ["compositional", "comparison", "inference"]
    assert ds.questions[1].gold_pids == {"2wiki:0a1b2c3d4e5f11ee8000000000000002:0",
                                         "2wiki:0a1b2c3d4e5f11ee8000000000000002:1"}


def test_musique_mapping_jsonl_and_json_list(tmp_path):
    """answers = answer + aliases; type = id prefix before '__'; hops = len(question_decomposition);
    pid index = the paragraph's idx (record 2 lists idx 2, 0, 1, 3); gold = is_supporting.
    The same records as a JSON list load to the same questions."""
    ds = load_dataset(MUSIQUE)
    assert ds.name == "musique"
    q1, q2, q3 = ds.questions
    assert q1.answers == ("Velka River", "the Velka", "Velka")
    assert (q1.type, q1.hops) == ("2hop", 2)
    assert q1.gold_pids == {"musique:2hop__100001_200002:0", "musique:2hop__100001_200002:2"}
    assert q1.passages[1] == Passage("musique:2hop__100001_200002:1", "Lake Orvin",
                                     "Lake Orvin is the deepest lake of Norland.")
    assert [p.pid.rsplit(":", 1)[1] for p in q2.passages] == ["2", "0", "1", "3"]
    assert q2.passages[0].title == "Norland Museum"
    assert (q2.type, q2.hops, q2.answers) == ("3hop1", 3, ("1950",))
    assert q2.gold_pids == {f"musique:3hop1__300003_400004_500005:{i}" for i in (2, 0, 3)}
    assert (q3.type, q3.hops, q3.answers, q3.gold_pids) == ("4hop3", 4, ("Agnes",), frozenset())

    records = [json.loads(line) for line in MUSIQUE.read_text().splitlines()]
    as_list = _write(tmp_path, "musique.json", json.dumps(records, indent=1))
    assert load_dataset(as_list).questions == ds.questions


def test_bamboogle_csv():
    """Header Question,Answer plus an extra column; ids bamboogle_<0-based row>, the blank line skipped;
    quoted commas kept; no passages, type and hops null."""
    ds = load_dataset(BAMBOOGLE)
    assert ds.name == "bamboogle"
    assert ds.questions == (
        Question("bamboogle_000", "bamboogle", "Who painted Harbour Lights?", ("Ilse Marrow",)),
        Question("bamboogle_001", "bamboogle", "Which lake is deeper, Orvin or Tessel?", ("Lake Orvin, by far",)),
        Question("bamboogle_002", "bamboogle", "When did the Norland Museum open?", ("1950",)),
    )
    assert not any(q.has_passages or q.type or q.hops for q in ds.questions)


def test_common_schema():
    ds = load_dataset(COMMON)
    assert ds.name == "tiny" and len(ds.questions) == 3
    q2 = ds.get("q2")
    assert q2.answers == ("Velka River", "the Velka") and q2.hops == 2 and q2.type == "bridge"
    assert q2.gold_pids == {"tiny:q2:0", "tiny:q2:1"}
    assert ds.get("q3") == Question("q3", "tiny", "Who painted Harbour Lights?", ("Ilse Marrow",))


# --- detection ------------------------------------------------------------------------------------

@pytest.mark.parametrize("source, name", [(HOTPOT, "data.csv"), (TWOWIKI, "hotpot_dev.jsonl"),
                                          (MUSIQUE, "bamboogle.csv"), (BAMBOOGLE, "x.json"),
                                          (COMMON, "hotpot.json")])
def test_detection_ignores_extension(tmp_path, source, name):
    copy = tmp_path / name
    shutil.copy(source, copy)
    assert load_dataset(copy).questions == load_dataset(source).questions


def _strip_markers(records: list[dict]) -> list[dict]:
    """Drop `level`/`evidences` and make every type 'comparison', so only sentence spacing is left."""
    return [{k: v for k, v in r.items() if k not in ("level", "evidences")} | {"type": "comparison"}
            for r in records]


def test_hotpot_vs_2wiki_by_sentence_spacing(tmp_path):
    """Rule (c): with no level/evidences/distinguishing type, leading spaces on later sentences decide.
    Hotpot fixture: all 7 later sentences start with a space -> hotpotqa; 2Wiki: none of 5 -> 2wiki."""
    hot = _write(tmp_path, "a.json", json.dumps(_strip_markers(json.loads(HOTPOT.read_text()))))
    wiki = _write(tmp_path, "b.json", json.dumps(_strip_markers(json.loads(TWOWIKI.read_text()))))
    assert load_dataset(hot).name == "hotpotqa"
    assert load_dataset(wiki).name == "2wiki"
    assert load_dataset(wiki).questions[0].passages[0].text == (
        "Quiet Orchard is a 1961 drama film. It was directed by Tomas Relling.")


def test_single_sentence_paragraphs_default_to_hotpot(tmp_path):
    """Rule (d): no second sentences anywhere -> hotpotqa (the join separator would not matter)."""
    record = {"_id": "x1", "question": "Q?", "answer": "A", "type": "comparison",
              "context": [["T", ["Only sentence."]]], "supporting_facts": [["T", 0]]}
    assert load_dataset(_write(tmp_path, "s.json", json.dumps([record]))).name == "hotpotqa"


def test_mixed_hotpot_and_2wiki_rejected(tmp_path):
    records = json.loads(HOTPOT.read_text())[:1] + json.loads(TWOWIKI.read_text())[:1]
    with pytest.raises(DatasetFormatError, match="mixes 2WikiMultiHopQA records"):
        load_dataset(_write(tmp_path, "mixed.json", json.dumps(records)))


# --- malformed input ------------------------------------------------------------------------------

GOOD = {"id": "a", "dataset": "t", "question": "Q?", "answers": ["A"], "type": None,
        "passages": [{"pid": "t:a:0", "title": "T", "text": "x", "gold": True},
                     {"pid": "t:a:1", "title": "U", "text": "y", "gold": False}], "hops": 1}


def _good(**changes: object) -> dict:
    return {**GOOD, "id": "b", "passages": [{**p, "pid": p["pid"].replace(":a:", ":b:")} for p in GOOD["passages"]],
            **changes}


def _without(key: str) -> dict:
    return {k: v for k, v in _good().items() if k != key}


MALFORMED = [
    # (case, file name, content, record, field, words in the message)
    ("invalid json line 2", "a.jsonl", _jsonl(GOOD) + '{"id": "b", "question": \n', "line 2", None, "invalid JSON"),
    ("invalid json list", "h.json", "[\n" + json.dumps(json.loads(HOTPOT.read_text())[0]) + ',\n {"_id" 2}\n]',
     "line 3", None, "invalid JSON"),
    ("json list not closed", "h.json", "[\n" + json.dumps(json.loads(HOTPOT.read_text())[0]) + "\n", "line 3", None,
     "not closed"),
    ("json list extra data", "h.json", "[\n" + json.dumps(json.loads(HOTPOT.read_text())[0]) + "\n] []", "line 3",
     None, "Extra data"),
    ("missing answers", "a.jsonl", _jsonl(GOOD, _without("answers")), "line 2", "answers", "missing required"),
    ("missing passages", "a.jsonl", _jsonl(GOOD, _without("passages")), "line 2", "passages", "missing required"),
    ("missing passage text", "a.jsonl",
     _jsonl(_good(passages=[{"pid": "t:b:0", "title": "T", "gold": True}])), "line 1", "passages[0].text", "missing"),
    ("answers not a list", "a.jsonl", _jsonl(GOOD, _good(answers="A")), "line 2", "answers", "expected a list"),
    ("answers empty", "a.jsonl", _jsonl(_good(answers=[])), "line 1", "answers", "at least one"),
    ("answer not a string", "a.jsonl", _jsonl(_good(answers=["A", 3])), "line 1", "answers[1]", "non-empty string"),
    ("passages not a list", "a.jsonl", _jsonl(GOOD, _good(passages={"pid": "x"})), "line 2", "passages",
     "expected a list"),
    ("empty question", "a.jsonl", _jsonl(GOOD, _good(question="   ")), "line 2", "question", "must not be empty"),
    ("question not a string", "a.jsonl", _jsonl(_good(question=None)), "line 1", "question", "got null"),
    ("duplicate id", "a.jsonl", _jsonl(GOOD, _good(), _good(id="a", passages=[])), "line 3", "id",
     "duplicate question id 'a' (first at record line 1)"),
    ("duplicate pid", "a.jsonl", _jsonl(GOOD, _good(passages=GOOD["passages"])), "line 2", "passages[0].pid",
     "duplicate passage id 't:a:0'"),
    ("gold string", "a.jsonl", _jsonl(_good(passages=[{**GOOD["passages"][0], "pid": "t:b:0"},
                                                      {**GOOD["passages"][1], "pid": "t:b:1", "gold": "yes"}])),
     "line 1", "passages[1].gold", "expected true or false"),
    ("gold integer", "a.jsonl", _jsonl(_good(passages=[{"pid": "t:b:0", "title": "T", "text": "x", "gold": 1}])),
     "line 1", "passages[0].gold", "expected true or false"),
    ("hops zero", "a.jsonl", _jsonl(_good(hops=0)), "line 1", "hops", "positive integer"),
    ("empty file", "a.jsonl", "", None, None, "empty"),
    ("blank file", "a.json", "  \n\n ", None, None, "empty"),
    ("empty list", "a.json", "[]", None, None, "no questions"),
    ("header only csv", "a.csv", "Question,Answer\n", None, None, "no questions"),
    ("unknown json records", "a.jsonl", _jsonl({"query": "Q?", "gold": "A"}), "line 1", None, "unrecognised format"),
    ("unknown csv", "a.csv", "query,gold\nQ?,A\n", None, None, "unrecognised format"),
    ("prose", "a.txt", "just some text\n", None, None, "unrecognised format"),
    ("list of numbers", "a.json", "[1, 2]", 0, None, "expected an object, got a number"),
    ("not utf-8", "a.jsonl", b'{"id": "\xff"}\n', "line 1", None, "not UTF-8 text (byte 8"),
    ("not utf-8 line 2", "a.jsonl", (_jsonl(GOOD) + '{"id": "').encode() + b'\xff"}\n', "line 2", None, "not UTF-8"),
    ("not utf-8 list", "h.json", b'[\n{"_id": "\xff"}]', "line 2", None, "not UTF-8"),
    ("not utf-8 csv", "a.csv", b"Question,Answer\nQ?,\xff\n", "line 2", None, "not UTF-8"),
    # values nested deeper than json decodes (it raises RecursionError) and one it decodes
    ("nested 100000 deep", "a.jsonl", _jsonl(GOOD) + '{"answers": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
     "line 2", None, "nested too deeply"),
    ("nested 100000 deep in a list", "h.json", "[" + json.dumps(json.loads(HOTPOT.read_text())[0]) + ", "
     + "[" * 100_000 + "]" * 100_000 + "]", 1, None, "nested too deeply"),
    ("nested 100000 deep list", "h.json", "[" * 100_000 + "]" * 100_000, 0, None, "nested too deeply"),
    ("nested answer", "a.jsonl", json.dumps(_good(answers=["A", "DEEP"])).replace('"DEEP"', "[" * 900 + "]" * 900),
     "line 1", "answers[1]", "expected a non-empty string, got [[[["),
    ("csv empty question", "a.csv", "Question,Answer\nQ?,A\n ,B\n", "row 1 (line 3)", "Question", "must not be empty"),
    ("csv missing answer", "a.csv", "Question,Answer\nQ?\n", "row 0 (line 2)", "Answer", "missing value"),
    ("hotpot missing answer", "h.json", json.dumps([{k: v for k, v in r.items() if k != "answer"}
                                                    for r in json.loads(HOTPOT.read_text())]), 0, "answer", "missing"),
    ("hotpot bad context", "h.json", json.dumps([json.loads(HOTPOT.read_text())[0],
                                                 {**json.loads(HOTPOT.read_text())[1], "context": [["T", "flat"]]}]),
     1, "context[0][1]", "list of sentence strings"),
    ("hotpot bad supporting fact", "h.json",
     json.dumps([{**json.loads(HOTPOT.read_text())[0], "supporting_facts": [["T", "0"]]}]),
     0, "supporting_facts[0]", "[title, sentence index]"),
    ("musique is_supporting string", "m.jsonl",
     _jsonl({**json.loads(MUSIQUE.read_text().splitlines()[0]),
             "paragraphs": [{"idx": 0, "title": "T", "paragraph_text": "x", "is_supporting": "true"}]}),
     "line 1", "paragraphs[0].is_supporting", "expected true or false"),
    ("musique missing decomposition", "m.jsonl",
     MUSIQUE.read_text() + _jsonl({k: v for k, v in json.loads(MUSIQUE.read_text().splitlines()[0]).items()
                                   if k != "question_decomposition"} | {"id": "2hop__9_9"}),
     "line 4", "question_decomposition", "missing required"),
]


@pytest.mark.parametrize("case, name, content, record, field, words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_input_names_file_record_and_field(tmp_path, case, name, content, record, field, words):
    path = _write(tmp_path, name, content)
    with pytest.raises(DatasetFormatError) as info:
        load_dataset(path)
    err = info.value
    assert (err.path, err.record, err.field) == (str(path), record, field)
    assert words in err.problem
    assert str(path) in str(err)


def test_unicode_line_separator_and_bom(tmp_path):
    """U+2028 inside a string is not a line break of JSON lines (str.splitlines would split there);
    a UTF-8 byte-order mark is skipped."""
    record = {**GOOD, "question": "Line\u2028separated?"}
    path = _write(tmp_path, "u.jsonl", b"\xef\xbb\xbf" + (json.dumps(record, ensure_ascii=False) + "\n").encode())
    assert load_dataset(path).questions[0].question == "Line\u2028separated?"


def test_the_first_bad_record_fails_before_the_rest_is_read(tmp_path, monkeypatch):
    """Records are checked as they are read: line 2's empty answers fail the load before line 3 (not even UTF-8)
    is read; in a list, element 1's missing answer fails before the broken element 2, and broken JSON in element 1
    fails before the bytes after it (not UTF-8) are read, also when the list is read 64 bytes at a time."""
    from evorag_core.data import datasets

    not_utf8 = b"\xff\xfe" * 1000 + b"\n"
    path = _write(tmp_path, "a.jsonl", _jsonl(GOOD, _good(answers=[])).encode() + not_utf8)
    with pytest.raises(DatasetFormatError) as info:
        load_dataset(path)
    assert (info.value.record, info.value.field) == ("line 2", "answers")
    hotpot = json.loads(HOTPOT.read_text())
    broken = "[" + json.dumps(hotpot[0]) + ", " + json.dumps({k: v for k, v in hotpot[1].items() if k != "answer"})
    with pytest.raises(DatasetFormatError) as info:
        load_dataset(_write(tmp_path, "h.json", broken + ", {oops"))
    assert (info.value.record, info.value.field) == (1, "answer")
    for chunk in (datasets._CHUNK, 64):
        monkeypatch.setattr(datasets, "_CHUNK", chunk)
        bad_json = "[\n" + json.dumps(hotpot[0]) + ',\n{"_id": "x" "question": "?"},\n'
        with pytest.raises(DatasetFormatError) as info:
            load_dataset(_write(tmp_path, "b.json", bad_json.encode() + not_utf8))
        assert info.value.record == "line 3" and "Expecting ',' delimiter" in info.value.problem


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_json_lists_read_in_small_pieces_load_the_same(tmp_path, monkeypatch, chunk):
    """The list reader decodes one element at a time from reads of `_CHUNK` bytes: elements (and numbers, which
    could go on after a read) cut by a read are read whole, and errors keep their line numbers."""
    from evorag_core.data import datasets

    whole = {p: load_dataset(p) for p in (HOTPOT, TWOWIKI)}
    musique = _write(tmp_path, "m.json", "\ufeff [\n" + ",\n".join(MUSIQUE.read_text().splitlines()) + "\n]\n")
    whole[musique] = replace(load_dataset(MUSIQUE), path=str(musique))
    monkeypatch.setattr(datasets, "_CHUNK", chunk)
    for path, expected in whole.items():
        assert load_dataset(path) == expected
    with pytest.raises(DatasetFormatError, match="record 3: expected an object, got a number"):
        load_dataset(_write(tmp_path, "n.json", HOTPOT.read_text().rstrip()[:-1] + ", 12345]"))
    with pytest.raises(DatasetFormatError) as info:
        load_dataset(_write(tmp_path, "bad.json", "[\n" + json.dumps(json.loads(HOTPOT.read_text())[0]) + ",\n\n x]"))
    assert info.value.record == "line 4" and "invalid JSON" in info.value.problem


# --- corpus modes -----------------------------------------------------------------------------------

def test_pooled_corpus_dedups_with_aliases():
    """common_tiny: q1 has pids 0,1; q2:0 repeats q1:1 and q2:1 repeats q1:0 (same title and text);
    q2:2 shares q1:1's title but not its text, so it stays. 5 passages -> 3 distinct, 2 aliases."""
    ds = load_dataset(COMMON)
    corpus = build_corpus(ds, "pooled")
    assert [p.pid for p in corpus.passages] == ["tiny:q1:0", "tiny:q1:1", "tiny:q2:2"]
    assert dict(corpus.aliases) == {"tiny:q2:0": "tiny:q1:1", "tiny:q2:1": "tiny:q1:0"}
    assert corpus.gold_for(ds.get("q2")) == {"tiny:q1:0", "tiny:q1:1"}
    assert build_corpus(ds, "pooled", ds.get("q1")) == corpus  # the question is ignored in pooled mode


def test_pooled_corpus_on_hotpot_fixture():
    """Velka River (a01:2 = a02:1) and Harbour Lights (a01:3 = a03:1) repeat: 9 passages -> 7 distinct."""
    ds = load_dataset(HOTPOT)
    corpus = build_corpus(ds, "pooled")
    pid = "hotpotqa:5f0000000000000000000a0{}:{}".format
    assert len(corpus) == 7
    assert dict(corpus.aliases) == {pid(2, 1): pid(1, 2), pid(3, 1): pid(1, 3)}
    assert [p.pid for p in corpus.passages] == [pid(1, 0), pid(1, 1), pid(1, 2), pid(1, 3), pid(2, 0), pid(2, 2),
                                                pid(3, 0)]
    assert corpus.gold_for(ds.questions[2]) == {pid(1, 3)}


def test_per_question_corpus_and_errors():
    ds = load_dataset(COMMON)
    q2 = ds.get("q2")
    corpus = build_corpus(ds, "per-question", q2)
    assert corpus.passages == q2.passages and dict(corpus.aliases) == {}
    assert build_corpus(ds, "per-question", ds.get("q3")).passages == ()
    with pytest.raises(ConfigError, match="needs the question"):
        build_corpus(ds, "per-question")
    with pytest.raises(ConfigError, match="unknown corpus mode 'per_question'"):
        build_corpus(ds, "per_question", q2)


# --- round trip and stats -------------------------------------------------------------------------

@pytest.mark.parametrize("source", ALL_FIXTURES, ids=[p.name for p in ALL_FIXTURES])
def test_round_trip(tmp_path, source):
    ds = load_dataset(source)
    out = tmp_path / "out.jsonl"
    write_jsonl(ds, out)
    assert replace(load_dataset(out), path=ds.path) == ds
    first = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert list(first) == ["id", "dataset", "question", "answers", "type", "passages", "hops"]


def test_write_rejects_gold_outside_passages(tmp_path):
    ds = load_dataset(COMMON)
    bad = replace(ds, questions=(replace(ds.questions[0], gold_pids=frozenset({"nowhere:0"})),))
    with pytest.raises(DatasetFormatError, match="nowhere:0"):
        write_jsonl(bad, tmp_path / "bad.jsonl")
    assert not (tmp_path / "bad.jsonl").exists()


def test_stats_on_fixture():
    """hotpot fixture: 4+3+2 = 9 passages, 7 distinct; gold 2+2+1 = 5 -> 5/3; types bridge 2, comparison 1;
    hops 2 (q1, q2) and 1 (q3)."""
    stats = dataset_stats(load_dataset(HOTPOT))
    assert stats == {"name": "hotpotqa", "path": str(HOTPOT), "questions": 3, "passages": 9,
                     "distinct_passages": 7, "gold_passages": 5, "gold_per_question": 5 / 3,
                     "gold_histogram": {1: 1, 2: 2}, "types": {"bridge": 2, "comparison": 1}, "hops": {1: 1, 2: 2}}
    assert dataset_stats(load_dataset(BAMBOOGLE))["gold_per_question"] is None


# --- the real benchmark files ---------------------------------------------------------------------

REAL = {
    # file: questions, passages, gold passages (= gold per question x questions), types, hops -- from the README;
    # distinct passages: hotpot from the README, the others measured with an independent one-liner over the raw JSON.
    "hotpotqa_dev300.jsonl": (300, 3000, 600, {"bridge": 179, "comparison": 121}, {2: 300}, 2965),
    "2wiki_dev182.jsonl": (182, 1820, 444, {"compositional": 71, "comparison": 56, "bridge_comparison": 40,
                                            "inference": 15}, {2: 142, 4: 40}, 1426),
    "musique_dev146.jsonl": (146, 2920, 362, {"2hop": 94, "3hop1": 29, "4hop1": 15, "3hop2": 5, "4hop3": 2,
                                              "4hop2": 1}, {2: 94, 3: 34, 4: 18}, 2570),
    "bamboogle_dev60.jsonl": (60, 0, 0, {}, {}, 0),
}


@pytest.mark.skipif(not BENCHMARKS.is_dir(), reason="shared/benchmarks is not beside the repository")
@pytest.mark.parametrize("name", sorted(REAL))
def test_real_benchmark_files(tmp_path, name):
    """README: gold per question 2.00 / 2.44 / 2.48 -> 600/300, 444/182, 362/146 gold passages."""
    n_q, n_p, n_gold, types, hops, distinct = REAL[name]
    source = BENCHMARKS / name
    ds = load_dataset(source)
    stats = dataset_stats(ds)
    assert (stats["questions"], stats["passages"], stats["gold_passages"]) == (n_q, n_p, n_gold)
    assert (stats["types"], stats["hops"], stats["distinct_passages"]) == (types, hops, distinct)
    pooled = build_corpus(ds, "pooled")
    assert len(pooled) == distinct and len(pooled.aliases) == n_p - distinct
    out = tmp_path / name
    write_jsonl(ds, out)
    assert out.read_bytes() == source.read_bytes()  # the writer reproduces the shared files byte for byte


def test_env_corpus_from_pools_other_files(tmp_path):
    """`env.corpus_from` (comma-separated files) adds their passages to the pooled corpus of the data file, in every
    command that builds a Runtime; a missing file fails with the data-format error naming it."""
    from evorag_core.config import load_config
    from evorag_core.data.corpus import build_corpus
    from evorag_core.errors import DatasetFormatError
    from evorag_core.runtime import Runtime
    from tests.paths import DEMO, FIXTURES

    demo = load_dataset(DEMO)
    others = [FIXTURES / "hotpotqa_distractor_tiny.json", FIXTURES / "musique_ans_dev_tiny.jsonl"]
    own = len(build_corpus(demo, "pooled"))
    extra = len({(p.title, p.text) for f in others for q in load_dataset(f).questions for p in q.passages})
    cfg = load_config(None, {"env.corpus_from": ",".join(str(f) for f in others)})
    assert cfg.env.corpus_files == tuple(str(f) for f in others)
    rt = Runtime(cfg, tmp_path, demo)
    pooled = rt.corpus_for(demo.questions[0])
    assert len(pooled) == own + extra  # de-duplicated by (title, text); the demo shares none with the fixtures
    kept = {p.pid for p in pooled.passages} | set(pooled.aliases)
    assert {p.pid for q in load_dataset(others[0]).questions for p in q.passages} <= kept
    assert len(Runtime(load_config(), tmp_path, demo).corpus_for(demo.questions[0])) == own
    bad = Runtime(load_config(None, {"env.corpus_from": str(tmp_path / "nope.jsonl")}), tmp_path, demo)
    with pytest.raises(DatasetFormatError, match="nope.jsonl"):
        bad.corpus_for(demo.questions[0])
