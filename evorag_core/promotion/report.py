"""A promotion report: what the studio's Adapters panel and `evorag adapters evaluate` show, stored as JSON.

{setting, candidate: {name, summary, f1_ci, em_ci, seconds, cached}, against: {...}, comparison (the paired
bootstrap of `evaluation.runner.compare_results`), changed: the questions whose answers differ, side by side, with
both traces' episode ids, decision: {passed, verdict, rule}}.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from evorag_core.config import Config
from evorag_core.metrics import normalize_answer, paired_bootstrap
from evorag_core.promotion.rule import RULE_TEXT, Decision

if TYPE_CHECKING:
    from evorag_core.methods.base import QuestionResult
    from evorag_core.store import Promotion
    from evorag_core.promotion.evaluate import SideResults

__all__ = ["mean_interval", "build_report", "MAX_CHANGED", "heldout_columns", "report_text", "STATES"]

MAX_CHANGED = 200  # changed questions kept in a report (the slice is the place for more)


def mean_interval(values: Sequence[float], resamples: int, seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap interval of the mean of `values` (the paired bootstrap against zeros)."""
    res = paired_bootstrap(list(values), [0.0] * len(values), resamples, seed)
    return round(res.ci_low, 4), round(res.ci_high, 4)


def _side(side: SideResults, cfg: Config) -> dict[str, Any]:
    from evorag_core.evaluation.runner import summarize

    results = side.results
    summary = {k: v for k, v in summarize(results).items() if isinstance(v, (int, float))}
    return {"name": side.side, "summary": summary, "seconds": round(side.seconds, 1), "cached": side.cached,
            "f1_ci": mean_interval([r.f1 for r in results], cfg.promotion.resamples),
            "em_ci": mean_interval([float(r.em) for r in results], cfg.promotion.resamples)}


def _answer(r: QuestionResult, episodes: Mapping[str, int]) -> dict[str, Any]:
    return {"answer": r.prediction or "", "f1": round(r.f1, 4), "em": r.em, "steps": r.steps, "refused": r.refused,
            "episode": episodes.get(r.question_id)}


def changed_questions(candidate: SideResults, against: SideResults) -> list[dict[str, Any]]:
    """The questions whose normalised answers differ, biggest F1 change first."""
    by_id = {r.question_id: r for r in against.results}
    rows = []
    for c in candidate.results:
        a = by_id.get(c.question_id)
        if a is None or normalize_answer(c.prediction or "") == normalize_answer(a.prediction or ""):
            continue
        rows.append({"id": c.question_id, "question": c.question, "gold": list(c.gold),
                     "candidate": _answer(c, candidate.episodes), "against": _answer(a, against.episodes)})
    rows.sort(key=lambda row: -abs(row["candidate"]["f1"] - row["against"]["f1"]))
    return rows[:MAX_CHANGED]


def build_report(cfg: Config, data: str, candidate: SideResults, against: SideResults,
                 comparison: Mapping[str, Any], decision: Decision) -> dict[str, Any]:
    p = cfg.promotion
    return {
        "setting": {"data": data, "questions": p.questions or "all", "method": p.method, "metric": p.metric,
                    "alpha": p.alpha, "min_n": p.min_n, "resamples": p.resamples},
        "candidate": _side(candidate, cfg),
        "against": _side(against, cfg),
        "comparison": dict(comparison),
        "changed": changed_questions(candidate, against),
        "decision": {"passed": decision.passed, "verdict": decision.verdict,
                     "rule": RULE_TEXT.format(metric=p.metric.upper(), alpha=p.alpha, min_n=p.min_n)},
    }


# an adapter's gate state in tables: no report yet, or its newest report's outcome
STATES = ("not evaluated", "passed", "not passed", "no verdict")


def heldout_columns(row: Promotion | None) -> dict[str, Any]:
    """An adapter's held-out columns from its newest report (None: not evaluated): {score (its metric), diff (vs
    what it was compared with), p, against, state, verdict, report (id)}."""
    if row is None:
        return {"score": None, "diff": None, "p": None, "against": None, "state": STATES[0], "verdict": "",
                "report": None}
    r = row.report
    res = r["comparison"][row.metric]
    state = STATES[1] if row.passed else STATES[2] if row.passed is False else STATES[3]
    return {"score": r["candidate"]["summary"][row.metric], "diff": res["diff"], "p": res["p_value"],
            "against": row.against or "base", "state": state, "verdict": row.verdict, "report": row.id}


def report_text(row: Promotion, live: str | None = None) -> str:
    """The report in a few lines (the CLI's `evorag adapters evaluate`)."""
    r = row.report
    s, c, a = r["setting"], r["candidate"], r["against"]
    lines = [f"promotion report {row.id}: {c['name']} vs {a['name']} on {s['data']} ({s['questions']}, "
             f"{c['summary']['n']} questions, method {s['method']})"]
    for side in (c, a):
        m = side["summary"]
        lo, hi = side["f1_ci"]
        cached = f", {side['cached']} cached" if side["cached"] else ""
        lines.append(f"  {side['name']:<20} EM {m['em']:.3f}  F1 {m['f1']:.3f} [{lo:.3f}, {hi:.3f}]  steps "
                     f"{m['avg_steps']:.2f}  support {m['support_recall']:.3f}  ({side['seconds']:.0f} s{cached})")
    ch = r["comparison"].get("changes", {})
    lines.append(f"  answers changed on {ch.get('changed', 0)} questions ({ch.get('better', 0)} better, "
                 f"{ch.get('worse', 0)} worse)")
    lines.append(f"  verdict: {row.verdict}  [{r['decision']['rule']}]")
    lines.append(f"  live now: {live or 'the base model'}")
    return "\n".join(lines)
