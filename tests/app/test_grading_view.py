"""The Episode tab's grade badge and source passage (`app/common/grading_view.py`, `views.passages_html(source=...)`), and
the handlers' view of finished oracle episodes on the demo data (demo-001 answerable, demo-004 unanswerable).

Hand-computed F1 (SQuAD token F1 after normalisation): "the Sable" vs "Sable River": tokens {sable} vs
{sable, river}: precision 1/1, recall 1/2, F1 = 2 * 1 * 0.5 / 1.5 = 0.667."""
from __future__ import annotations


import pytest

from tests.paths import DEMO
from app.common import views
from app.tabs.episode import handlers as episode_handlers
from evorag_core.metrics import Grade, grade
from app.common.grading_view import (episode_grade, gold_text, grade_html, highlight, recorded_source,
                              source_index)
from app.common.services import Services
from app.common.session import EpisodeSettings, free_question
from evorag_core.env.actions import Answer, Refuse, Search
from evorag_core.config import load_config
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.types import Passage, Question

GOLD = ("Sable River",)
MIRROW = Passage("p:mirrow", "Mirrow", "Mirrow is a mill town on the  SABLE\nriver in Velmark Province.")
TRAVINE = Passage("p:travine", "Ansel Travine", "Ansel Travine was a chemist born in Mirrow, near the Sable River.")


# -- grading -------------------------------------------------------------------------------------------------------

def test_correct_partial_and_wrong_answers():
    assert grade("Sable River", False, GOLD) == Grade("correct", 1.0, 1.0, True, "exact match")
    assert grade("the sable river.", False, GOLD).verdict == "correct"  # normalised as EM normalises
    partial = grade("the Sable", False, GOLD)
    assert (partial.verdict, partial.em, partial.label) == ("partial", 0.0, "partly correct")
    assert partial.f1 == pytest.approx(2 / 3)
    wrong = grade("Caddock River", False, ("Sable",))  # shares no token with the gold
    assert (wrong.verdict, wrong.em, wrong.f1) == ("wrong", 0.0, 0.0)
    assert grade("Paris", False, ("Lyon", "Sable River")).verdict == "wrong"
    assert grade("Sable River", False, ("Sable", "Sable River")).verdict == "correct"  # any alias


def test_refusals_and_running_out_of_steps():
    refused = grade(None, True, GOLD)
    assert (refused.verdict, refused.em, refused.f1, refused.reason) == (
        "wrong", 0.0, 0.0, "refused an answerable question")
    assert grade(None, False, GOLD).reason == "ran out of steps"


def test_unanswerable_questions_grade_a_refusal_as_correct_and_hide_the_stored_answer():
    assert grade(None, True, ("1845",), answerable=False) == Grade(
        "correct", 1.0, 1.0, False, "refused an unanswerable question")
    answered = grade("1845", False, ("1845",), answerable=False)  # even the stored (false) answer is wrong
    assert (answered.verdict, answered.em, answered.f1) == ("wrong", 0.0, 0.0)
    q = Question("demo-004", "demo", "In what year did the chemist Ansel Travine marry?", ("1845",), "unanswerable")
    assert gold_text(q) == "unanswerable"
    assert gold_text(Question("q", "demo", "Where?", ("Sable River", "Sable"))) == "Sable River, Sable"
    free = free_question("Where is Mirrow?", "demo")
    assert gold_text(free) == "unknown (free question)"
    assert grade("Mirrow", False, free.answers) is None  # no gold: no badge


def test_badge_shows_verdict_em_and_f1():
    html = grade_html(grade("the Sable", False, GOLD))
    assert 'class="badge grade partial"' in html and "partly correct · EM 0 · F1 0.67" in html
    assert grade_html(None) == ""


def _record(*steps, answers=GOLD) -> EpisodeRecord:
    recs = tuple(StepRecord(t, a, (), {}, {}, 0.0, info=info) for t, (a, info) in enumerate(steps, 1))
    return EpisodeRecord("e", "q", "demo", "Where?", "discovery", "time-dynamic", "full", 5, 5, recs,
                         gold_answers=answers)


def test_episode_grade_and_the_recorded_source():
    q = Question("q", "demo", "On which river is Mirrow?", GOLD)
    running = _record((Search("Mirrow"), {}))
    assert episode_grade(q, running) is None  # not finished: no badge
    done = _record((Search("Mirrow"), {}), (Answer("Sable River"), {"answer_source": "p:mirrow"}))
    assert episode_grade(q, done).verdict == "correct" and recorded_source(done) == "p:mirrow"
    assert recorded_source(_record((Answer("Sable River"), {}))) is None  # stored before the record existed
    assert recorded_source(_record((Refuse(), {}))) is None


# -- the source passage and its highlight ----------------------------------------------------------------------

