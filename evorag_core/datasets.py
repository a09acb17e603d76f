"""Load multi-hop QA data: the project's JSON-lines schema and four benchmarks' original releases.

`load_dataset(path)` decides the format from the file's content, never from its extension:

1. The text (UTF-8, optional BOM) starting with ``[`` is a JSON list, with ``{`` JSON lines; any
   other text is read as CSV and needs a ``Question`` and an ``Answer`` column (Bamboogle).
2. The first JSON record's keys pick the record format: ``paragraphs`` -> MuSiQue; ``context`` ->
   HotpotQA or 2WikiMultiHopQA; ``passages``, ``answers`` or ``dataset`` -> the common schema
   (/work/shared/benchmarks/README.md). Every later record must then be of that format.
3. HotpotQA and 2WikiMultiHopQA share their fields; the whole file is one or the other, by the first
   rule that fires: (a) a record has ``evidences`` or a 2Wiki-only type (compositional, inference,
   bridge_comparison) -> 2Wiki; (b) a record has ``level`` or type ``bridge`` -> HotpotQA (a file
   firing both (a) and (b) is rejected as mixed); (c) of all sentences after a paragraph's first, more
   than half start with whitespace -> HotpotQA (its sentences carry their leading space), otherwise
   2Wiki; (d) no paragraph has a second sentence -> HotpotQA (both joins give the same text then).

Conversion follows the README's rules; pids are ``<dataset>:<id>:<index>`` (MuSiQue: ``idx``).
Any malformed record fails the whole load with a `DatasetFormatError` naming the file, the record
(``"line N"`` for JSON lines, the 0-based index for a JSON list, ``"row N (line M)"`` for CSV) and
the field. `Dataset.name` is the questions' ``dataset`` value (several joined with ``+``).
"""
from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .corpus import CORPUS_MODES, build_corpus
from .errors import DatasetFormatError
from .types import Dataset, Passage, Question

__all__ = ["load_dataset", "write_jsonl", "dataset_stats", "build_corpus", "CORPUS_MODES"]

_TWOWIKI_TYPES = frozenset({"compositional", "inference", "bridge_comparison"})
_KINDS = {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
          str: "a string", list: "a list", dict: "an object"}


@dataclass(frozen=True)
class _Rec:
    """One raw record and where it came from, to build errors that point at it."""

    path: str
    label: str | int
    data: Any

    def error(self, field: str | None, problem: str) -> DatasetFormatError:
        return DatasetFormatError(self.path, self.label, field, problem)


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def _get(rec: _Rec, obj: dict, key: str, where: str = "") -> Any:
    if key not in obj:
        raise rec.error(where + key, "missing required field")
    return obj[key]


def _text(rec: _Rec, obj: dict, key: str, where: str = "", *, allow_empty: bool = False) -> str:
    value = _get(rec, obj, key, where)
    if not isinstance(value, str):
        raise rec.error(where + key, f"expected a string, got {_kind(value)}")
    if not allow_empty and not value.strip():
        raise rec.error(where + key, "must not be empty")
    return value


