"""Agreement between annotators where an item has two labels or more (skips are not labels).

- `item_agreement`: per item, the mean over annotator pairs of how much two labels agree. Preference items compare
  every pair of candidates (i, j): each label says i above, below or tied with j (a tie decision ties all), and the
  agreement of two labels is the share of candidate pairs on which they say the same. Refusal items: 1 when the two
  verdicts are the same, else 0.
- `cohen_kappa`: two annotators over the items both labelled, by each label's category (`category`: the best tier of
  a ranking, "tie", or the verdict) - scikit-learn's `cohen_kappa_score`.
- `fleiss_kappa`: all annotators over items with at least two labels, on the same categories; Fleiss (1971) with
  the per-item rater count allowed to vary (P_i = (sum_j n_ij^2 - n_i) / (n_i (n_i - 1)), p_j over all ratings),
  which is Fleiss' κ exactly when every item has the same count. Written out here: the installed statistics
  libraries (scikit-learn, scipy) have no Fleiss' κ, and ten lines do not justify a statsmodels dependency.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

__all__ = ["LabelView", "category", "item_agreement", "cohen_kappa", "fleiss_kappa", "AgreementReport",
           "agreement_report"]


@dataclass(frozen=True)
class LabelView:
    """What agreement needs of a label: who, the decision and the ranking's tiers (decision "rank")."""

    annotator: str
    decision: str
    ranking: tuple[tuple[int, ...], ...] | None = None


def category(label: LabelView) -> str:
    """The label as one category: "best:2" (the top tier, 0-based indices joined by '+'), "tie", or the verdict."""
    if label.decision == "rank" and label.ranking:
        return "best:" + "+".join(str(i) for i in sorted(label.ranking[0]))
    return label.decision


def _relations(label: LabelView, k: int) -> dict[tuple[int, int], int]:
    """For every candidate pair i < j: 1 when i is above j, -1 below, 0 tied."""
    tier = {i: 0 for i in range(k)}
    if label.decision == "rank" and label.ranking:
        tier = {i: n for n, members in enumerate(label.ranking) for i in members}
    return {(i, j): (tier[j] > tier[i]) - (tier[j] < tier[i]) for i, j in combinations(range(k), 2)}


def _pair_agreement(a: LabelView, b: LabelView, k: int) -> float:
    if k < 2 or a.decision in ("answerable", "unanswerable") or b.decision in ("answerable", "unanswerable"):
        return float(a.decision == b.decision)
    ra, rb = _relations(a, k), _relations(b, k)
    return sum(ra[p] == rb[p] for p in ra) / len(ra)


def item_agreement(labels: Sequence[LabelView], k: int) -> float | None:
    """Mean agreement over the pairs of labels of one item (K candidates; 0 for a refusal item); None with < 2."""
    counted = [lab for lab in labels if lab.decision != "skip"]
    if len(counted) < 2:
        return None
    pairs = list(combinations(counted, 2))
    return sum(_pair_agreement(a, b, k) for a, b in pairs) / len(pairs)


def cohen_kappa(first: Sequence[str], second: Sequence[str]) -> float | None:
    """Cohen's κ of two annotators' categories on the same items (None when undefined: fewer than 2 items, or one
    category for both, where chance agreement is 1)."""
    from sklearn.metrics import cohen_kappa_score

    if len(first) != len(second):
        raise ValueError("Cohen's kappa needs the two annotators' labels of the same items")
    if len(first) < 2 or len(set(first) | set(second)) < 2:
        return None
    return float(cohen_kappa_score(list(first), list(second)))


def fleiss_kappa(items: Sequence[Sequence[str]]) -> float | None:
    """Fleiss' κ of categories per item (each item's list: one category per annotator, at least 2); None when no
    item has 2 or chance agreement is 1."""
    rated = [Counter(cats) for cats in items if len(cats) >= 2]
    if not rated:
        return None
    p_items = [(sum(c * c for c in counts.values()) - n) / (n * (n - 1))
               for counts in rated for n in [sum(counts.values())]]
    totals: Counter[str] = Counter()
    for counts in rated:
        totals.update(counts)
    n_all = sum(totals.values())
    p_chance = sum((c / n_all) ** 2 for c in totals.values())
    if p_chance >= 1.0:
        return None
    p_bar = sum(p_items) / len(p_items)
    return (p_bar - p_chance) / (1.0 - p_chance)


@dataclass(frozen=True)
class AgreementReport:
    items_compared: int  # items with >= 2 labels
    mean_agreement: float | None  # mean of item_agreement over those items
    cohen: dict[tuple[str, str], float | None]  # per annotator pair, over the items both labelled
    fleiss: float | None


def agreement_report(labelled: Mapping[int, tuple[int, Sequence[LabelView]]]) -> AgreementReport:
    """Agreement over items: `labelled` maps item id -> (K candidates, its labels)."""
    per_item = {i: item_agreement(labs, k) for i, (k, labs) in labelled.items()}
    scored = [a for a in per_item.values() if a is not None]
    cats = {i: {lab.annotator: category(lab) for lab in labs if lab.decision != "skip"}
            for i, (_, labs) in labelled.items()}
    names = sorted({name for by in cats.values() for name in by})
    cohen = {}
    for a, b in combinations(names, 2):
        both = [by for by in cats.values() if a in by and b in by]
        if both:
            cohen[(a, b)] = cohen_kappa([by[a] for by in both], [by[b] for by in both])
    fleiss = fleiss_kappa([list(by.values()) for by in cats.values()])
    return AgreementReport(len(scored), sum(scored) / len(scored) if scored else None, cohen, fleiss)
