"""The annotation queue's labels into training data: pairs per label, agreement, disagreements, TRL / HF export.

Which labels make pairs: a resolved item's resolution alone (annotator = the reviewer, `resolved_by` in the
metadata); otherwise its annotators' rankings, each pair once however many annotators gave it (`annotator` the
first who did, `metadata.annotators` all of them): two annotators who agree give one set of pairs, not two. Ties,
skips and refusal verdicts make no pairs (a refusal verdict becomes an override when the item came from a step).

An unresolved disagreement (2+ labels, agreement < 1: the items the Review tab lists) is left out and counted in
`ExportReport.left_out`, since its rankings may contradict each other (a over b from one, b over a from another);
with `include_disagreements` its pairs are exported and counted in `ExportReport.included`, for the caller's
warning. With `min_agreement`, an unresolved item needs two labels or more and an agreement of at least that much;
a resolved item always passes (a reviewer decided it).

Formats: `trl` writes JSON lines as `evorag pairs export` does (TRL's conversational DPO columns plus ours), so
`evorag pairs import FILE` queues them for a training round; `hf` saves a Hugging Face `datasets` folder
(`datasets.Dataset.save_to_disk`; `metadata` as a JSON string, since its keys differ between rows).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evorag_core.pairs.agreement import AgreementReport, LabelView, agreement_report, item_agreement
from evorag_core.pairs.annotation import pairs_for_label
from evorag_core.pairs.io import new_pair_record

if TYPE_CHECKING:
    from evorag_core.store import AnnotationItem, AnnotationLabel, NewPair, Store

__all__ = ["FORMATS", "LabelledItem", "ExportReport", "labelled_items", "queue_agreement", "disagreements",
           "annotation_pairs", "export_annotations"]

FORMATS = ("trl", "hf")


@dataclass(frozen=True)
class LabelledItem:
    item: AnnotationItem
    labels: tuple[AnnotationLabel, ...]  # skips left out
    agreement: float | None  # None with fewer than two labels

    @property
    def k(self) -> int:
        return len(self.item.payload.get("candidates", ()))

    @property
    def disputed(self) -> bool:
        """Unresolved, and its labels do not all agree."""
        return self.item.resolution is None and self.agreement is not None and self.agreement < 1.0


@dataclass(frozen=True)
class ExportReport:
    pairs: int  # written
    left_out: int  # unresolved disagreements (preference items) whose pairs were not written
    included: int  # unresolved disagreements whose pairs were written (include_disagreements)


def _view(label: AnnotationLabel) -> LabelView:
    ranking = tuple(tuple(t) for t in label.ranking) if label.ranking else None
    return LabelView(label.annotator, label.decision, ranking)


def labelled_items(store: Store) -> list[LabelledItem]:
    """Every item with at least one label (not counting skips) or a resolution, with its agreement."""
    by_item: dict[int, list[AnnotationLabel]] = {}
    for label in store.annotation_labels():
        if label.decision != "skip":
            by_item.setdefault(label.item_id, []).append(label)
    out = []
    for item in store.list_annotation_items():
        labs = tuple(by_item.get(item.id, ()))
        if labs or item.resolution is not None:
            k = len(item.payload.get("candidates", ()))
            out.append(LabelledItem(item, labs, item_agreement([_view(lab) for lab in labs], k)))
    return out


def queue_agreement(items: Sequence[LabelledItem]) -> AgreementReport:
    return agreement_report({li.item.id: (li.k, [_view(lab) for lab in li.labels]) for li in items})


def disagreements(items: Sequence[LabelledItem]) -> list[LabelledItem]:
    """Unresolved items whose labels do not all agree (agreement < 1), lowest agreement first."""
    found = [li for li in items if li.disputed]
    return sorted(found, key=lambda li: (li.agreement, li.item.id))


def annotation_pairs(items: Sequence[LabelledItem], min_agreement: float | None = None, *,
                     include_disagreements: bool = False) -> list[NewPair]:
    """The pairs of the labels (module docstring for which labels count)."""
    out: list[NewPair] = []
    for li in items:
        if li.item.kind != "preference":
            continue
        res = li.item.resolution
        if res is not None:
            if res.get("decision") == "rank":
                out += pairs_for_label(li.item.payload, li.item.id, li.item.resolved_by or "reviewer",
                                       res["ranking"], li.agreement, resolved_by=li.item.resolved_by)
            continue
        if li.disputed and not include_disagreements:
            continue
        if min_agreement is not None and (li.agreement is None or li.agreement < min_agreement):
            continue
        out += _merged_pairs(li)
    return out


def _merged_pairs(li: LabelledItem) -> list[NewPair]:
    """Each (chosen, rejected) pair of the item's rankings once, with every annotator who gave it."""
    merged: dict[tuple[str, str], NewPair] = {}
    for label in li.labels:
        if label.decision != "rank" or not label.ranking:
            continue
        for pair in pairs_for_label(li.item.payload, li.item.id, label.annotator, label.ranking, li.agreement):
            first = merged.setdefault((pair.chosen, pair.rejected), pair)
            first.metadata.setdefault("annotators", [])
            if label.annotator not in first.metadata["annotators"]:
                first.metadata["annotators"].append(label.annotator)
    return list(merged.values())


def _disputed_preferences(items: Sequence[LabelledItem]) -> int:
    return sum(1 for li in items if li.item.kind == "preference" and li.disputed)


def _hf_rows(pairs: Sequence[NewPair]) -> list[dict[str, Any]]:
    rows = []
    for p in pairs:
        row = new_pair_record(p)
        row["metadata"] = json.dumps(row["metadata"], ensure_ascii=False)
        row.pop("signals_chosen", None)
        row.pop("signals_rejected", None)
        rows.append(row)
    return rows


def export_annotations(store: Store, out: Path | str, *, fmt: str = "trl", min_agreement: float | None = None,
                       include_disagreements: bool = False) -> ExportReport:
    """Write the labelled pairs to `out` (a .jsonl file for trl, a folder for hf): how many pairs, and how many
    unresolved disagreements were left out (or, with `include_disagreements`, included)."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    items = labelled_items(store)
    pairs = annotation_pairs(items, min_agreement, include_disagreements=include_disagreements)
    disputed = _disputed_preferences(items)
    report = ExportReport(len(pairs), 0 if include_disagreements else disputed,
                          disputed if include_disagreements else 0)
    out = Path(out)
    if fmt == "hf":
        import datasets  # a dependency of the project (TRL needs it)

        datasets.Dataset.from_list(_hf_rows(pairs)).save_to_disk(str(out))
        return report
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for p in pairs:
            fh.write(json.dumps(new_pair_record(p), ensure_ascii=False) + "\n")
    tmp.replace(out)
    return report
