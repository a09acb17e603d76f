"""The promotion rule on paired comparisons built from real per-question scores (`compare_results`' bootstrap)."""
from __future__ import annotations

import dataclasses

from evorag_core.config import PromotionConfig
from evorag_core.metrics import paired_bootstrap
from evorag_core.promotion.rule import decide


def _comparison(cand_f1, against_f1, cand_steps, against_steps) -> dict:
    return {"n": len(cand_f1), "f1": paired_bootstrap(cand_f1, against_f1).__dict__,
            "em": paired_bootstrap(cand_f1, against_f1).__dict__,
            "steps": paired_bootstrap(cand_steps, against_steps).__dict__}


CFG = PromotionConfig(min_n=30)


def test_a_clearly_higher_f1_passes():
    d = decide(_comparison([1.0] * 20 + [0.0] * 20, [0.0] * 40, [2.0] * 40, [2.0] * 40), CFG)
    assert d.passed is True and d.verdict.startswith("better: F1 +0.500")


def test_equal_f1_with_fewer_steps_passes_and_a_lower_f1_with_fewer_steps_does_not():
    same = [0.5] * 40
    d = decide(_comparison(same, same, [1.0] * 40, [3.0] * 40), CFG)
    assert d.passed is True and d.verdict.startswith("as good with fewer steps")
    lower = [0.5] * 39 + [0.0]
    d = decide(_comparison(lower, same, [1.0] * 40, [3.0] * 40), CFG)
    assert d.passed is False and d.verdict.startswith("worse: F1 -0.013")


def test_a_small_unproven_gain_stays_staged():
    cand = [1.0, 0.0] * 20
    against = [0.0, 1.0] * 19 + [0.0, 0.0]  # one question better: +0.025, far from p < 0.05
    d = decide(_comparison(cand, against, [2.0] * 40, [2.0] * 40), CFG)
    assert d.passed is False and d.verdict.startswith("not shown better: F1 +0.025") and "p < 0.05" in d.verdict


def test_too_few_questions_give_no_verdict_and_em_can_be_the_metric():
    d = decide(_comparison([1.0] * 10, [0.0] * 10, [1.0] * 10, [1.0] * 10), CFG)
    assert d.passed is None and "10 questions" in d.verdict and "needs 30" in d.verdict
    em = dataclasses.replace(CFG, metric="em", min_n=5)
    assert decide(_comparison([1.0] * 10, [0.0] * 10, [1.0] * 10, [1.0] * 10), em).verdict.startswith("better: EM")
