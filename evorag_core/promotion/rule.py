"""The promotion rule: from a paired comparison of a candidate adapter with the live one, pass or not (pure).

A candidate passes when its score (`promotion.metric`, F1 by default) is higher with the paired bootstrap's
two-sided p below `alpha`, or when it is not lower and it needs fewer steps with p below `alpha` (as good, cheaper).
It never passes on a lower measured score. Fewer than `min_n` common questions give no verdict (passed None): the
adapter stays staged. docs/promotion.md defends the choice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from evorag_core.config import PromotionConfig

__all__ = ["Decision", "decide", "RULE_TEXT"]

RULE_TEXT = ("passes if {metric} is higher with p < {alpha}, or not lower with significantly fewer steps "
             "(p < {alpha}); needs >= {min_n} questions")


@dataclass(frozen=True)
class Decision:
    passed: bool | None  # None: no verdict
    verdict: str  # one line for people: what was decided and on which numbers


def _diff(res: Mapping[str, Any], digits: int = 3) -> str:
    p = res["p_value"]
    shown = f"p < {1 / res['resamples']:.2g}" if p == 0 else f"p {p:.2g}"  # no resample crossed 0
    return f"{res['diff']:+.{digits}f} (95% CI {res['ci_low']:+.{digits}f} to {res['ci_high']:+.{digits}f}, {shown})"


def decide(comparison: Mapping[str, Any], cfg: PromotionConfig) -> Decision:
    """`comparison`: `evaluation.runner.compare_results(candidate, against)` (candidate first)."""
    n = int(comparison["n"])
    score, steps = comparison[cfg.metric], comparison["steps"]
    name = cfg.metric.upper()
    if n < cfg.min_n:
        return Decision(None, f"no verdict: {n} questions evaluated, the rule needs {cfg.min_n}")
    if score["diff"] > 0 and score["p_value"] < cfg.alpha:
        return Decision(True, f"better: {name} {_diff(score)}")
    if score["diff"] >= 0 and steps["diff"] < 0 and steps["p_value"] < cfg.alpha:
        return Decision(True, f"as good with fewer steps: {name} {_diff(score)}, steps {_diff(steps, 2)}")
    if score["diff"] < 0:
        return Decision(False, f"worse: {name} {_diff(score)}")
    return Decision(False, f"not shown better: {name} {_diff(score)} (needs p < {cfg.alpha:g})")
