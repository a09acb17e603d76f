"""The Annotate tab's handlers and the role checks, without a browser: commands of the keys, undo, refusal labels
as overrides, review and resolution; what each role may do, refused on the server."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from app import roles
from app.handlers import annotate as ha
from app.services import Services
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import PermissionDenied
from evorag_core.store import NewAnnotationItem, Step
from tests.paths import DEMO

PREF = {"question": "Q?", "prompt": "P", "candidates": [{"completion": "SEARCH: a", "preview": "Found:\n[1] A: a"},
                                                       {"completion": "ANSWER: b"}, {"completion": "REFUSE"}]}


@pytest.fixture
def svc(tmp_path: Path):
    cfg = apply_overrides(load_config(), {"annotate.annotators_per_item": 2})
    s = Services(cfg, tmp_path, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    yield s
    s.close()


def test_keys_label_the_queue_and_undo_brings_the_last_back(svc: Services) -> None:
    a, b = svc.store().add_annotation_items([NewAnnotationItem("preference", PREF)] * 2)
    view = ha.next_item(svc, "ann")
    assert view.item_id == a and 'data-item="%d"' % a in view.item and "Found:" in view.item
    view = ha.run_command(svc, "ann", f"rank|{a}|2,0|123")
    assert view.item_id == b and "saved" in view.message
    assert svc.store().annotation_labels(a)[0].ranking == [[2], [0], [1]]
    view = ha.run_command(svc, "ann", "undo|||1")
    assert view.item_id == a and svc.store().annotation_labels(a) == []
    with pytest.raises(ValueError, match="pick at least the best"):
        ha.run_command(svc, "ann", f"rank|{a}||2")
    with pytest.raises(ValueError, match="malformed"):
        ha.run_command(svc, "ann", f"rank|{a}|0/x|2")
    ha.run_command(svc, "ann", f"rank|{a}|/1|3")  # Shift+2 alone: candidate 2 is the worst, the others tie above it
    assert svc.store().annotation_labels(a)[0].ranking == [[0, 2], [1]]
    ha.run_command(svc, "ann", "undo|||4")
    ha.run_command(svc, "ann", f"tie|{a}||5")
    ha.run_command(svc, "ann", f"skip|{b}||6")
    assert 'data-done="2"' in ha.next_item(svc, "ann").progress


def test_a_refusal_label_becomes_an_override_of_its_step(svc: Services) -> None:
    store = svc.store()
    ep = store.add_episode(question_id="demo-001", dataset="demo", question="Q", policy="oracle", stage="discovery",
                           schedule="table2", steps=[Step(1, "ANSWER", "x", judge_verdict="answerable")])
    (item,) = store.add_annotation_items([NewAnnotationItem("refusal", {"question": "Q", "passages": [],
                                                                        "episode_db_id": ep, "t": 1})])
    assert ha.next_item(svc, "ann").item_id == item
    view = ha.run_command(svc, "ann", f"rank|{item}|1|9")
    assert "override" in view.message
    assert store.effective_verdict(ep, 1) == "unanswerable"


def test_review_lists_disagreements_and_a_resolution_closes_one(svc: Services) -> None:
    store = svc.store()
    (a,) = store.add_annotation_items([NewAnnotationItem("preference", PREF)])
    store.label_annotation_item(a, "ann", "rank", [[0], [1], [2]], per_item=2)
    store.label_annotation_item(a, "bob", "rank", [[1], [0], [2]], per_item=2)
    view = ha.review_list(svc)
    assert view.choices[0][1] == a and "Cohen" in view.agreement
    assert "ann" in ha.review_item(svc, a) and "bob" in ha.review_item(svc, a)
    assert "resolved by rev" in ha.resolve(svc, "rev", a, "rank", "2,1")
    assert store.get_annotation_item(a).resolution == {"decision": "rank", "ranking": [[1], [0], [2]]}
    assert ha.review_list(svc).choices == []


def test_roles_are_checked_on_the_server(svc: Services) -> None:
    """Users-file roles: an annotator labels only, a reviewer also resolves, an admin does everything; without a login
    the single local user is an admin."""
    svc.auth_users = {"ann": "annotator", "rev": "reviewer", "boss": "admin"}
    as_ = lambda name: SimpleNamespace(username=name)  # noqa: E731
    roles.require(svc, as_("ann"), "label")
    with pytest.raises(PermissionDenied, match=r"ann \(annotator\) may not launch"):
        roles.require(svc, as_("ann"), "train")
    with pytest.raises(PermissionDenied):
        roles.require(svc, as_("ann"), "review")
    roles.require(svc, as_("rev"), "review")
    with pytest.raises(PermissionDenied):
        roles.require(svc, as_("rev"), "adapters")
    for action in roles.ACTIONS:
        roles.require(svc, as_("boss"), action)
        roles.require(svc, None, action)
    with pytest.raises(PermissionDenied):
        roles.require(svc, as_("stranger"), "label")
