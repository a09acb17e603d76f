"""Runs a method over a data set: per-question JSON lines (crash-safe, resumable) and a summary."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence, TextIO

from evorag_core.metrics import mean, normalize_answer, paired_bootstrap, refusal_accuracy
from evorag_core.methods.base import QuestionResult
from evorag_core.types import Question

__all__ = ["Method", "summarize", "extra_metric_keys", "evaluate", "load_results", "compare_results", "answer_changes",
           "Progress",
           "SUMMARY_KEYS", "REFUSAL_KEYS", "refusal_summary"]

SUMMARY_KEYS = ("n", "em", "f1", "avg_steps", "support_recall", "refusal_rate", "format_valid", "fallback_rate", "seconds")
# present in a summary when the results know which questions are unanswerable (evaluate() marks them)
REFUSAL_KEYS = ("refusal_precision", "refusal_recall", "refusal_accuracy", "unanswerable")


class Method(Protocol):
    name: str
    label: str

    def run_question(self, question: Question) -> QuestionResult: ...


def extra_metric_keys(results: Sequence[QuestionResult]) -> list[str]:
    """Names of the per-question numbers a method reports in `extras["metrics"]` (e.g. ARENA's format_score)."""
    return sorted({k for r in results for k in (r.extras.get("metrics") or {})})


def summarize(results: Sequence[QuestionResult], seconds: float | None = None) -> dict[str, Any]:
    """The SUMMARY_KEYS, plus the mean of every `extras["metrics"]` number over the results that report it."""
    n = len(results)
    steps = sum(r.steps for r in results)
    extra = {k: mean((r.extras.get("metrics") or {}).get(k) for r in results) for k in extra_metric_keys(results)}
    return {
        "n": n,
        "em": mean(r.em for r in results),
        "f1": mean(r.f1 for r in results),
        "avg_steps": steps / n if n else 0.0,
        "support_recall": mean(r.support_recall for r in results),
        "refusal_rate": mean(float(r.refused) for r in results),
        "format_valid": mean(float(r.format_valid) for r in results),
        "fallback_rate": (sum(r.fallback for r in results) / steps) if steps else 0.0,
        "seconds": seconds if seconds is not None else sum(r.seconds for r in results),
        **refusal_summary(results),
        **extra,
    }


def refusal_summary(results: Sequence[QuestionResult]) -> dict[str, Any]:
    """REFUSAL_KEYS over the results whose question is marked answerable or not ({} when none is): precision and
    recall of REFUSE on the unanswerable questions, the share of right calls, and how many were unanswerable."""
    known = [r for r in results if r.unanswerable is not None]
    if not known:
        return {}
    s = refusal_accuracy([r.refused for r in known], [bool(r.unanswerable) for r in known])
    return {"refusal_precision": s.precision, "refusal_recall": s.recall, "refusal_accuracy": s.accuracy,
            "unanswerable": s.unanswerable}


def load_results(path: Path) -> list[QuestionResult]:
    out = []
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.append(QuestionResult.from_dict(json.loads(line)))
    return out


def _done_ids(path: Path) -> set[str]:
    """Question ids already written; a torn last line (killed mid-write) is dropped and rewritten later."""
    if not path.exists():
        return set()
    good: list[str] = []
    ids: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            ids.add(json.loads(line)["question_id"])
            good.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    path.write_text("".join(l + "\n" for l in good), encoding="utf-8")
    return ids


def evaluate(
    method: Method,
    questions: Iterable[Question],
    *,
    out_path: Path | None = None,
    resume: bool = False,
    on_result: Callable[[QuestionResult, list[QuestionResult]], None] | None = None,
    run: Callable[[list[Question]], Iterable[QuestionResult]] | None = None,
) -> tuple[dict[str, Any], list[QuestionResult]]:
    """Run `method` on each question. Each result is appended and flushed as soon as it is done, so an
    interrupted run keeps the finished questions; with `resume`, questions already in `out_path` are skipped
    (and included in the summary). `run`: runs the questions still to do elsewhere (e.g. `EvalPool.runner`, a
    process pool) and yields their results in question order; default `method.run_question` one by one here."""
    questions = list(questions)
    results: list[QuestionResult] = []
    done: set[str] = set()
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        if resume:
            done = _done_ids(out_path)
            wanted = {q.id for q in questions}
            results = [r for r in load_results(out_path) if r.question_id in wanted] if done else []
        elif out_path.exists():
            out_path.unlink()
    start = time.perf_counter()
    fh = out_path.open("a", encoding="utf-8") if out_path is not None else None
    todo = [q for q in questions if q.id not in done]
    try:
        for q, res in zip(todo, (run or _one_by_one(method))(todo), strict=True):
            if res.question_id != q.id:
                raise RuntimeError(f"the runner returned {res.question_id!r} where {q.id!r} was due")
            res = replace(res, unanswerable=q.unanswerable)
            results.append(res)
            if fh is not None:
                fh.write(json.dumps(res.to_dict(), ensure_ascii=False) + "\n")
                fh.flush()
            if on_result is not None:
                on_result(res, results)
    finally:
        if fh is not None:
            fh.close()
    summary = summarize(results, seconds=time.perf_counter() - start)
    summary["method"] = method.name
    summary["label"] = method.label
    return summary, results


def _one_by_one(method: Method) -> Callable[[list[Question]], Iterator[QuestionResult]]:
    def run(questions: list[Question]) -> Iterator[QuestionResult]:
        for q in questions:
            t0 = time.perf_counter()
            res = method.run_question(q)
            yield replace(res, seconds=res.seconds or time.perf_counter() - t0)
    return run


def answer_changes(common: Sequence[tuple[QuestionResult, QuestionResult]]) -> dict[str, Any]:
    """Where two policies' answers to the same questions differ (`common`: (a, b) pairs): how many answers changed
    (after answer normalisation), how many of those scored a higher / lower F1 under a than under b, the same counts
    for the changes at an equal step count (the answer changed, not the search), and the yes/no questions (gold
    "yes" or "no") each side got right. What a paired bootstrap's mean difference hides: a null F1 change may be
    many answers moving both ways or nothing moving at all."""
    changed = [(x, y) for x, y in common if normalize_answer(x.prediction or "") != normalize_answer(y.prediction or "")]
    same_steps = [(x, y) for x, y in changed if x.steps == y.steps]
    yes_no = [(x, y) for x, y in common if {normalize_answer(g) for g in x.gold} & {"yes", "no"}]
    return {
        "n": len(common), "changed": len(changed),
        "better": sum(x.f1 > y.f1 for x, y in changed), "worse": sum(x.f1 < y.f1 for x, y in changed),
        "same_steps_changed": len(same_steps),
        "same_steps_better": sum(x.f1 > y.f1 for x, y in same_steps),
        "same_steps_worse": sum(x.f1 < y.f1 for x, y in same_steps),
        "yes_no": {"n": len(yes_no), "right_a": sum(x.em for x, _ in yes_no), "right_b": sum(y.em for _, y in yes_no)},
    }


def compare_results(a: Sequence[QuestionResult], b: Sequence[QuestionResult], resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Paired bootstrap of EM and F1 (and steps) on the questions both result sets contain; also of every
    `extras["metrics"]` number that all of those questions report on both sides; and `answer_changes` of the two."""
    by_id = {r.question_id: r for r in b}
    common = [(r, by_id[r.question_id]) for r in a if r.question_id in by_id]
    if not common:
        raise ValueError("the two result files share no question id")
    out: dict[str, Any] = {"n": len(common)}
    for metric in ("em", "f1", "steps"):
        res = paired_bootstrap(
            [float(getattr(x, metric)) for x, _ in common], [float(getattr(y, metric)) for _, y in common], resamples, seed
        )
        out[metric] = res.__dict__
    if all(x.unanswerable is not None and y.unanswerable is not None for x, y in common):
        right = [(float(x.refused == x.unanswerable), float(y.refused == y.unanswerable)) for x, y in common]
        out["refusal_accuracy"] = paired_bootstrap([u for u, _ in right], [v for _, v in right], resamples, seed).__dict__
    for metric in extra_metric_keys([r for pair in common for r in pair]):
        pairs = [((x.extras.get("metrics") or {}).get(metric), (y.extras.get("metrics") or {}).get(metric)) for x, y in common]
        if all(u is not None and v is not None for u, v in pairs):
            out[metric] = paired_bootstrap([float(u) for u, _ in pairs], [float(v) for _, v in pairs], resamples, seed).__dict__
    out["changes"] = answer_changes(common)
    return out


class Progress:
    """A tqdm bar on stderr for `evaluate(..., on_result=Progress(len(questions)))`: questions done / total, the
    running EM and F1 in the postfix, elapsed time and the ETA. Questions resumed from an earlier run count as done
    from the start and do not speed up the ETA. The bar closes itself (final state written) when every question is
    done; `close()` (or `with Progress(...)`) closes it early, e.g. after an error or a fully resumed run."""

    def __init__(self, total: int, stream: TextIO | None = None, desc: str | None = None,
                 disable: bool = False) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="q", file=stream if stream is not None else sys.stderr,
                        dynamic_ncols=True, disable=disable, smoothing=0.1)
        self._first = True

    def __call__(self, _: QuestionResult, results: list[QuestionResult]) -> None:
        if self._first and len(results) > 1:  # resumed: the earlier results took no time in this run
            self.bar.n = self.bar.last_print_n = self.bar.initial = len(results) - 1
        self._first = False
        self.bar.set_postfix_str(f"EM {mean(r.em for r in results):.3f} F1 {mean(r.f1 for r in results):.3f}",
                                 refresh=False)
        self.bar.update(len(results) - self.bar.n)
        if self.bar.n >= self.bar.total:
            self.close()

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
