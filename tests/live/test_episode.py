"""The live episode (`evorag_core.live.episode.LiveEpisode`) driven without the studio: the demo data, its retrieval
indexes and a real SQLite store; the oracle and a script as policies (no language model).

demo-001 ("On which river is the birthplace of the chemist Ansel Travine?", gold answer Sable River): the oracle's
plan is SEARCH 'Ansel Travine', SEARCH 'Mirrow', ANSWER 'Sable River'. demo-004 is unanswerable (REFUSE is right).
A REFUSE under an override to "unanswerable" has ref = +1 (insufficient evidence), under "answerable" ref = -1.
"""
from __future__ import annotations

import pytest

from evorag_core.config import load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.env.actions import Answer, Refuse, Search, action_to_dict
from evorag_core.errors import EnvStateError
from evorag_core.live.episode import Candidate, LiveEpisode, LivePolicy, free_question
from evorag_core.methods.oracle import ORACLE_LABEL, OraclePolicy
from evorag_core.methods.script import ScriptPolicy, load_script
from evorag_core.runtime import Runtime
from evorag_core.store import open_store
from tests.paths import DEMO


@pytest.fixture(scope="module")
def runtime(session_home) -> Runtime:
    return Runtime(load_config(), session_home, load_dataset(DEMO))


@pytest.fixture()
def store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'live.db'}")
    yield store
    store.close()


def _oracle() -> LivePolicy:
    return LivePolicy("oracle", ORACLE_LABEL, OraclePolicy())


def _open(runtime, qid: str, policy: LivePolicy, store=None, **kw) -> LiveEpisode:
    q = runtime.dataset.get(qid)
    return LiveEpisode.open(runtime, q, policy, store, stage="discovery", schedule="time-dynamic", preset="full", **kw)


def _names(steps) -> list[str]:
    return [s.action if isinstance(s.action, str) else action_to_dict(s.action)["action"] for s in steps]


def test_stepping_the_oracle_to_its_answer_writes_the_episode_step_by_step(runtime, store):
    """Three steps (SEARCH, SEARCH, ANSWER 'Sable River'): three step rows as the policy's, the return the record's,
    and the outcome graded EM 1, F1 1 (the exact gold answer)."""
    ep = _open(runtime, "demo-001", _oracle(), store)
    assert store.get_episode(ep.db_id).status == "running"
    while not ep.done:
        ep.step()
    assert _names(ep.record.steps) == ["SEARCH", "SEARCH", "ANSWER"] and ep.record.answer == "Sable River"
    assert len(ep.step_seconds) == 3
    row = store.get_episode(ep.db_id)
    assert (row.status, row.source, row.policy, row.n_steps) == ("finished", "studio", ORACLE_LABEL, 3)
    assert _names(row.steps) == ["SEARCH", "SEARCH", "ANSWER"] and {s.actor for s in row.steps} == {"policy"}
    assert row.steps[0].argument == "Ansel Travine" and row.steps[-1].argument == "Sable River"
    assert (row.answer, row.em, row.f1, row.refused) == ("Sable River", 1.0, 1.0, False)
    assert row.total_return == pytest.approx(ep.record.total_return)
    with pytest.raises(EnvStateError, match="has ended"):
        ep.step()


def test_a_proposal_is_asked_on_a_copy_of_a_plan_policy_and_the_step_still_follows_the_plan(runtime):
    ep = _open(runtime, "demo-001", _oracle())
    proposal = ep.propose()
    assert (proposal.t, proposal.action, proposal.completion) == (1, Search("Ansel Travine"), "SEARCH: Ansel Travine")
    assert proposal.live is False and proposal.prompt is None  # the oracle: asked through a copy, no prompt
    assert ep.propose() is proposal  # once per state
    assert ep.step().action == Search("Ansel Travine") and ep.proposal is None