def _optional_text(rec: _Rec, obj: dict, key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise rec.error(key, f"expected a string or null, got {_kind(value)}")
    return value


def _list(rec: _Rec, obj: dict, key: str, where: str = "") -> list:
    value = _get(rec, obj, key, where)
    if not isinstance(value, list):
        raise rec.error(where + key, f"expected a list, got {_kind(value)}")
    return value


def _bool(rec: _Rec, obj: dict, key: str, where: str = "") -> bool:
    value = _get(rec, obj, key, where)
    if not isinstance(value, bool):
        raise rec.error(where + key, f"expected true or false, got {_kind(value)} {value!r:.40}")
    return value


def _int(rec: _Rec, obj: dict, key: str, where: str = "") -> int:
    value = _get(rec, obj, key, where)
    if not isinstance(value, int) or isinstance(value, bool):
        raise rec.error(where + key, f"expected an integer, got {_kind(value)}")
    return value


def _strings(rec: _Rec, values: list, field: str) -> tuple[str, ...]:
    for i, value in enumerate(values):
        if not isinstance(value, str) or not value.strip():
            raise rec.error(f"{field}[{i}]", f"expected a non-empty string, got {value!r:.40}")
    return tuple(values)


def _object(rec: _Rec, value: Any, field: str | None) -> dict:
    if not isinstance(value, dict):
        raise rec.error(field, f"expected an object, got {_kind(value)}")
    return value


# --- the common schema -------------------------------------------------------------------------

def _common_question(rec: _Rec) -> Question:
    obj = rec.data
    qid, name, text = _text(rec, obj, "id"), _text(rec, obj, "dataset"), _text(rec, obj, "question")
    answers = _list(rec, obj, "answers")
    if not answers:
        raise rec.error("answers", "must hold at least one answer")
    hops = obj.get("hops")
    if hops is not None and (not isinstance(hops, int) or isinstance(hops, bool) or hops < 1):
        raise rec.error("hops", f"expected a positive integer or null, got {hops!r:.40}")
    passages, gold = [], set()
    for i, raw in enumerate(_list(rec, obj, "passages")):
        where = f"passages[{i}]."
        item = _object(rec, raw, f"passages[{i}]")
        pid = _text(rec, item, "pid", where)
        passages.append(Passage(pid, _text(rec, item, "title", where, allow_empty=True),
                                _text(rec, item, "text", where, allow_empty=True)))
        if _bool(rec, item, "gold", where):
            gold.add(pid)
    return Question(id=qid, dataset=name, question=text, answers=_strings(rec, answers, "answers"),
                    type=_optional_text(rec, obj, "type"), hops=hops, passages=tuple(passages),
                    gold_pids=frozenset(gold))


# --- MuSiQue -------------------------------------------------------------------------------------

def _musique_question(rec: _Rec) -> Question:
    obj = rec.data
    qid = _text(rec, obj, "id")
    aliases = obj.get("answer_aliases", [])
    if not isinstance(aliases, list):
        raise rec.error("answer_aliases", f"expected a list, got {_kind(aliases)}")
    passages, gold = [], set()
    for i, raw in enumerate(_list(rec, obj, "paragraphs")):
        where = f"paragraphs[{i}]."
        item = _object(rec, raw, f"paragraphs[{i}]")
        pid = f"musique:{qid}:{_int(rec, item, 'idx', where)}"
        passages.append(Passage(pid, _text(rec, item, "title", where, allow_empty=True),
                                _text(rec, item, "paragraph_text", where, allow_empty=True)))
        if _bool(rec, item, "is_supporting", where):
            gold.add(pid)
    hops = len(_list(rec, obj, "question_decomposition")) or None
    answers = (_text(rec, obj, "answer"),) + _strings(rec, aliases, "answer_aliases")
    return Question(id=qid, dataset="musique", question=_text(rec, obj, "question"), answers=answers,
                    type=qid.split("__", 1)[0] if "__" in qid else None, hops=hops,
                    passages=tuple(passages), gold_pids=frozenset(gold))


# --- HotpotQA and 2WikiMultiHopQA ----------------------------------------------------------------

@dataclass(frozen=True)
class _WikiRecord:
    rec: _Rec
    qid: str
    question: str
    answer: str
    type: str | None
    paragraphs: tuple[tuple[str, tuple[str, ...]], ...]
    support: tuple[str, ...]  # distinct supporting titles, first-seen order


def _parse_wiki(rec: _Rec) -> _WikiRecord:
    obj = rec.data
    paragraphs = []
    for i, item in enumerate(_list(rec, obj, "context")):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise rec.error(f"context[{i}]", f"expected [title, [sentences...]], got {item!r:.60}")
        if not isinstance(item[1], list) or not all(isinstance(s, str) for s in item[1]):
            raise rec.error(f"context[{i}][1]", "expected a list of sentence strings")
        paragraphs.append((item[0], tuple(item[1])))
    support: list[str] = []
    for i, fact in enumerate(_list(rec, obj, "supporting_facts")):
        if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)
                and isinstance(fact[1], int) and not isinstance(fact[1], bool)):
            raise rec.error(f"supporting_facts[{i}]", f"expected [title, sentence index], got {fact!r:.60}")
        if fact[0] not in support:
            support.append(fact[0])
    return _WikiRecord(rec, _text(rec, obj, "_id"), _text(rec, obj, "question"), _text(rec, obj, "answer"),
                       _optional_text(rec, obj, "type"), tuple(paragraphs), tuple(support))


