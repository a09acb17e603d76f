"""The DynaKrag tab without a browser: the pure view builders (`app/tabs/dynakrag/view.py`) over hand-made states and
decisions, and the handler (`app/tabs/dynakrag/handlers.py`) through real Services on the tiny random model: a fresh home
has no trained controller and says so, the uniform-valid controller runs an episode to its graded answer, Stop
before or during a run keeps the state of the last finished operation, a saved controller is picked up and scores
the valid operations, and "Train controller" queues the Training tab's dynakrag round."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from app.tabs.dynakrag.view import (CHOSEN_COLOUR, OTHER_COLOUR, UNIFORM_LABEL, controller_html, final_html,
                               operations_html, scores_figure, state_html)
from app.common.services import Services
from app.tabs.dynakrag import handlers as hd
from evorag_core.config import DynaKragConfig, apply_overrides
from evorag_core.errors import ModelLoadError
from evorag_core.methods.dynakrag import (FEATURE_NAMES, STATE_FEATURES, EvidenceDoc, EvidenceState, ValueModels,
                                          save_models)
from evorag_core.methods.dynakrag.controller import Decision, make_forest
from evorag_core.types import Passage
from tests.app.test_studio_activation import tiny, tiny_services  # noqa: F401 - the tiny random model
from tests.paths import DEMO


@pytest.fixture()
def svc(tiny, session_home, tmp_path):  # noqa: F811
    """Tiny-model Services in the session's home (its indexes) with a DynaKrag controller folder of this test alone:
    a browser test trains a controller into the session home's, and parallel runs may order that file first."""
    services = tiny_services(tiny, session_home, tmp_path, **{"dynakrag.model_dir": str(tmp_path / "dynakrag")})
    yield services
    services.close()


CFG = DynaKragConfig()
DOCS = (EvidenceDoc(Passage("p1", "Sable <River>", "A river in the north."), 0.0312, "retrieve_more", "q"),
        EvidenceDoc(Passage("p2", "Ansel Travine", "He was born in Mirrow."), 0.0301, "retrieve_more", "q"))
STATE = EvidenceState("Where was Ansel Travine born?", docs=DOCS, ranking=(("p1", 1.0), ("p2", 0.9), ("p3", 0.5)),
                      cursor=2, query="Where was Ansel Travine born?", history=("retrieve_more",), cost=1.0,
                      retrieval_calls=1)


def test_the_state_view_shows_documents_frontier_query_gap_sufficiency_and_cost():
    html = state_html(STATE, CFG, frozenset({"p2"}))
    assert "2 / 3 (1 unseen left)" in html and "Where was Ansel Travine born?" in html
    assert "Recorded gap</th><td data-field=\"recorded gap\">(none)" in html and "not judged yet" in html
    assert "1.00 · retrieval calls 1/3 · control steps 1/4 · LM calls 0" in html
    assert "Sable &lt;River&gt;" in html and "<River>" not in html  # titles are escaped
    assert html.count('class="badge gold"') == 1 and "gold found 1/2" not in html and "gold found 1/1" in html
    judged = state_html(EvidenceState("q", docs=DOCS[:1], sufficient=False, p_sufficient=0.31, missing="birthplace"),
                        CFG)
    assert "insufficient (P(yes) = 0.31)" in judged and "birthplace" in judged
    assert "not fetched" in state_html(EvidenceState("q"), CFG) and "No documents yet" in state_html(
        EvidenceState("q"), CFG)


def test_the_operations_view_greys_the_invalid_ones_with_their_rule_and_marks_the_pick():
    """At STATE (evidence, no gap, a bridge entity "Mirrow"): gap_query and compression are excluded."""
    decision = Decision("sufficiency_check", {"retrieve_more": 0.1, "rewrite_query": 0.05, "bridge_entity_expand": 0.2,
                                              "sufficiency_check": 0.3, "stop_answer": 0.0})
    html = operations_html(STATE, CFG, decision)
    assert html.count('class="dk-op invalid"') == 2 and html.count('class="dk-op valid') == 5
    assert "excluded: no gap recorded (an insufficient sufficiency_check records one)" in html
    assert "excluded: terminal: only after stop_answer" in html
    assert 'class="dk-op valid chosen" data-op="sufficiency_check"' in html and "0.3000" in html
    suppressed = Decision("retrieve_more", {"retrieve_more": 0.1}, continuation=0.4, stop_suppressed=True)
    assert "suppressed by the continuation model (u(s) = 0.400)" in operations_html(STATE, CFG, suppressed)


