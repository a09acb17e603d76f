"""Rankings into pairs, and agreement on hand-worked labels."""
from __future__ import annotations

import pytest

from evorag_core.pairs.agreement import LabelView, agreement_report, category, cohen_kappa, fleiss_kappa, item_agreement
from evorag_core.pairs.annotation import check_ranking, pairs_for_label, ranking_pairs, tiers_from_picks

PAYLOAD = {"prompt": "P", "stage": "discovery", "question_id": "q1", "t": 2,
           "candidates": [{"completion": "SEARCH: a", "branch_return": 1.0}, {"completion": "SEARCH: b",
                          "branch_return": 0.25}, {"completion": "ANSWER: c"}]}


def test_picks_make_tiers_and_tiers_make_pairs() -> None:
    """Picking 2 then 0 of 4: tiers [2], [0], [1, 3] -> 2 over 0, 1, 3 and 0 over 1, 3: 5 pairs; a full order of K
    gives K(K-1)/2, best-only K-1, a tie none."""
    tiers = tiers_from_picks([2, 0], 4)
    assert tiers == [[2], [0], [1, 3]]
    assert ranking_pairs(tiers) == [(2, 0), (2, 1), (2, 3), (0, 1), (0, 3)]
    assert len(ranking_pairs(tiers_from_picks([3, 1, 0, 2], 4))) == 6
    assert len(ranking_pairs(tiers_from_picks([1], 4))) == 3
    assert ranking_pairs([[0, 1, 2]]) == []
    with pytest.raises(ValueError):
        tiers_from_picks([0, 0], 3)
    with pytest.raises(ValueError):
        tiers_from_picks([], 3)


def test_a_worst_mark_goes_below_every_other_candidate() -> None:
    """Best 2 and worst 1 of 4: [2], [0, 3], [1] -> 2 over 0, 3, 1 and 0, 3 over 1: 5 pairs. Worst only: the other
    three tied above it, 3 pairs. A full order with the last one marked worst is the same full order."""
    assert tiers_from_picks([2], 4, worst=1) == [[2], [0, 3], [1]]
    assert ranking_pairs(tiers_from_picks([2], 4, worst=1)) == [(2, 0), (2, 3), (2, 1), (0, 1), (3, 1)]
    assert tiers_from_picks([], 4, worst=3) == [[0, 1, 2], [3]]
    assert len(ranking_pairs(tiers_from_picks([], 4, worst=3))) == 3
    assert tiers_from_picks([0, 1], 3, worst=2) == [[0], [1], [2]] == tiers_from_picks([0, 1, 2], 3)
    for picks, worst in (([0], 0), ([1], 3), ([1], -1)):
        with pytest.raises(ValueError, match="worst"):
            tiers_from_picks(picks, 3, worst=worst)
    with pytest.raises(ValueError):
        check_ranking([[0], [0, 1]], 2)


def test_pairs_of_a_label_carry_source_annotator_item_and_agreement() -> None:
    pairs = pairs_for_label(PAYLOAD, 7, "ann", [[0], [1], [2]], 0.5)
    assert [(p.chosen, p.rejected) for p in pairs] == [("SEARCH: a", "SEARCH: b"), ("SEARCH: a", "ANSWER: c"),
                                                        ("SEARCH: b", "ANSWER: c")]
    assert {p.source for p in pairs} == {"human"} and {p.annotator for p in pairs} == {"ann"}
    assert pairs[0].margin == 0.75 and pairs[1].margin is None
    assert pairs[0].metadata["annotation_item"] == 7 and pairs[0].metadata["agreement"] == 0.5
    assert pairs[0].prompt == "P" and pairs[0].stage == "discovery" and pairs[0].metadata["question_id"] == "q1"


def test_item_agreement_compares_candidate_pairs() -> None:
    """K = 3. A: full order 0 > 1 > 2; B: best-only 0 > {1, 2}. Pairs (0,1), (0,2) agree, (1,2) does not: 2/3.
    With C = tie added: A-C 0/3, B-C 1/3 (both tie 1 and 2) -> mean (2/3 + 0 + 1/3) / 3 = 1/3."""
    a = LabelView("a", "rank", ((0,), (1,), (2,)))
    b = LabelView("b", "rank", ((0,), (1, 2)))
    c = LabelView("c", "tie")
    assert item_agreement([a, b], 3) == pytest.approx(2 / 3)
    assert item_agreement([a, b, c], 3) == pytest.approx(1 / 3)
    assert item_agreement([a, LabelView("s", "skip")], 3) is None
    assert item_agreement([LabelView("a", "answerable"), LabelView("b", "unanswerable")], 0) == 0.0
    assert category(a) == "best:0" and category(c) == "tie"


def test_cohen_kappa_hand_worked() -> None:
    """10 items. A: y y y y y y n n n n; B: y y y y n n n n n y. Observed agreement 7/10; A says y 6/10, B 5/10,
    so chance agreement 0.6*0.5 + 0.4*0.5 = 0.5 and kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4."""
    a = list("yyyyyynnnn")
    b = list("yyyynnnnny")
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert cohen_kappa(["y", "y"], ["y", "y"]) is None


def test_fleiss_kappa_hand_worked() -> None:
    """3 items, 3 raters: (a a a), (a a b), (a b c). P_i = 1, (5-3)/6 = 1/3, 0 -> P = 4/9. Category shares 6/9, 2/9,
    1/9 -> P_e = 41/81. kappa = (36/81 - 41/81) / (40/81) = -1/8."""
    assert fleiss_kappa([["a", "a", "a"], ["a", "a", "b"], ["a", "b", "c"]]) == pytest.approx(-0.125)
    assert fleiss_kappa([["a"]]) is None


def test_agreement_report_over_items() -> None:
    """Two annotators agree on item 1 (best 0), disagree on item 2 (best 0 vs best 1); item 3 has one label."""
    full = lambda *t: tuple((i,) for i in t)  # noqa: E731
    labelled = {
        1: (2, [LabelView("a", "rank", full(0, 1)), LabelView("b", "rank", full(0, 1))]),
        2: (2, [LabelView("a", "rank", full(0, 1)), LabelView("b", "rank", full(1, 0))]),
        3: (2, [LabelView("a", "tie")]),
    }
    report = agreement_report(labelled)
    assert report.items_compared == 2 and report.mean_agreement == pytest.approx(0.5)
    # categories a: best:0, best:0; b: best:0, best:1 -> po 1/2, pe = 1*1/2 + 0 = 1/2 -> kappa 0
    assert report.cohen[("a", "b")] == pytest.approx(0.0)
