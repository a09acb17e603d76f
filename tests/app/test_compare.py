"""Compare (app/tabs/compare/view.py, app/tabs/compare/handlers.py): two episodes of one question aligned by step, graded, with
the first difference found; and the handler running base vs an adapter on the tiny model through real Services."""
from __future__ import annotations

import re

import pytest

from app.common.policies import BASE
from app.common.session import EpisodeSettings
from app.tabs.compare import view as cmp
from app.tabs.compare import shift as cs
from app.tabs.compare.handlers import compare_policies
from evorag_core.env.actions import Answer, Refuse, Search
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.types import Question
from tests.app.test_studio_activation import make_adapter, register, svc, tiny  # noqa: F401 - the tiny-model Services fixtures

Q = Question("q1", "demo", "Where was <Ansel> born?", ("Mirrow",), gold_pids=frozenset({"p1", "p2"}))


def _step(t: int, action, reward: float, passages=()) -> StepRecord:
    return StepRecord(t, action, tuple(passages), {}, {}, reward)


def _record(*steps: StepRecord, qid: str = "q1") -> EpisodeRecord:
    return EpisodeRecord("e", qid, "demo", Q.question, "discovery", "time-dynamic", "full", 8, 3, tuple(steps),
                         gold_pids=("p1", "p2"), gold_answers=Q.answers)


A = _record(_step(1, Search("Ansel Travine"), 0.2, ["p1", "x"]), _step(2, Answer("in Mirrow"), 0.5))
B = _record(_step(1, Search("ansel  TRAVINE"), 0.2, ["p1"]), _step(2, Search("Mirrow town"), 0.1, ["p2"]),
            _step(3, Answer("Mirrow"), 0.9))


def test_steps_are_aligned_by_t_and_the_first_difference_is_found():
    c = cmp.compare(Q, A, "base", B, "adapter r1")
    assert [row.t for row in c.steps] == [1, 2, 3]
    assert c.steps[0].same  # same action, argument equal up to case and spaces
    assert not c.steps[1].same_action and c.steps[2].a is None
    assert c.first_difference == 2
    assert c.return_diff == pytest.approx(1.2 - 0.7)


def test_both_outcomes_are_graded_with_the_gold_passages_found():
    c = cmp.compare(Q, A, "base", B, "adapter r1")
    assert (c.a.grade.verdict, c.a.grade.f1) == ("partial", pytest.approx(2 / 3))
    assert (c.b.grade.verdict, c.b.grade.em) == ("correct", 1.0)
    assert (c.a.gold_found, c.b.gold_found, c.b.gold_total) == (1, 2, 2)
    refused = cmp.compare(Q, A, "base", _record(_step(1, Refuse(), -1.0)), "r2")
    assert refused.b.outcome == "refused" and refused.b.grade.reason == "refused an answerable question"


def test_identical_episodes_have_no_difference_and_other_questions_are_refused():
    assert cmp.compare(Q, A, "x", A, "y").first_difference is None
    with pytest.raises(ValueError, match="not q1"):
        cmp.compare(Q, A, "x", _record(qid="q2"), "y")


def test_the_html_escapes_text_marks_rows_and_links_the_stored_episodes():
    html = cmp.comparison_html(cmp.compare(Q, A, "base <b>", B, "r1", ids=(7, 8)))
    assert "&lt;Ansel&gt;" in html and "base &lt;b&gt;" in html and "<b>base" not in html
    assert 'href="?episode=7"' in html and 'href="?episode=8"' in html
    assert re.findall(r'<tr class="(cmp-\w+)" data-t="(\d)"', html) == [("cmp-same", "1"), ("cmp-diff", "2"),
                                                                          ("cmp-diff", "3")]
    assert 'data-first-difference="2"' in html and html.count("first difference") == 1