def test_the_scores_figure_has_one_bar_per_scored_operation_with_the_pick_highlighted():
    decision = Decision("bridge_entity_expand", {"retrieve_more": 0.1, "bridge_entity_expand": 0.2, "stop_answer": -0.05})
    fig = scores_figure(STATE, CFG, decision, "learned")
    bar = fig.data[0]
    assert list(bar.x) == ["retrieve_more", "bridge_entity_expand", "stop_answer"]
    assert list(bar.y) == [0.1, 0.2, -0.05]
    assert list(bar.marker.color) == [OTHER_COLOUR, CHOSEN_COLOUR, OTHER_COLOUR]
    assert "v̂(s,a) − λ·c(s,a), λ = 0" in fig.layout.title.text
    uniform = scores_figure(STATE, CFG, Decision("stop_answer", {"retrieve_more": 0.5, "stop_answer": 0.5}), "uniform")
    assert uniform.layout.title.text.startswith("Uniform-valid controller") and uniform.layout.yaxis.title.text == "P(a)"
    ended = scores_figure(EvidenceState("q", docs=DOCS, terminated=True), CFG, None, "uniform")
    assert not ended.data and "Step compresses and answers" in ended.layout.annotations[0].text
    done = scores_figure(EvidenceState("q", docs=DOCS, terminated=True, snippets=()), CFG, None, "uniform")
    assert "the episode has ended" in done.layout.annotations[0].text
    assert "next: <b>bridge_entity_expand</b>" in fig.layout.title.text


def test_the_final_view_grades_against_gold_and_shows_the_compressed_evidence():
    done = EvidenceState("q", docs=DOCS, terminated=True, snippets=("Ansel Travine: He was born in <Mirrow>.",),
                         history=("retrieve_more", "stop_answer", "compress_answer_evidence"))
    html = final_html(done, CFG, "Mirrow", ("Mirrow",), (1.0, 1.0), "stop_answer")
    assert 'data-em="1" data-f1="1.000"' in html and "grade correct" in html and "&lt;Mirrow&gt;" in html
    assert "Final context (2 documents)" in html and "stopped by stop_answer" in html
    typed = final_html(done, CFG, "Mirrow", (), None)
    assert "typed question: no gold answer, not graded" in typed
    assert "appear when the episode ends" in final_html(None, CFG, None)


def test_the_controller_line_says_plainly_when_nothing_is_trained_and_labels_the_uniform_controller():
    html = controller_html(False, "No trained DynaKrag controller in /h/dynakrag.", "uniform")
    assert 'data-trained="0"' in html and "No trained" in html and "Train one on the current data file" in html
    assert UNIFORM_LABEL in html
    assert "learned controller" in controller_html(True, "Trained controller in /h/dynakrag.", "learned")
    picked_missing = controller_html(False, "No trained DynaKrag controller in /h/dynakrag.", "learned")
    assert "dk-learned" not in picked_missing and "none is trained" in picked_missing


# -- the handler through real Services (tiny random model) ---------------------------------------------------------

def _run(svc, session, stop=None, to_end=True):
    updates = list(hd.advance(svc, session, stop or threading.Event(), to_end=to_end, poll=0.05))
    return updates, next((u.session for u in reversed(updates) if u.session is not None), session)


def test_a_fresh_home_has_no_controller_and_the_uniform_one_runs_an_episode_to_a_graded_answer(svc):
    status = hd.controller_status(svc)
    assert not status.trained and "No trained DynaKrag controller" in status.text
    with pytest.raises(ModelLoadError, match="pick the uniform-valid controller"):
        hd.start(svc, None, "demo-002", "", hd.LEARNED)
    session = hd.start(svc, None, "demo-002", "", hd.UNIFORM)
    assert session.decision.action == "retrieve_more" and session.decision.scores == {"retrieve_more": 1.0}
    updates, one = _run(svc, session, to_end=False)
    assert [t.action for t in one.steps] == ["retrieve_more"] and one.state.docs and not one.finished
    updates, done = _run(svc, one)
    assert done.finished and done.decision is None and done.steps[-1].action in ("compress_answer_evidence",
                                                                                 "stop_answer")
    assert "Finished" in updates[-1].status and hd.grade(done) is not None
    assert done.gold_pids and done.gold_answers == ("Sable River",)
    with pytest.raises(ValueError, match="finished"):
        next(hd.advance(svc, done, threading.Event(), to_end=True))


