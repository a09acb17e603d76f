"""The annotation queue on SQLite and PostgreSQL: claims with leases, N annotators per item, expiry, labels, undo,
resolutions, and concurrent claimers (threads) that never take an item beyond N."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from evorag_core.errors import StoreError
from evorag_core.store import NewAnnotationItem, Store, open_store
from evorag_core.store.base import utcnow

PAYLOAD = {"question": "q?", "prompt": "P", "candidates": [{"completion": "SEARCH: a"}, {"completion": "ANSWER: b"}]}


def _items(store: Store, n: int) -> list[int]:
    return store.add_annotation_items([NewAnnotationItem("preference", dict(PAYLOAD)) for _ in range(n)])


def test_items_with_a_known_key_are_not_queued_twice(store: Store) -> None:
    first = store.add_annotation_items([NewAnnotationItem("preference", PAYLOAD, "rollout", "rollout:1:2")])
    again = store.add_annotation_items([NewAnnotationItem("preference", PAYLOAD, "rollout", "rollout:1:2"),
                                        NewAnnotationItem("refusal", {"question": "q", "passages": []}, "rollout",
                                                          "rollout:1:3")])
    assert len(first) == 1 and len(again) == 1
    assert [i.key for i in store.list_annotation_items()] == ["rollout:1:2", "rollout:1:3"]


def test_one_annotator_per_item_by_default_and_a_reload_returns_the_same_item(store: Store) -> None:
    a, b = _items(store, 2)
    assert store.claim_annotation_item("ann", per_item=1, lease_s=60).id == a
    assert store.claim_annotation_item("ann", per_item=1, lease_s=60).id == a  # still leased to ann
    assert store.claim_annotation_item("bob", per_item=1, lease_s=60).id == b
    assert store.claim_annotation_item("cat", per_item=1, lease_s=60) is None  # both leased, N = 1


def test_two_annotators_per_item_and_labels_free_the_slot_only_for_others(store: Store) -> None:
    (a,) = _items(store, 1)
    assert store.claim_annotation_item("ann", per_item=2, lease_s=60).id == a
    assert store.claim_annotation_item("bob", per_item=2, lease_s=60).id == a
    assert store.claim_annotation_item("cat", per_item=2, lease_s=60) is None
    store.label_annotation_item(a, "ann", "rank", [[1], [0]], per_item=2)
    assert store.claim_annotation_item("ann", per_item=2, lease_s=60) is None  # labelled it already
    assert store.claim_annotation_item("cat", per_item=2, lease_s=60) is None  # ann's label + bob's lease = 2
    progress = store.annotation_progress("ann", per_item=2)
    assert (progress.done, progress.open, progress.queue_done, progress.queue_total) == (1, 0, 0, 1)


def test_an_expired_lease_is_reclaimed_and_its_late_label_refused(store: Store) -> None:
    (a,) = _items(store, 1)
    t0 = utcnow()
    assert store.claim_annotation_item("ann", per_item=1, lease_s=30, now=t0).id == a
    assert store.claim_annotation_item("bob", per_item=1, lease_s=30, now=t0 + timedelta(seconds=29)) is None
    assert store.claim_annotation_item("bob", per_item=1, lease_s=30, now=t0 + timedelta(seconds=31)).id == a
    with pytest.raises(StoreError, match="went to other annotators"):
        store.label_annotation_item(a, "ann", "tie", per_item=1, now=t0 + timedelta(seconds=32))
    store.label_annotation_item(a, "bob", "tie", per_item=1, now=t0 + timedelta(seconds=33))
    assert [(lab.annotator, lab.decision) for lab in store.annotation_labels(a)] == [("bob", "tie")]


def test_skip_passes_the_item_on_and_undo_brings_the_last_back(store: Store) -> None:
    a, b = _items(store, 2)
    store.claim_annotation_item("ann", per_item=1, lease_s=60)
    store.label_annotation_item(a, "ann", "skip", per_item=1)
    assert store.claim_annotation_item("bob", per_item=1, lease_s=60).id == a  # a skip is not a label
    progress = store.annotation_progress("ann", per_item=1)  # #46: nor is it counted as labelled
    assert (progress.done, progress.skipped, progress.open) == (0, 1, 1)  # open: b (a went to bob)
    assert store.claim_annotation_item("ann", per_item=1, lease_s=60).id == b
    store.label_annotation_item(b, "ann", "rank", [[0], [1]], per_item=1)
    assert store.undo_last_label("ann", lease_s=60).id == b
    assert store.annotation_labels(b) == []
    assert store.claim_annotation_item("ann", per_item=1, lease_s=60).id == b
    with pytest.raises(StoreError, match="already labelled"):
        store.label_annotation_item(a, "ann", "tie", per_item=1)


def test_a_resolution_closes_the_item(store: Store) -> None:
    (a,) = _items(store, 1)
    store.label_annotation_item(a, "ann", "rank", [[0], [1]], per_item=2)
    store.label_annotation_item(a, "bob", "rank", [[1], [0]], per_item=2)
    item = store.resolve_annotation_item(a, "rev", "rank", [[1], [0]])
    assert item.resolution == {"decision": "rank", "ranking": [[1], [0]]} and item.resolved_by == "rev"
    with pytest.raises(StoreError, match="resolved"):
        store.label_annotation_item(a, "cat", "tie", per_item=3)
    with pytest.raises(ValueError, match="needs a ranking"):
        store.label_annotation_item(a, "cat", "rank", None, per_item=3)


@pytest.mark.parametrize("per_item", [1, 2])
def test_concurrent_claims_never_exceed_n(url: str, per_item: int) -> None:
    """8 annotators claim and label 6 items at once (threads, one store each): every item ends with exactly
    `per_item` labels, none beyond, and no label is lost."""
    with open_store(url) as s:
        ids = _items(s, 6)
    stores = [open_store(url) for _ in range(8)]
    barrier, errors, labelled = threading.Barrier(8), [], []

    def work(i: int) -> None:
        store, name = stores[i], f"ann{i}"
        try:
            barrier.wait()
            while (item := store.claim_annotation_item(name, per_item=per_item, lease_s=60)) is not None:
                store.label_annotation_item(item.id, name, "tie", per_item=per_item)
                labelled.append((item.id, name))
        except BaseException as exc:  # collected and reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for s in stores:
        s.close()
    assert errors == []
    with open_store(url) as s:
        per = {i: [lab.annotator for lab in s.annotation_labels(i)] for i in ids}
    assert all(len(names) == per_item == len(set(names)) for names in per.values()), per
    assert sorted(labelled) == sorted((i, n) for i, names in per.items() for n in names)
