"""Evaluation metrics (SPEC §6): normalized EM/F1 over aliases, an episode's graded outcome (`grade`), support recall,
refusal accuracy, paired bootstrap."""
from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

__all__ = [
    "normalize_answer",
    "exact_match",
    "f1_score",
    "GRADE_LABELS",
    "Grade",
    "grade_verdict",
    "grade",
    "support_recall",
    "RefusalScore",
    "refusal_accuracy",
    "BootstrapResult",
    "MIN_SIGNIFICANCE_N",
    "significance_verdict",
    "paired_bootstrap",
    "mean",
]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) - {"_"}


def normalize_answer(text: str) -> str:
    """Lowercase, underscores -> spaces, drop punctuation and the articles a/an/the, collapse spaces."""
    text = text.lower().replace("_", " ")
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _f1_single(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalized prediction equals any normalized gold alias."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in golds))


def f1_score(prediction: str, golds: Sequence[str]) -> float:
    """Token F1 after normalization, max over gold aliases."""
    return max((_f1_single(prediction, g) for g in golds), default=0.0)


GRADE_LABELS = {"correct": "correct", "partial": "partly correct", "wrong": "wrong"}


@dataclass(frozen=True)
class Grade:
    """The graded outcome of an episode (what the store's outcome columns and the studio's badge show)."""

    verdict: str  # "correct" | "partial" | "wrong"
    em: float
    f1: float
    answerable: bool  # False: an unanswerable question (a refusal is the right outcome)
    reason: str  # one short phrase: what was graded

    @property
    def label(self) -> str:
        return GRADE_LABELS[self.verdict]


def grade_verdict(em: float, f1: float) -> str:
    """"correct" when EM = 1, "partial" when EM < 1 and F1 > 0, else "wrong" (also for a stored outcome's columns)."""
    return "correct" if em >= 1.0 else "partial" if f1 > 0.0 else "wrong"


def grade(answer: str | None, refused: bool, golds: Sequence[str], answerable: bool = True) -> Grade | None:
    """The grade of an episode's final outcome, with `exact_match` / `f1_score` as every evaluation scores:
    - an answerable question with gold answers: "correct" when EM = 1, "partial" when EM = 0 < F1, "wrong" when
      F1 = 0; a refusal or running out of steps (`answer` None) is "wrong" with EM 0, F1 0;
    - an unanswerable question (`answerable` False): a refusal is "correct" (EM 1, F1 1: the expected outcome), an
      answer or running out of steps "wrong" (EM 0, F1 0) - even the stored (false) answer;
    - an answerable question without gold answers (a typed free question): None, no grade.
    E.g. grade("the Sable", False, ["Sable River"]): EM 0, F1 = 2 * 1 * 1/2 / (1 + 1/2) = 2/3 -> "partial"."""
    if not answerable:
        if refused:
            return Grade("correct", 1.0, 1.0, False, "refused an unanswerable question")
        what = "answered an unanswerable question" if answer is not None else "ran out of steps"
        return Grade("wrong", 0.0, 0.0, False, what)
    if not golds:
        return None
    if answer is None:
        return Grade("wrong", 0.0, 0.0, True, "refused an answerable question" if refused else "ran out of steps")
    em, f1 = exact_match(answer, golds), f1_score(answer, golds)
    verdict = grade_verdict(em, f1)
    reason = {"correct": "exact match", "partial": "overlaps the gold answer", "wrong": "no overlap with the gold answer"}
    return Grade(verdict, em, f1, True, reason[verdict])


def support_recall(retrieved: Iterable[str], gold: Iterable[str]) -> float | None:
    """Fraction of gold passages among the retrieved ones; None when there is no gold support."""
    gold_set = set(gold)
    if not gold_set:
        return None
    return len(gold_set & set(retrieved)) / len(gold_set)


@dataclass(frozen=True)
class RefusalScore:
    """How well REFUSE separates unanswerable from answerable questions (REFUSE is the positive class)."""

    n: int
    unanswerable: int  # questions whose corpus holds no answer
    refused: int  # questions the method refused
    correct_refusals: int  # refused and unanswerable
    precision: float | None  # correct_refusals / refused; None when nothing was refused
    recall: float | None  # correct_refusals / unanswerable; None when no question is unanswerable
    accuracy: float | None  # share of questions with the right call (refused iff unanswerable); None when n = 0


def refusal_accuracy(refused: Sequence[bool], unanswerable: Sequence[bool]) -> RefusalScore:
    """Precision and recall of REFUSE on unanswerable (positive) vs answerable (negative) questions, and the share of
    right calls. E.g. refused = (T, T, F, F), unanswerable = (T, F, T, F): one correct refusal of two refusals
    (precision 1/2) and of two unanswerable questions (recall 1/2); right calls on questions 1 and 4 (accuracy 1/2)."""
    if len(refused) != len(unanswerable):
        raise ValueError(f"refusal_accuracy needs equal lengths, got {len(refused)} and {len(unanswerable)}")
    n = len(refused)
    n_ref, n_un = sum(map(bool, refused)), sum(map(bool, unanswerable))
    hit = sum(1 for r, u in zip(refused, unanswerable) if r and u)
    right = sum(1 for r, u in zip(refused, unanswerable) if bool(r) == bool(u))
    return RefusalScore(n=n, unanswerable=n_un, refused=n_ref, correct_refusals=hit,
                        precision=hit / n_ref if n_ref else None, recall=hit / n_un if n_un else None,
                        accuracy=right / n if n else None)


def mean(values: Iterable[float | None]) -> float:
    vals = [v for v in values if v is not None]
    return float(sum(vals) / len(vals)) if vals else 0.0


MIN_SIGNIFICANCE_N = 20  # fewer pairs than this: the bootstrap's p is not read as a verdict
ALPHA = 0.05


@dataclass(frozen=True)
class BootstrapResult:
    n: int
    mean_a: float
    mean_b: float
    diff: float  # mean(a) - mean(b)
    ci_low: float
    ci_high: float
    p_value: float  # two-sided
    resamples: int
    significant: bool | None = None  # p < ALPHA; None when n < MIN_SIGNIFICANCE_N (no verdict)
    verdict: str = ""  # "significant (p < 0.05)" | "not significant (p >= 0.05)" | "too few common questions (...)"


def significance_verdict(n: int, p_value: float) -> tuple[bool | None, str]:
    """(significant, verdict in words) for a paired comparison over `n` common questions. With fewer than
    MIN_SIGNIFICANCE_N the bootstrap of so few pairs can give p = 0 for a difference that means nothing (2 questions
    both right on one side), so there is no verdict: `(None, "too few common questions (n=2 < 20) to call
    significance")`."""
    if n < MIN_SIGNIFICANCE_N:
        return None, f"too few common questions (n={n} < {MIN_SIGNIFICANCE_N}) to call significance"
    if p_value < ALPHA:
        return True, f"significant (p < {ALPHA:g})"
    return False, f"not significant (p >= {ALPHA:g})"


def paired_bootstrap(a: Sequence[float], b: Sequence[float], resamples: int = 10_000, seed: int = 0) -> BootstrapResult:
    """Paired bootstrap of mean(a) - mean(b) over per-question scores.

    The p-value is two-sided: twice the smaller tail share of resampled differences on either side of 0
    (capped at 1). With identical inputs the difference is 0 and p = 1.
    """
    if len(a) != len(b):
        raise ValueError(f"paired bootstrap needs equal lengths, got {len(a)} and {len(b)}")
    if not a:
        raise ValueError("paired bootstrap needs at least one pair")
    x = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    diffs = x[idx].mean(axis=1)
    low, high = np.percentile(diffs, [2.5, 97.5])
    tail = min(float(np.mean(diffs <= 0.0)), float(np.mean(diffs >= 0.0)))
    p_value = min(1.0, 2.0 * tail)
    significant, verdict = significance_verdict(len(x), p_value)
    return BootstrapResult(
        n=len(x),
        mean_a=float(np.mean(a)),
        mean_b=float(np.mean(b)),
        diff=float(x.mean()),
        ci_low=float(low),
        ci_high=float(high),
        p_value=p_value,
        resamples=resamples,
        significant=significant,
        verdict=verdict,
    )