def test_a_person_refusing_in_the_policys_place_is_stored_as_a_human_step(runtime, store):
    """REFUSE at t = 1 on the answerable demo-001: a human step (who, the policy's proposal), no correction pair (the
    oracle has no prompt), the gold judge's verdict recorded, the outcome wrong: EM 0, F1 0, refused."""
    ep = _open(runtime, "demo-001", _oracle(), store)
    step, correction = ep.act_as_human(Refuse(), "ann")
    assert correction is None and ep.done
    assert dict(step.info) == {"actor": "human", "annotator": "ann", "proposal": "SEARCH: Ansel Travine"}
    row = store.get_episode(ep.db_id)
    assert (row.steps[0].actor, row.steps[0].annotator, row.steps[0].action) == ("human", "ann", "REFUSE")
    assert row.steps[0].judge_verdict == "unanswerable"  # nothing retrieved yet: the gold judge finds it insufficient
    assert [(j.judge, j.verdict) for j in store.judgments(ep.db_id, 1)] == [("gold", "unanswerable")]
    assert (row.answer, row.em, row.f1, row.refused) == (None, 0.0, 0.0, True)


def test_an_override_rescores_the_step_and_the_stored_return(runtime, store):
    """The human REFUSE at t = 1 (the gold judge: insufficient, ref = +1) judged 'answerable' by a person: ref becomes
    -1, R_t and the return follow, in the page's record and in the store alike."""
    ep = _open(runtime, "demo-001", _oracle(), store)
    ep.act_as_human(Refuse(), "ann")
    before = ep.record.total_return
    assert ep.record.steps[0].signals["ref"] == 1.0
    step = ep.override(1, True, "bob")
    assert step.signals["ref"] == -1.0 and step.verdict.judge == "human"
    assert ep.record.total_return != before
    row = store.get_episode(ep.db_id)
    assert row.steps[0].signals["ref"] == -1.0 and row.steps[0].reward == pytest.approx(step.reward)
    assert row.total_return == pytest.approx(ep.record.total_return)
    with pytest.raises(ValueError, match="no judge verdict"):
        ep.override(2, True, "bob")


def test_refusing_an_unanswerable_question_is_graded_correct(runtime, store):
    ep = _open(runtime, "demo-004", _oracle(), store)
    ep.act_as_human(Refuse(), "ann")
    row = store.get_episode(ep.db_id)
    assert (row.em, row.f1, row.refused) == (1.0, 1.0, True)


def test_a_typed_question_has_no_grade(runtime, store):
    q = free_question("  Where is   Mirrow? ", "demo")
    assert q.question == "Where is Mirrow?" and q.answers == () and q.id.startswith("free-")
    script = LivePolicy("script", "script", ScriptPolicy(load_script([{"action": "ANSWER", "answer": "Velmark"}])))
    ep = LiveEpisode.open(runtime, q, script, store, stage="discovery", schedule="time-dynamic", preset="full",
                          free=True)
    ep.step()
    row = store.get_episode(ep.db_id)
    assert (row.answer, row.em, row.f1) == ("Velmark", None, None)


def test_scored_siblings_are_stored_on_the_step_taken_at_their_state(runtime, store):
    """Two candidates at t = 1, each continued by the oracle for at most 1 step; the environment is restored (still
    at t = 1), and the next step's row carries both siblings with their branch returns."""
    ep = _open(runtime, "demo-001", _oracle(), store)
    ep.set_candidates([Candidate(Search("Ansel Travine"), -0.5, "SEARCH: Ansel Travine"), Candidate(Refuse(), -2.0)])
    progress = []
    assert ep.score_candidates(1, lambda done, total: progress.append((done, total)))
    assert progress == [(1, 2), (2, 2)] and ep.env.view().t == 1 and not ep.done
    returns = [c["branch_return"] for c in ep.candidates]
    assert all(isinstance(r, float) for r in returns) and ep.candidates[1]["branch_steps"] == 1
    ep.step()
    siblings = store.get_episode(ep.db_id).steps[0].siblings
    assert [(s.action, s.argument, s.logprob) for s in siblings] == [("SEARCH", "Ansel Travine", -0.5),
                                                                     ("REFUSE", None, -2.0)]
    assert [s.branch_return for s in siblings] == pytest.approx(returns)
    assert ep.candidates == []  # cleared once the state moved on


def test_a_store_failure_is_a_note_not_an_error(runtime, store, monkeypatch):
    from evorag_core.errors import StoreError

    ep = _open(runtime, "demo-001", _oracle(), store)

    def fail(*args, **kwargs):
        raise StoreError("the database is locked")

    monkeypatch.setattr(store, "add_step", fail)
    assert ep.step().t == 1  # the episode goes on
    notes = ep.take_notes()
    assert notes == ["not saved to the store: the database is locked"] and ep.take_notes() == []