def _wiki_flavour(path: str, records: list[_WikiRecord]) -> str:
    """'hotpotqa' or '2wiki' by the module docstring's rule 3."""
    wiki = next((r for r in records if "evidences" in r.rec.data or r.type in _TWOWIKI_TYPES), None)
    hotpot = next((r for r in records if "level" in r.rec.data or r.type == "bridge"), None)
    if wiki and hotpot:
        raise DatasetFormatError(path, None, None, "mixes 2WikiMultiHopQA records (e.g. record "
                                 f"{wiki.rec.label}) with HotpotQA records (e.g. record {hotpot.rec.label})")
    if wiki or hotpot:
        return "2wiki" if wiki else "hotpotqa"
    later = [s for r in records for _, sentences in r.paragraphs for s in sentences[1:]]
    spaced = sum(1 for s in later if s[:1].isspace())
    return "hotpotqa" if not later or 2 * spaced > len(later) else "2wiki"


def _wiki_question(raw: _WikiRecord, dataset: str) -> Question:
    sep = "" if dataset == "hotpotqa" else " "
    passages = tuple(Passage(f"{dataset}:{raw.qid}:{i}", title, sep.join(sentences))
                     for i, (title, sentences) in enumerate(raw.paragraphs))
    gold = frozenset(p.pid for p in passages if p.title in raw.support)
    return Question(id=raw.qid, dataset=dataset, question=raw.question, answers=(raw.answer,),
                    type=raw.type, hops=len(raw.support) or None, passages=passages, gold_pids=gold)


def _wiki_questions(path: str, recs: list[_Rec]) -> list[tuple[_Rec, Question]]:
    raws = [_parse_wiki(rec) for rec in recs]
    dataset = _wiki_flavour(path, raws)
    return [(raw.rec, _wiki_question(raw, dataset)) for raw in raws]


# --- Bamboogle CSV -------------------------------------------------------------------------------