def test_source_is_the_recorded_passage_else_the_first_containing_the_span():
    passages = [TRAVINE, MIRROW]
    assert source_index("Sable River", passages, "p:mirrow") == 1  # the reader's record wins
    assert source_index("sable   RIVER", passages) == 0  # fallback: first passage containing it, case/space folded
    assert source_index("Sable River", passages, "p:elsewhere") == 0  # a record not on show: the fallback
    assert source_index("Velmark Province", passages) == 1
    assert source_index("Mirrow", [Passage("x", "Lantry", "A port."), MIRROW]) == 1  # found in a title
    assert source_index("yes", passages, "p:mirrow") is None and source_index("No", passages) is None  # yes/no
    assert source_index("Harwick", passages) is None and source_index("", passages) is None
    assert source_index(None, passages) is None


def test_highlight_is_case_and_whitespace_insensitive_and_escapes_everything():
    assert highlight(MIRROW.text, "sable river") == (
        "Mirrow is a mill town on the  <mark>SABLE\nriver</mark> in Velmark Province.")
    assert highlight("Sable and sable", "SABLE") == "<mark>Sable</mark> and <mark>sable</mark>"
    text = 'A <script>alert("x")</script> & <b>Sable River</b>'
    assert highlight(text, "sable river") == (
        "A &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;<mark>Sable River</mark>&lt;/b&gt;")
    # a span that is itself markup is matched as text and escaped inside the mark
    assert highlight("say <script>x</script> now", "<SCRIPT>x</script>") == (
        "say <mark>&lt;script&gt;x&lt;/script&gt;</mark> now")
    assert highlight("yes, <i>it</i> is", "yes") == "yes, &lt;i&gt;it&lt;/i&gt; is"  # yes/no: nothing marked


def test_passages_html_marks_the_source_and_keeps_the_others_plain():
    evil = Passage("p:<x>", "<script>T</script>", "Born near the <script>Sable River</script> in <i>1402</i>.")
    html = views.passages_html([MIRROW, evil], {"p:mirrow"}, True, "Evidence", source=1, span="sable river</script>")
    assert html.count('class="badge source"') == 1 and '<li class="source">' in html and '<li class="gold">' in html
    assert "<mark>Sable River&lt;/script&gt;</mark>" in html
    assert "<script>" not in html and "&lt;script&gt;T&lt;/script&gt;" in html and "&lt;i&gt;1402" in html
    assert "<mark>" not in html.split("</li>")[0]  # the other passage is not highlighted
    plain = views.passages_html([MIRROW], (), False)
    assert "<mark>" not in plain and "source" not in plain


# -- the handlers: finished oracle episodes on the demo data ----------------------------------------------------------

@pytest.fixture(scope="module")
def svc(session_home, tmp_path_factory) -> Services:
    db = tmp_path_factory.mktemp("grading_db") / "studio.db"
    services = Services(load_config(), session_home, data_path=DEMO, db_url=f"sqlite:///{db}")
    yield services
    services.close()


def test_a_finished_answered_episode_shows_the_badge_and_its_source_passage(svc):
    """demo-001, oracle: SEARCH, SEARCH, ANSWER "Sable River" (EM 1, F1 1). The oracle is not the span reader, so
    the source is the first chain passage containing the span (the old-episode fallback)."""
    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(policy="oracle", question_id="demo-001"))
    assert "evo-grade" not in view.status
    view, sess = episode_handlers.run_to_end(sess)
    assert sess.record.answer == "Sable River"
    assert 'data-verdict="correct"' in view.status and "correct · EM 1 · F1 1.00" in view.status
    assert "gold answer: Sable River" in view.status and "read from passage [" in view.status
    assert view.passages.count('class="badge source"') == 1
    assert "<mark>Sable River</mark>" in view.passages


def test_an_unanswerable_question_shows_unanswerable_and_a_refusal_is_correct(svc):
    """demo-004 (its stored answer "1845" is false to the corpus): the oracle refuses at t = 1."""
    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(policy="oracle", question_id="demo-004"))
    assert "gold answer: unanswerable" in view.status and "1845" not in view.status
    view, sess = episode_handlers.run_to_end(sess)
    assert sess.record.refused
    assert 'data-verdict="correct"' in view.status and "1845" not in view.status
    assert "<mark>" not in view.passages and 'class="badge source"' not in view.passages


def test_the_studio_policy_records_the_answer_source_in_the_step_info():
    """A span answer's source pid travels from the LM decision to the step record the view reads."""
    from app.common.policies import _info
    from evorag_core.policy.agent import PolicyDecision

    decision = PolicyDecision(Answer("Sable River"), -1.0, -2.0, -3.0, "prompt", "ANSWER: Sable River",
                              answer_source="p:mirrow")
    assert _info(decision)["answer_source"] == "p:mirrow"
    assert "answer_source" not in _info(PolicyDecision(Refuse(), -1.0, 0.0, -1.0, "prompt", "REFUSE"))
