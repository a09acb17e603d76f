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

The file is streamed: JSON lines and CSV rows are decoded line by line, a JSON list element by element
(`_ListReader`), and each record is checked and converted as it arrives, so a bad record fails the load
without the rest of the file being read and the raw records are never held together (only the questions
built so far; HotpotQA/2Wiki keep their parsed records until rule 3 has seen them all). A value nested
deeper than Python's recursion limit is the record's `DatasetFormatError`, not a RecursionError.
"""
from __future__ import annotations

import codecs
import csv
import itertools
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, TypeVar

from evorag_core.data.corpus import CORPUS_MODES, build_corpus, pool_passages
from evorag_core.errors import DatasetFormatError
from evorag_core.types import Corpus, Dataset, Passage, Question

__all__ = ["load_dataset", "pooled_corpus", "write_jsonl", "dataset_stats", "build_corpus", "CORPUS_MODES"]

T = TypeVar("T")
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
    rec: _Rec  # without its raw data (the file's records are not held while the rest is read)
    has_evidences: bool
    has_level: bool
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
    return _WikiRecord(_Rec(rec.path, rec.label, None), "evidences" in obj, "level" in obj, _text(rec, obj, "_id"),
                       _text(rec, obj, "question"), _text(rec, obj, "answer"), _optional_text(rec, obj, "type"),
                       tuple(paragraphs), tuple(support))


def _wiki_flavour(path: str, records: list[_WikiRecord]) -> str:
    """'hotpotqa' or '2wiki' by the module docstring's rule 3."""
    wiki = next((r for r in records if r.has_evidences or r.type in _TWOWIKI_TYPES), None)
    hotpot = next((r for r in records if r.has_level or r.type == "bridge"), None)
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


def _wiki_questions(path: str, recs: Iterable[_Rec]) -> Iterator[tuple[_Rec, Question]]:
    raws = [raw for _, raw in _each(recs, _parse_wiki)]  # the flavour (rule 3) needs every record
    dataset = _wiki_flavour(path, raws)
    raws.reverse()
    while raws:  # each parsed record is let go as its question is built
        raw = raws.pop()
        yield raw.rec, _wiki_question(raw, dataset)


# --- Bamboogle CSV -------------------------------------------------------------------------------

def _bamboogle_questions(path: str, f: IO[bytes]) -> Iterator[tuple[_Rec, Question]]:
    reader = csv.reader(line for _, line in _lines(path, f))
    try:
        header = [name.strip() for name in next(reader)]
        columns = {name.lower(): i for i, name in reversed(list(enumerate(header)))}
        if "question" not in columns or "answer" not in columns:
            raise DatasetFormatError(path, None, None, _unrecognised(f"CSV header {header!r:.80}"))
        qcol, acol = columns["question"], columns["answer"]
        row_no = 0
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
            yield rec, Question(id=f"bamboogle_{row_no:03d}", dataset="bamboogle",
                                question=values["Question"], answers=(values["Answer"],))
            row_no += 1
    except csv.Error as exc:
        raise DatasetFormatError(path, f"line {reader.line_num}", None, f"invalid CSV: {exc}") from exc


# --- reading, detection, checks ------------------------------------------------------------------

def _unrecognised(found: str) -> str:
    return ("unrecognised format: expected JSON lines (common schema or MuSiQue), a JSON list (HotpotQA, "
            f"2WikiMultiHopQA, MuSiQue) or a CSV with Question and Answer columns (Bamboogle); found {found}")


_CHUNK = 1 << 20  # bytes read at a time from a JSON list
_TOO_DEEP = "nested too deeply (deeper than Python's recursion limit allows)"