def _bamboogle_questions(path: str, text: str) -> list[tuple[_Rec, Question]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [name.strip() for name in next(reader)]
        columns = {name.lower(): i for i, name in reversed(list(enumerate(header)))}
        if "question" not in columns or "answer" not in columns:
            raise DatasetFormatError(path, None, None, _unrecognised(f"CSV header {header!r:.80}"))
        qcol, acol = columns["question"], columns["answer"]
        out, row_no = [], 0
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            rec = _Rec(path, f"row {row_no} (line {reader.line_num})", row)
            values = {key: row[col] if col < len(row) else None
                      for key, col in (("Question", qcol), ("Answer", acol))}
            for key, value in values.items():
                if value is None:
                    raise rec.error(key, "missing value")
                if not value.strip():
                    raise rec.error(key, "must not be empty")
            out.append((rec, Question(id=f"bamboogle_{row_no:03d}", dataset="bamboogle",
                                      question=values["Question"], answers=(values["Answer"],))))
            row_no += 1
    except csv.Error as exc:
        raise DatasetFormatError(path, f"line {reader.line_num}", None, f"invalid CSV: {exc}") from exc
    return out


# --- reading, detection, checks ------------------------------------------------------------------

def _unrecognised(found: str) -> str:
    return ("unrecognised format: expected JSON lines (common schema or MuSiQue), a JSON list (HotpotQA, "
            f"2WikiMultiHopQA, MuSiQue) or a CSV with Question and Answer columns (Bamboogle); found {found}")


def _json_records(path: str, text: str) -> list[_Rec]:
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(path, f"line {exc.lineno}", None,
                                     f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
        return [_Rec(path, i, item) for i, item in enumerate(data)]
    records = []
    for n, line in enumerate(text.split("\n"), start=1):  # not splitlines(): U+2028 may sit in a string
        if not line.strip():
            continue
        try:
            records.append(_Rec(path, f"line {n}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(path, f"line {n}", None,
                                     f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
    return records


def _json_questions(path: str, text: str) -> list[tuple[_Rec, Question]]:
    recs = _json_records(path, text)
    for rec in recs:
        _object(rec, rec.data, None)
    if not recs:
        return []
    keys = recs[0].data.keys()
    if "paragraphs" in keys:
        return [(rec, _musique_question(rec)) for rec in recs]
    if "context" in keys:
        return _wiki_questions(path, recs)
    if keys & {"passages", "answers", "dataset"}:
        return [(rec, _common_question(rec)) for rec in recs]
    raise recs[0].error(None, _unrecognised(f"a record with keys {sorted(keys)!r:.120}"))


def _check_unique(pairs: list[tuple[_Rec, Question]]) -> None:
    seen_ids: dict[str, _Rec] = {}
    seen_pids: dict[str, _Rec] = {}
    for rec, q in pairs:
        if q.id in seen_ids:
            raise rec.error("id", f"duplicate question id {q.id!r} (first at record {seen_ids[q.id].label})")
        seen_ids[q.id] = rec
        for i, p in enumerate(q.passages):
            if p.pid in seen_pids:
                first = seen_pids[p.pid].label
                raise rec.error(f"passages[{i}].pid", f"duplicate passage id {p.pid!r} (first at record {first})")
            seen_pids[p.pid] = rec


def load_dataset(path: str | Path) -> Dataset:
    """Read a data file in any supported format (see the module docstring); all or nothing."""
    where = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise DatasetFormatError(where, None, None, f"cannot read the file ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(where, None, None, f"not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    if not text.strip():
        raise DatasetFormatError(where, None, None, "the file is empty")
    reader: Callable[[str, str], list[tuple[_Rec, Question]]]
    reader = _json_questions if text.lstrip()[0] in "[{" else _bamboogle_questions
    pairs = reader(where, text)
    if not pairs:
        raise DatasetFormatError(where, None, None, "the file holds no questions")
    _check_unique(pairs)
    questions = tuple(q for _, q in pairs)
    name = "+".join(dict.fromkeys(q.dataset for q in questions))
    return Dataset(name=name, path=where, questions=questions)


# --- writing and statistics ----------------------------------------------------------------------

def _to_record(q: Question, path: str) -> dict[str, Any]:
    stray = q.gold_pids - {p.pid for p in q.passages}
    if stray:
        raise DatasetFormatError(path, q.id, "gold_pids", f"{sorted(stray)} are not among the question's passages")
    passages = [{"pid": p.pid, "title": p.title, "text": p.text, "gold": p.pid in q.gold_pids} for p in q.passages]
    return {"id": q.id, "dataset": q.dataset, "question": q.question, "answers": list(q.answers),
            "type": q.type, "passages": passages, "hops": q.hops}


def write_jsonl(dataset: Dataset, path: str | Path) -> None:
    """Write `dataset` in the common schema; `load_dataset` gives back the same questions."""
    lines = [json.dumps(_to_record(q, str(path)), ensure_ascii=False) + "\n" for q in dataset.questions]
    Path(path).write_text("".join(lines), encoding="utf-8")


def dataset_stats(dataset: Dataset) -> dict[str, Any]:
    """Counts for the studio. `gold_per_question` is the mean over questions that have passages
    (None when none has); `types` (by count, then name) and `hops` (by value) leave out nulls."""
    questions = dataset.questions
    with_passages = [q for q in questions if q.passages]
    gold = sum(len(q.gold_pids) for q in questions)
    types = Counter(q.type for q in questions if q.type is not None)
    hops = Counter(q.hops for q in questions if q.hops is not None)
    return {
        "name": dataset.name,
        "path": dataset.path,
        "questions": len(questions),
        "passages": sum(len(q.passages) for q in questions),
        "distinct_passages": len(build_corpus(dataset, "pooled")),
        "gold_passages": gold,
        "gold_per_question": gold / len(with_passages) if with_passages else None,
        "gold_histogram": dict(sorted(Counter(len(q.gold_pids) for q in with_passages).items())),
        "types": dict(sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))),
        "hops": dict(sorted(hops.items())),
    }
