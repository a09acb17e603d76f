"""EM/F1 normalization and the paired bootstrap."""
import pytest

from evorag_core.metrics import exact_match, f1_score, normalize_answer, paired_bootstrap, support_recall


def test_normalize():
    assert normalize_answer("The  Eiffel_Tower!") == "eiffel tower"
    assert normalize_answer("An apple, a day") == "apple day"


def test_em_f1_max_over_aliases():
    """'New York City' vs aliases ['NYC', 'New York']: EM 0; F1 vs 'New York' = P 2/3, R 1 -> 0.8."""
    assert exact_match("new york", ["NYC", "New York"]) == 1.0
    assert exact_match("New York City", ["NYC", "New York"]) == 0.0
    assert f1_score("New York City", ["NYC", "New York"]) == pytest.approx(0.8)
    assert f1_score("", ["x"]) == 0.0


def test_support_recall():
    assert support_recall(["a", "b", "c"], ["a", "d"]) == 0.5
    assert support_recall(["a"], []) is None


def test_bootstrap_identical_and_clear_difference():
    same = paired_bootstrap([0.1, 0.5, 0.9], [0.1, 0.5, 0.9])
    assert same.diff == 0.0 and same.p_value == 1.0
    a = [1.0] * 40 + [0.0] * 10
    b = [0.0] * 40 + [0.0] * 10
    res = paired_bootstrap(a, b, resamples=2000, seed=1)
    assert res.diff == pytest.approx(0.8)
    assert res.p_value < 0.01
    assert res.ci_low > 0.6 and res.ci_high <= 0.92
    again = paired_bootstrap(a, b, resamples=2000, seed=1)
    assert again == res  # seeded


def test_bootstrap_rejects_unpaired():
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 2.0])
