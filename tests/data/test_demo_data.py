"""The bundled demo set data/demo/demo.jsonl: counts, gold/answer consistency, shared passages, regeneration.

Pure stdlib: the file is read as JSON lines and the generator data/demo/build_demo.py is imported by path.
"""
from __future__ import annotations

import importlib.util
import json
import re
import string
import sys
from collections import Counter

import pytest

from tests.paths import DEMO_DIR

DEMO_FILE = DEMO_DIR / "demo.jsonl"
KEYS = ["id", "dataset", "question", "answers", "type", "passages", "hops"]
PASSAGE_KEYS = ["pid", "title", "text", "gold"]


def _normalize(text: str) -> str:
    """SPEC §6: lowercase, '_' -> ' ', drop punctuation and a/an/the, collapse spaces."""
    text = text.lower().replace("_", " ")
    text = "".join(ch for ch in text if ch not in set(string.punctuation) - {"_"})
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


@pytest.fixture(scope="module")
def records() -> list[dict]:
    with DEMO_FILE.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def builder():
    name = "_demo_build_demo"
    spec = importlib.util.spec_from_file_location(name, DEMO_DIR / "build_demo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


def test_schema_and_ids(records):
    """Keys in the common-schema order; ids demo-001..demo-NNN; pids demo:<id>:<index> = file position."""
    for n, rec in enumerate(records, start=1):
        assert list(rec) == KEYS
        assert rec["id"] == f"demo-{n:03d}" and rec["dataset"] == "demo"
        assert rec["question"].endswith("?") and rec["answers"] and all(a.strip() for a in rec["answers"])
        assert 8 <= len(rec["passages"]) <= 12, rec["id"]
        for j, p in enumerate(rec["passages"]):
            assert list(p) == PASSAGE_KEYS and isinstance(p["gold"], bool)
            assert p["pid"] == f"demo:{rec['id']}:{j}"
            assert 1 <= len(re.findall(r"[.!?](?:\s|$)", p["text"])) <= 4, p["title"]
    pids = [p["pid"] for rec in records for p in rec["passages"]]
    assert len(pids) == len(set(pids))


def test_counts(records):
    """>= 44 questions; >= 8 bridge and comparison, >= 6 three-hop, >= 9 unanswerable; >= 200 passages."""
    types = Counter(rec["type"] for rec in records)
    assert len(records) >= 44
    assert types["bridge"] >= 8 and types["comparison"] >= 8 and types["unanswerable"] >= 9
    assert sum(rec["hops"] == 3 for rec in records) >= 6
    assert set(types) == {"bridge", "comparison", "3hop", "unanswerable"}
    distinct = {(p["title"], p["text"]) for rec in records for p in rec["passages"]}
    assert len(distinct) >= 200


def test_same_title_same_text(records):
    """Shared passages are copied verbatim, so pooling by (title, text) merges them."""
    text_of: dict[str, str] = {}
    for rec in records:
        for p in rec["passages"]:
            assert text_of.setdefault(p["title"], p["text"]) == p["text"], p["title"]


def test_answerable_gold(records):
    """hops = number of gold passages (2, or 3 for '3hop'); every answer is in the last gold passage."""
    for rec in (r for r in records if r["type"] != "unanswerable"):
        gold = [p for p in rec["passages"] if p["gold"]]
        assert rec["hops"] == len(gold) == (3 if rec["type"] == "3hop" else 2), rec["id"]
        assert len({p["title"] for p in gold}) == len(gold)
        for answer in rec["answers"]:
            assert answer.lower() in gold[-1]["text"].lower(), (rec["id"], answer)
            assert _normalize(answer) in _normalize(gold[-1]["text"])


def test_chains_are_not_short_circuited(records):
    """Bridge/3hop: the answer's passage is not named in the question (the chain must be followed)."""
    for rec in (r for r in records if r["type"] in ("bridge", "3hop")):
        last = [p for p in rec["passages"] if p["gold"]][-1]
        assert re.sub(r" \(.*\)$", "", last["title"]).lower() not in rec["question"].lower(), rec["id"]


def test_unanswerable(records):
    """No gold, hops null, the answer string in none of the question's passages nor anywhere in the corpus."""
    corpus = " ".join(_normalize(p["title"] + " " + p["text"]) for r in records for p in r["passages"])
    unanswerable = [r for r in records if r["type"] == "unanswerable"]
    for rec in unanswerable:
        assert rec["hops"] is None and not any(p["gold"] for p in rec["passages"]), rec["id"]
        for answer in rec["answers"]:
            assert all(_normalize(answer) not in _normalize(p["title"] + " " + p["text"]) for p in rec["passages"])
            assert _normalize(answer) not in corpus, (rec["id"], answer)


def _names(text: str) -> set[str]:
    return set(re.findall(r"\b[A-Z][a-z]+\b", text)) - {"What", "Who", "Which", "How", "In", "The", "It", "She", "He",
                                                           "Its", "Ostrevia", "Ostrevian"}


def test_unanswerable_passages_are_topical(records):
    """Related but insufficient: >= 2 passages share a name with the question, and at least half share a
    name with the question or with one of those passages (names = capitalised words, 'Ostrevia' aside)."""
    for rec in (r for r in records if r["type"] == "unanswerable"):
        asked = _names(rec["question"])
        direct = [p for p in rec["passages"] if asked & _names(p["title"] + " " + p["text"])]
        assert len(direct) >= 2, rec["id"]
        near = asked.union(*(_names(p["title"] + " " + p["text"]) for p in direct))
        related = [p for p in rec["passages"] if near & _names(p["title"] + " " + p["text"])]
        assert 2 * len(related) >= len(rec["passages"]), rec["id"]


def test_file_matches_generator(builder):
    """demo.jsonl is exactly what build_demo.py writes now (seeded, hence deterministic)."""
    first = builder.render_jsonl(builder.build_records())
    assert first == DEMO_FILE.read_text(encoding="utf-8")
    assert builder.render_jsonl(builder.build_records()) == first


def test_generator_covers_whole_world(builder, records):
    """Every passage of the world appears in some question, so the pooled corpus is the whole world."""
    world = {(t, x) for passages in builder.WORLD.values() for t, x in passages.items()}
    assert world == {(p["title"], p["text"]) for rec in records for p in rec["passages"]}