def test_stop_keeps_the_state_of_the_last_finished_operation(svc, hold_at):
    """Stop before anything ran: nothing changes. Stop while the second operation runs (held open by its test hold
    point until the Stop, so the operation cannot end first): the state after the first one, exactly."""
    session = hd.start(svc, None, "demo-002", "", hd.UNIFORM)
    stop = threading.Event()
    stop.set()
    updates, same = _run(svc, session, stop)
    assert updates[-1].stopped and "Stopped" in updates[-1].status and same == session
    after_one = _run(svc, session, to_end=False)[1]
    hold_at(f"dynakrag:{after_one.decision.action}")
    stop = threading.Event()
    run = hd.advance(svc, after_one, stop, to_end=True, poll=0.01)
    first = next(run)
    assert first.session is None and f"running {after_one.decision.action}" in first.status
    stop.set()
    rest = list(run)
    assert rest[-1].stopped and "interrupted and discarded" in rest[-1].status
    assert rest[-1].session == after_one and [u.session for u in rest[:-1]] == [None] * (len(rest) - 1)
    for thread in threading.enumerate():
        if thread.name == "dynakrag-step":
            thread.join(60)


def test_a_typed_question_is_searched_in_the_picked_questions_corpus_and_not_graded(svc):
    session = hd.start(svc, None, "demo-002", "  Which river is the longest? ", hd.UNIFORM)
    assert session.typed and session.question == "Which river is the longest?" and not session.gold_pids
    done = _run(svc, session)[1]
    assert done.finished and hd.grade(done) is None


def _save_controller(folder: Path, cfg: DynaKragConfig) -> None:
    """A small forest fitted on random rows (shapes as the real controller's), saved as training saves it."""
    rng = np.random.default_rng(0)
    value = make_forest(DynaKragConfig(n_estimators=5, min_samples_leaf=1)).fit(
        rng.normal(size=(40, len(FEATURE_NAMES))), rng.normal(size=40))
    cont = make_forest(DynaKragConfig(n_estimators=5, min_samples_leaf=1)).fit(
        rng.normal(size=(40, len(STATE_FEATURES))), rng.normal(size=40) - 5.0)  # continuing never pays
    save_models(ValueModels(value, cont, {"round_id": 7, "dataset": "demo", "transitions": 40}), cfg, folder)


def test_a_saved_controller_is_picked_up_and_scores_every_valid_operation(tiny, tmp_path):  # noqa: F811
    cfg = apply_overrides(_cfg(tiny), {"dynakrag.model_dir": str(tmp_path / "ctrl")})
    services = Services(cfg, tmp_path / "home", data_path=DEMO, db_url=f"sqlite:///{tmp_path / 's.db'}")
    try:
        _save_controller(tmp_path / "ctrl", cfg.dynakrag)
        status = hd.controller_status(services)
        assert status.trained and "round #7" in status.text and "40 transitions" in status.text
        session = hd.start(services, None, "demo-002", "", hd.LEARNED)
        assert session.decision.action == "retrieve_more"  # s_0: the only valid operation
        one = _run(services, session, to_end=False)[1]
        valid = one.steps and set(one.decision.scores)
        assert valid and "stop_answer" in valid and one.decision.action in valid
    finally:
        services.close()


def _cfg(tiny):
    from evorag_core.config import load_config

    return apply_overrides(load_config(), {"policy.model": str(tiny), "policy.device": "cpu", "policy.threads": 1})


def test_train_controller_queues_the_training_tabs_dynakrag_round(svc):
    launch = hd.train_controller(svc, str(DEMO), 3)
    r = svc.store().get_round(launch.round_id)
    assert r.objective == "dynakrag" and r.status == "queued"
    assert r.config["data"] == str(DEMO.resolve()) and r.config["dynakrag"]["questions"] == 3
    html, ended = hd.round_html(svc, launch.round_id)
    assert f"Round #{launch.round_id} (dynakrag)" in html and not ended
    assert "cancelled before it started" in hd.cancel_training(svc, launch.round_id)
    assert hd.round_html(svc, launch.round_id)[1]
    with pytest.raises(ValueError, match="no training round"):
        hd.cancel_training(svc, None)