def _parse_line(path: str, label: str, line: str) -> _Rec:
    try:
        return _Rec(path, label, json.loads(line))
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(path, label, None, f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
    except RecursionError:
        raise DatasetFormatError(path, label, None, _TOO_DEEP) from None


def _lines(path: str, f: IO[bytes]) -> Iterator[tuple[int, str]]:
    """(line number, text) as the file is read, split at b"\\n" only (U+2028 may sit in a JSON string)."""
    offset = 0
    for n, raw in enumerate(f, start=1):
        try:
            yield n, raw.decode("utf-8-sig" if n == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            raise DatasetFormatError(path, f"line {n}", None,
                                     f"not UTF-8 text (byte {offset + exc.start}: {exc.reason})") from exc
        offset += len(raw)


def _jsonl_records(path: str, f: IO[bytes]) -> Iterator[_Rec]:
    """One record per line, parsed as it is read."""
    for n, line in _lines(path, f):
        if line.strip():
            yield _parse_line(path, f"line {n}", line)


def _definite(exc: json.JSONDecodeError, end: int) -> bool:
    """Whether a decoding error is in the text, not an element cut short by the end of the text read so far: a
    character well before that end that cannot go there (an unterminated string may still end later)."""
    return exc.pos < end - 16 and not exc.msg.startswith("Unterminated string")


class _ListReader:
    """The elements of a JSON list, decoded one at a time from reads of `_CHUNK` bytes: the text kept is the
    unread rest of the current read (or one element, when it is larger), never the whole list."""

    def __init__(self, path: str, f: IO[bytes]):
        self.path, self.f = path, f
        self.utf8 = codecs.getincrementaldecoder("utf-8-sig")()
        self.buf, self.pos, self.line, self.eof = "", 0, 1, False  # line: the file line at buf[0]
        self.not_utf8: str | None = None  # the decoder's complaint, raised once the text before it is used up

    def _more(self, at_least: int = 0) -> bool:
        """Drop the text before `pos`, then read at least `at_least` more bytes; False at the end of the file."""
        if self.not_utf8 is not None:
            raise DatasetFormatError(self.path, f"line {self._line_at(len(self.buf))}", None,
                                     f"not UTF-8 text ({self.not_utf8})")
        if self.eof:
            return False
        self.line += self.buf.count("\n", 0, self.pos)
        self.buf, self.pos = self.buf[self.pos:], 0
        chunk = self.f.read(max(at_least, _CHUNK))
        try:
            self.buf += self.utf8.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:  # keep the text before the bad bytes: an earlier bad record comes first
            self.buf += chunk[:exc.start].decode("utf-8", errors="ignore")
            self.not_utf8 = exc.reason
        self.eof = not chunk
        return True

    def _line_at(self, pos: int) -> int:
        return self.line + self.buf.count("\n", 0, pos)

    def _invalid(self, msg: str, pos: int) -> DatasetFormatError:
        column = pos - self.buf.rfind("\n", 0, pos)
        return DatasetFormatError(self.path, f"line {self._line_at(pos)}", None, f"invalid JSON: {msg} (column {column})")

    def _peek(self) -> str:
        """The next non-whitespace character ("" at the end of the file)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf) or not self._more():
                return self.buf[self.pos:self.pos + 1]

    def _value(self, index: int) -> Any:
        decoder = json.JSONDecoder()
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if not _definite(exc, len(self.buf)) and self._more(len(self.buf)):
                    continue  # perhaps an element cut by the read: read as much again, then retry
                raise self._invalid(exc.msg, exc.pos) from exc
            except RecursionError:
                raise DatasetFormatError(self.path, index, None, _TOO_DEEP) from None
            if end < len(self.buf) or not self._more(len(self.buf)):  # a number may go on after the read
                self.pos = end
                return value

    def __iter__(self) -> Iterator[_Rec]:
        self._peek()
        self.pos += 1  # the "[" that load_dataset saw
        for index in itertools.count():
            char = self._peek()
            if char == "]":
                break
            if index:
                if char != ",":
                    raise self._invalid("Expecting ',' delimiter" if char else "the list is not closed", self.pos)
                self.pos += 1
                self._peek()
            yield _Rec(self.path, index, self._value(index))
        self.pos += 1
        if self._peek():
            raise self._invalid("Extra data", self.pos)


def _each(recs: Iterable[_Rec], convert: Callable[[_Rec], T]) -> Iterator[tuple[_Rec, T]]:
    """`convert` each record (a JSON object) as it arrives; a value too deep to print is the record's error."""
    for rec in recs:
        _object(rec, rec.data, None)
        try:
            yield rec, convert(rec)
        except RecursionError:
            raise rec.error(None, _TOO_DEEP) from None


def _json_questions(path: str, recs: Iterator[_Rec]) -> Iterator[tuple[_Rec, Question]]:
    """The first record's keys pick the format (module docstring, rule 2); each record is converted as it is read."""
    first = next(recs, None)
    if first is None:
        return iter(())
    keys = _object(first, first.data, None).keys()
    recs = itertools.chain([first], recs)
    if "context" in keys:
        return _wiki_questions(path, recs)
    if "paragraphs" in keys:
        return _each(recs, _musique_question)
    if keys & {"passages", "answers", "dataset"}:
        return _each(recs, _common_question)
    raise first.error(None, _unrecognised(f"a record with keys {sorted(keys)!r:.120}"))


class _Unique:
    """Question ids and passage ids seen so far, with the record that had each first."""

    def __init__(self) -> None:
        self.ids: dict[str, str | int] = {}
        self.pids: dict[str, str | int] = {}

    def add(self, rec: _Rec, q: Question) -> None:
        if q.id in self.ids:
            raise rec.error("id", f"duplicate question id {q.id!r} (first at record {self.ids[q.id]})")
        self.ids[q.id] = rec.label
        for i, p in enumerate(q.passages):
            if p.pid in self.pids:
                raise rec.error(f"passages[{i}].pid", f"duplicate passage id {p.pid!r} (first at record {self.pids[p.pid]})")
            self.pids[p.pid] = rec.label


def _first_char(f: IO[bytes]) -> str:
    """The first character after a byte-order mark and whitespace ("" for a blank file); rewinds `f`."""
    head = f.read(3)
    if head != codecs.BOM_UTF8:
        f.seek(0)
    while block := f.read(1 << 16):
        rest = block.lstrip(b" \t\r\n")
        if rest:
            f.seek(0)
            return chr(rest[0]) if rest[0] < 128 else "?"
    f.seek(0)
    return ""


def _questions(path: str, f: IO[bytes]) -> Iterator[tuple[_Rec, Question]]:
    first = _first_char(f)
    if not first:
        raise DatasetFormatError(path, None, None, "the file is empty")
    if first == "[":
        return _json_questions(path, iter(_ListReader(path, f)))
    if first == "{":
        return _json_questions(path, _jsonl_records(path, f))
    return _bamboogle_questions(path, f)


def load_dataset(path: str | Path) -> Dataset:
    """Read a data file in any supported format (see the module docstring); all or nothing. Records are parsed and
    checked one at a time as the file is read: a bad record fails the load before the rest is read."""
    where = str(path)
    try:
        f = open(path, "rb")
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise DatasetFormatError(where, None, None, f"cannot read the file ({exc.strerror or exc})") from exc
    unique, questions = _Unique(), []
    with f:
        for rec, q in _questions(where, f):
            unique.add(rec, q)
            questions.append(q)
    if not questions:
        raise DatasetFormatError(where, None, None, "the file holds no questions")
    name = "+".join(dict.fromkeys(q.dataset for q in questions))
    return Dataset(name=name, path=where, questions=tuple(questions))


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


def pooled_corpus(paths: Iterable[str | Path]) -> Corpus:
    """The de-duplicated passages of every question of these data files (`--corpus-from`)."""
    return pool_passages(p for path in paths for q in load_dataset(path).questions for p in q.passages)