def test_base_vs_an_adapter_runs_both_to_the_end_and_stores_both(svc, tmp_path):
    register(svc, "r1", make_adapter(svc.cfg, svc.cfg.policy.model, tmp_path / "r1", seed=3))
    settings = EpisodeSettings(question_id="demo-002", policy=BASE)
    statuses = list(compare_policies(svc, settings, "lm:r1"))
    assert all(not s.result for s in statuses[:-1]) and "Ran both" in statuses[-1].progress
    assert any("A · LM" in s.progress for s in statuses) and any("B · LM" in s.progress for s in statuses)
    html = statuses[-1].result
    ids = [int(i) for i in re.findall(r'href="\?episode=(\d+)"', html)]
    episodes = {e.id: e for e in svc.store().list_episodes()}
    assert len(ids) == 2 and all(episodes[i].status in ("finished", "truncated") for i in ids)
    assert [episodes[i].question_id for i in ids] == ["demo-002", "demo-002"]
    assert "adapter r1" in html and "Which is longer" in html
    # the chosen replies scored under both models (#46 item 7): base and a random adapter give different log-probs
    shift = re.findall(r'<tr data-t="(\d+)" data-side="([^"]+)">.*?<td class="num">(-?[\d.]+)</td><td class="num">'
                       r'(-?[\d.]+)</td><td class="num \w+">([+-][\d.]+)</td></tr>', html)
    steps = re.findall(r'<tr class="cmp-\w+" data-t="(\d+)">', html)
    assert shift and {int(t) for t, *_ in shift} == {int(t) for t in steps}
    assert all(float(a) < 0 and float(b) < 0 for _, _, a, b, _ in shift)  # log-probabilities
    assert all(abs(float(b) - float(a) - float(d)) < 2e-3 for _, _, a, b, d in shift)
    assert any(abs(float(d)) > 1e-3 for *_, d in shift)  # the adapter moved them
    assert 'id="evo-compare-shift-table"' in html and "Mean shift B − A over" in html


def _passage(pid: str):
    from evorag_core.types import Passage

    return Passage(pid, pid, f"text {pid}")


def test_the_same_reply_at_the_same_state_is_scored_once_and_the_rest_per_side():
    """A and B: t=1 the same SEARCH (up to the recorded completion text) -> one 'A = B' row; t=2 they differ -> an A
    and a B row; t=3 only B. Fake scorers: log P_A = -1 - len(reply) / 100, log P_B = -1 for every reply."""
    same = {"completion": "SEARCH: Ansel Travine"}
    a = _record(StepRecord(1, Search("Ansel Travine"), ("p1",), {}, {}, 0.2, info=same),
                _step(2, Answer("in Mirrow"), 0.5))
    b = _record(StepRecord(1, Search("Ansel Travine"), ("p1",), {}, {}, 0.2, info=same),
                _step(2, Search("Mirrow town"), 0.1, ["p2"]), _step(3, Answer("Mirrow"), 0.9))
    rows = cs.shift_rows(a, b, _passage)
    assert [(t, side, completion) for t, side, _, completion in rows] == [
        (1, "A = B", "SEARCH: Ansel Travine"), (2, "A", "ANSWER: in Mirrow"), (2, "B", "SEARCH: Mirrow town"),
        (3, "B", "ANSWER: Mirrow")]
    assert rows[3][2].chain[1].query == "Mirrow town"  # B's own state at t=3
    shifts = cs.score_shifts(rows, lambda pairs: [-1 - len(c) / 100 for _, c in pairs],
                             lambda pairs: [-1.0 for _ in pairs])
    assert shifts[0].shift == pytest.approx(len("SEARCH: Ansel Travine") / 100)
    html = cs.shift_html(shifts, "base <b>", "r1")
    assert html.count("<tr data-t=") == 4 and "base &lt;b&gt;" in html and 'class="num pos">+0.210<' in html
    mean = sum(s.shift for s in shifts) / 4
    assert f'data-mean="{mean:.6f}"' in html and "B makes them more likely" in html


def test_an_oracle_side_has_no_log_probabilities():
    html = cs.compare_shift(None, (), ("oracle", BASE), (A, B), ("oracle", "base"), lambda name: None)
    assert "need two language-model policies" in html and "<table" not in html


@pytest.mark.parametrize("a, b, message", [(BASE, BASE, "same policy"), ("script", BASE, "not 'script'"),
                                           (BASE, "", "both sides")])
def test_bad_choices_are_refused_before_anything_runs(svc, a, b, message):
    with pytest.raises(ValueError, match=message):
        next(compare_policies(svc, EpisodeSettings(policy=a), b))
