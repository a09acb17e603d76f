"""The Annotate tab's handlers and the role checks, without a browser: commands of the keys, undo, refusal labels
as overrides, review and resolution; what each role may do, refused on the server."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from app.common import roles
from app.common.services import Services
from app.tabs.annotate import handlers as ha
from evorag_core.config import apply_overrides, load_config
from evorag_core.env.scheduler import SIGNAL_WEIGHT
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
    view = ha.run_command(svc, "ann", f"skip|{b}||6")
    # #46: a skip is no label: 1 labelled (the tie), 1 skipped (before: "2 done")
    assert 'data-done="1"' in view.progress and 'data-skipped="1"' in view.progress
    assert "You: <b>1</b> labelled, 1 skipped, 0 open" in view.progress


def test_an_empty_queue_says_so_in_words_and_names_commands_only_to_an_admin(svc: Services) -> None:
    """#46: an annotator's empty queue showed `evorag annotate import` / `from-rollouts` hints."""
    view = ha.next_item(svc, "ann")
    assert view.item_id is None and "Nothing left for you to label right now" in view.item
    assert "evorag" not in view.item and "`" not in view.item
    assert "evorag annotate import" in ha.run_command(svc, "boss", "next|||1", admin=True).item


def test_an_annotators_header_shows_who_they_are_and_their_progress_not_admin_internals(svc: Services) -> None:
    """#46: annotators saw the admin header (live adapter, pairs, rounds, worker pid). ann labels 1 item and skips
    1 of 3: "ann (annotator) · you have labelled 1 item, 1 skipped; 1 open to you"; an admin still gets the
    admin header."""
    from app.shell.ui import page_header

    a, b, c = svc.store().add_annotation_items([NewAnnotationItem("preference", PREF)] * 3)
    ha.next_item(svc, "ann")
    ha.run_command(svc, "ann", f"tie|{a}||1")
    ha.run_command(svc, "ann", f"skip|{b}||2")
    svc.auth_users = {"ann": "annotator", "boss": "admin"}
    header = page_header(svc, SimpleNamespace(username="ann"), "annotator")
    assert "<b>ann</b> (annotator) · you have labelled <b>1</b> item, 1 skipped; 1 open to you" in header
    for internal in ("adapter", "rounds", "worker", "pairs", "pid"):
        assert internal not in header
    admin = page_header(svc, SimpleNamespace(username="boss"), "admin")
    assert "live adapter" in admin and "rounds" in admin


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
    assert store.get_episode(ep).steps[0].signals == {}  # not a REFUSE: only the verdict is recorded


def test_a_refusal_label_rescores_the_stored_refuse_step_and_the_return(svc: Services) -> None:
    """A REFUSE judged answerable has ref -1; labelled unanswerable its ref becomes +1, R_t the weighted sum under its
    own weights, and the finished episode's return the sum of its steps' rewards - as the Episode tab's override."""
    by_signal = {"ret": 0.2, "act": 0.1, "dup": 0.1, "bt": 0.05, "ref": 0.3, "step": 0.05, "ans": 0.2}
    weights = {SIGNAL_WEIGHT[name]: w for name, w in by_signal.items()}  # stored keyed by weight name (beta, ...)
    signals = {"ret": 0.0, "act": 0.0, "dup": 0.0, "bt": 0.0, "ref": -1.0, "step": -1.0, "ans": 0.0}
    old_reward = 0.3 * -1.0 + 0.05 * -1.0
    store = svc.store()
    ep = store.add_episode(question_id="demo-001", dataset="demo", question="Q", policy="oracle", stage="discovery",
                           schedule="table2",
                           steps=[Step(1, "SEARCH", "q", signals={**signals, "ref": 0.0}, weights=weights, reward=0.5),
                                  Step(2, "REFUSE", None, signals=signals, weights=weights, reward=old_reward,
                                       judge_verdict="answerable")])
    store.finish_episode(ep, total_return=0.5 + old_reward)
    (item,) = store.add_annotation_items([NewAnnotationItem("refusal", {"question": "Q", "passages": [],
                                                                        "episode_db_id": ep, "t": 2})])
    ha.run_command(svc, "ann", f"rank|{item}|1|9")  # key 2: unanswerable
    stored = store.get_episode(ep)
    refuse = stored.steps[1]
    assert refuse.signals["ref"] == 1.0 and refuse.reward == pytest.approx(0.3 * 1.0 + 0.05 * -1.0)
    assert stored.total_return == pytest.approx(0.5 + refuse.reward)
    assert store.effective_verdict(ep, 2) == "unanswerable" and stored.steps[0].reward == 0.5


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
