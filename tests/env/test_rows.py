"""An episode record as store rows (`evorag_core.env.rows`) and the step info every policy records
(`evorag_core.env.episode.step_info`)."""
from __future__ import annotations

import pytest

from evorag_core.env.actions import Answer, Backtrack, Refuse, Search
from evorag_core.env.episode import EpisodeRecord, StepRecord, step_info
from evorag_core.env.judges import Verdict
from evorag_core.env.rows import episode_grade, episode_outcome, store_step, store_steps, verdict_name
from evorag_core.store import Outcome, Sibling, Step
from evorag_core.types import Question


def _record(*steps: StepRecord, golds=("Sable River",)) -> EpisodeRecord:
    return EpisodeRecord("e1", "demo-001", "demo", "Where?", "discovery", "time-dynamic", "full", 20, 5,
                         steps=steps, gold_answers=golds)


def _step(t, action, **kw) -> StepRecord:
    return StepRecord(t, action, kw.pop("passages", ()), {"ret": 1.0}, {"beta": 2.0}, kw.pop("reward", 0.5), **kw)


def test_steps_become_rows_with_their_argument_verdict_actor_and_siblings():
    """SEARCH keeps its query, ANSWER its answer, BACKTRACK/REFUSE none; a verdict by name; a person's step keeps
    who acted; siblings go on the step of their state (t = 2 here), none elsewhere."""
    sib = Sibling("REFUSE", None, -1.5, 0.25)
    rec = _record(_step(1, Search("Mirrow"), passages=("p:mirrow",)), _step(2, Backtrack()),
                  _step(3, Refuse(), verdict=Verdict(False, "gold"), info={"actor": "human", "annotator": "ann"}))
    rows = store_steps(rec, {2: (sib,)})
    assert rows[0] == Step(1, "SEARCH", "Mirrow", ("p:mirrow",), {"ret": 1.0}, {"beta": 2.0}, 0.5)
    assert (rows[1].action, rows[1].argument, rows[1].siblings) == ("BACKTRACK", None, (sib,))
    assert (rows[2].judge_verdict, rows[2].actor, rows[2].annotator) == ("unanswerable", "human", "ann")
    assert store_step(_step(4, Answer("Sable River"))).argument == "Sable River"
    assert (verdict_name(True), verdict_name(False)) == ("answerable", "unanswerable")


def test_the_outcome_is_graded_against_the_question_or_the_records_gold():
    """ANSWER 'the Sable' vs 'Sable River': EM 0, F1 2/3 (P 1, R 1/2). A REFUSE on an unanswerable question: EM 1,
    F1 1; the same REFUSE graded by the record alone (as answerable): EM 0, F1 0. A running episode: no grade."""
    answered = _record(_step(1, Answer("the Sable")))
    out = episode_outcome(answered)
    assert (out.answer, out.em, out.refused) == ("the Sable", 0.0, False) and out.f1 == pytest.approx(2 / 3)
    refused = _record(_step(1, Refuse()), golds=("1845",))
    unanswerable = Question("demo-004", "demo", "When?", ("1845",), "unanswerable")
    assert episode_outcome(refused, unanswerable) == Outcome(None, 1.0, 1.0, True)
    assert episode_outcome(refused) == Outcome(None, 0.0, 0.0, True)
    assert episode_grade(None, _record(_step(1, Search("x")))) is None
    assert episode_outcome(_record(_step(1, Answer("x")), golds=())) == Outcome("x", None, None, False)


class _Decision:
    logprob = -2
    completion = "ANSWER: Sable River"
    fallback = None
    answer_source = "p:mirrow"


def test_step_info_of_a_decision_and_of_a_persons_step():
    """A decision: its log-prob as a float (-2 -> -2.0), its completion and the notes it has (here the answer source;
    no fallback); extra keys after. A person's step: only what is given."""
    assert step_info(_Decision(), adapter="r3") == {"logprob": -2.0, "completion": "ANSWER: Sable River",
                                                    "answer_source": "p:mirrow", "adapter": "r3"}
    assert step_info(actor="human", annotator="ann") == {"actor": "human", "annotator": "ann"}
