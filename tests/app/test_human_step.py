"""A person acting in the policy's place (issue #24 item 2) without a browser: real demo data, retrieval indexes and
a real SQLite store; the LM cases run the tiny 2-layer random Llama as the studio's policy model.

demo-001 ("On which river is the birthplace of the chemist Ansel Travine?", gold answer Sable River): the oracle's
plan is SEARCH 'Ansel Travine', SEARCH 'Mirrow', ANSWER 'Sable River' (its gold titles, then the answer).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.paths import DEMO
from evorag_core.live.human import Correction, Proposal, completion_of, correction_metadata, correction_of, human_action
from app.common.services import Services
from app.common.session import EpisodeSettings
from app.tabs.episode import handlers as episode_handlers, human_handlers
from app.tabs.training import handlers as training_handlers
from evorag_core.env.actions import Answer, Backtrack, Refuse, Search, action_to_dict
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import ActionParseError, EnvStateError



@pytest.fixture(scope="module")
def svc(session_home, tmp_path_factory) -> Services:
    db = tmp_path_factory.mktemp("human_db") / "studio.db"
    services = Services(load_config(), session_home, data_path=DEMO, db_url=f"sqlite:///{db}")
    yield services
    services.close()


def _names(record) -> list[str]:
    return [action_to_dict(s.action)["action"] for s in record.steps]


# --- the pure parts --------------------------------------------------------------------------------------------


def test_the_action_a_person_chose_is_parsed_with_readable_errors():
    assert human_action("search", "  Ansel   Travine ") == Search("Ansel Travine")
    assert human_action("ANSWER", "Sable River") == Answer("Sable River")
    assert human_action("BACKTRACK", "ignored") == Backtrack() and human_action("REFUSE", None) == Refuse()
    with pytest.raises(ActionParseError, match="SEARCH needs a query"):
        human_action("SEARCH", "   ")
    with pytest.raises(ActionParseError, match="ANSWER needs an answer"):
        human_action("ANSWER", "")
    with pytest.raises(ActionParseError, match="choose an action"):
        human_action(None, "x")


def test_completions_are_written_as_the_policy_writes_its_replies():
    """The pair's chosen side must be what DPO would score for the policy: `completion_text` of its prompts."""
    from evorag_core.policy.prompts import completion_text

    for action in (Search("Mirrow"), Answer("Sable River"), Backtrack(), Refuse()):
        act = action_to_dict(action)
        assert completion_of(action) == completion_text(act["action"], act.get("query", act.get("answer", "")))
    assert completion_of(Search("x"), {"completion": "SEARCH: x "}) == "SEARCH: x "  # the policy's own text wins


def test_a_correction_prefers_the_persons_action_over_a_different_proposal():
    proposal = Proposal(3, Answer("Paris"), {"logprob": -1.5}, "ANSWER: Paris", "<prompt at t=3>", True)
    corr = correction_of(proposal, Search("Sable River source"))
    assert corr == Correction(3, "<prompt at t=3>", "SEARCH: Sable River source", "ANSWER: Paris", Answer("Paris"),
                              Search("Sable River source"), -1.5)
    meta = correction_metadata(corr, episode="e1", question_id="demo-001")
    assert meta == {"episode": "e1", "question_id": "demo-001", "t": 3, "proposal": {"action": "ANSWER", "answer": "Paris"},
                    "human": {"action": "SEARCH", "query": "Sable River source"}, "proposal_logprob": -1.5}
    assert correction_of(proposal, Answer("Paris")) is None  # the same action: nothing to prefer
    with pytest.raises(ValueError, match="language-model policy"):
        correction_of(Proposal(1, Refuse(), {}, "REFUSE", None, False), Search("x"))


# --- the session: oracle and script ----------------------------------------------------------------------------


def test_a_human_search_mid_episode_then_the_oracle_continues_and_finishes(svc):
    """t = 1 the oracle searches 'Ansel Travine'; at t = 2 it proposes SEARCH 'Mirrow', the person searches 'Sable
    River' instead; Run to end hands back: the oracle (its plan not consumed by the proposal) searches 'Mirrow' and
    answers. The trace and the store say who took each step."""
    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(question_id="demo-001", policy="oracle"))
    assert view.running and "Agent's proposal" in view.proposal
    view, sess = episode_handlers.step_episode(sess)
    view, name, arg = human_handlers.propose_action(sess)
    assert (name, arg) == ("SEARCH", "Mirrow") and "SEARCH: Mirrow" in view.proposal
    view, sess, pair_id = human_handlers.human_step(sess, svc, "SEARCH", "Sable River", "ann")
    assert pair_id is None
    assert "you took SEARCH; the policy had proposed SEARCH: Mirrow" in view.message
    human = sess.record.steps[1]
    assert human.action == Search("Sable River")
    assert (human.info["actor"], human.info["annotator"], human.info["proposal"]) == ("human", "ann", "SEARCH: Mirrow")
    assert view.steps.count('class="badge human">human</span> ann') == 1 and view.steps.count(">agent<") == 1
    view, sess = episode_handlers.run_to_end(sess)
    assert _names(sess.record) == ["SEARCH", "SEARCH", "SEARCH", "ANSWER"]
    assert sess.record.steps[2].action == Search("Mirrow") and sess.record.answer == "Sable River"
    assert sess.done and not view.running and view.proposal == ""
    stored = svc.store().get_episode(sess.db_id)
    assert [(s.actor, s.annotator) for s in stored.steps] == [("policy", None), ("human", "ann"), ("policy", None),
                                                               ("policy", None)]
    assert stored.status == "finished"
    with pytest.raises(EnvStateError):
        human_handlers.human_step(sess, svc, "REFUSE", "", "ann")


def test_the_next_step_takes_the_proposal_once(svc):
    """Asking for the proposal does not move the policy on: the oracle's Step after it is the proposal, and the
    step after that is the plan's next action (nothing skipped, nothing repeated)."""
    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(question_id="demo-001", policy="oracle"))
    for _ in range(2):
        human_handlers.propose_action(sess)
    assert sess.proposal.action == Search("Ansel Travine") and not sess.proposal.live
    episode_handlers.step_episode(sess)
    episode_handlers.step_episode(sess)
    assert [s.action for s in sess.record.steps] == [Search("Ansel Travine"), Search("Mirrow")]
    assert all("actor" not in s.info for s in sess.record.steps)


def test_the_script_policy_still_plays_and_continues_after_a_human_step(svc):
    """Script SEARCH 'Ansel Travine', REFUSE: the person backtracks first; the script then plays from its start."""
    script = json.dumps([{"action": "SEARCH", "query": "Ansel Travine"}, {"action": "REFUSE"}])
    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(question_id="demo-001", policy="script", script=script))
    view, sess, _ = human_handlers.human_step(sess, svc, "SEARCH", "Mirrow", "")
    assert sess.record.steps[0].info["annotator"] == "anonymous"
    view, sess = episode_handlers.run_to_end(sess)
    assert _names(sess.record) == ["SEARCH", "SEARCH", "REFUSE"]
    assert sess.record.steps[1].action == Search("Ansel Travine") and sess.record.refused


def test_a_correction_pair_needs_an_lm_and_is_refused_before_the_step(svc):
    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(question_id="demo-001", policy="oracle"))
    with pytest.raises(ValueError, match="language-model policy"):
        human_handlers.human_step(sess, svc, "REFUSE", "", "ann", queue=True)
    assert sess.record.steps == ()  # nothing was stepped
    with pytest.raises(ActionParseError, match="SEARCH needs a query"):
        human_handlers.human_step(sess, svc, "SEARCH", "", "ann")


def test_typed_queries_answers_and_names_over_the_limit_are_refused_before_the_step(svc):
    """#44 item 7: a 1 MB query or answer, and a 1 MB annotator name, were stored as a human step. With
    studio.max_question_chars = 2000, 2,001 characters are refused with the limit in the message and nothing is
    stepped; 2,000 are taken."""
    limit = svc.cfg.studio.max_question_chars
    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(question_id="demo-001", policy="oracle"))
    with pytest.raises(ValueError, match="the typed query or answer has 2,001 characters; texts typed in the "
                                         "studio are at most 2,000 characters long"):
        human_handlers.human_step(sess, svc, "SEARCH", "q" * (limit + 1), "ann")
    with pytest.raises(ValueError, match="the typed query or answer has 1,000,000 characters"):
        human_handlers.human_step(sess, svc, "ANSWER", "a" * 1_000_000, "ann")
    with pytest.raises(ValueError, match="the annotator name has 1,000,000 characters"):
        human_handlers.human_step(sess, svc, "REFUSE", "", "n" * 1_000_000)
    assert sess.record.steps == ()
    view, sess, _ = human_handlers.human_step(sess, svc, "SEARCH", "q" * limit, "n" * limit)
    assert sess.record.steps[0].action == Search("q" * limit) and sess.record.steps[0].info["annotator"] == "n" * limit


def test_header_and_episode_tab_show_the_pair_counts(svc):
    store = svc.store()
    before = store.count_pairs("status")
    store.add_pair("p", "SEARCH: a", "SEARCH: b", source="human")
    header = training_handlers.header_status(svc)
    queued = before.get("queued", 0) + 1
    assert f'<b data-status="queued">{queued}</b> queued' in header
    assert '<b data-status="claimed">0</b> claimed' in header and "consumed" in header
    assert 'id="evo-header-rounds">0 running, 0 queued' in header
    assert f'data-n="{queued}"' in human_handlers.pairs_count_html(svc)


def test_round_ended_clears_the_launch_message_only_once_the_round_is_over(svc):
    from app.tabs.training.handlers import round_ended

    store = svc.store()
    rid = store.enqueue_round("dpo", {"pairs": 1})
    assert not round_ended(svc, rid)
    store.cancel_round(rid)
    assert round_ended(svc, rid) and round_ended(svc, 10_000)


# --- the language-model policy (tiny random Llama) -------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture()
def lm_svc(tiny, session_home, tmp_path):
    import torch

    torch.set_num_threads(1)
    cfg = apply_overrides(load_config(), {"policy.model": str(tiny), "policy.device": "cpu", "policy.threads": 1,
                                          "env.t_max": 4, "policy.max_answer_tokens": 4})
    services = Services(cfg, session_home, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    yield services
    services.close()


@pytest.mark.slow
def test_lm_human_correction_pair_has_the_prompt_the_policy_saw(lm_svc):
    """Tiny LM on demo-001: at t = 1 the person answers 'Sable River' instead of the LM's proposal (t = 1 allows only
    SEARCH: no evidence yet). The queued pair: source human-correction, prompt = the LM's prompt at t = 1 (ChatML,
    ending with the assistant opener), chosen 'ANSWER: Sable River', rejected = the LM's completion. The LM then
    continues from t = 2 and the episode ends."""
    settings = EpisodeSettings(question_id="demo-001", policy="lm:base")
    assert human_handlers.loading_note(lm_svc, settings).startswith("loading the policy model")
    view, sess = episode_handlers.start_episode(lm_svc, settings, "loading the policy model")
    assert "loading the policy model" in view.message and " took " in view.message
    assert human_handlers.loading_note(lm_svc, settings) == ""
    prompt = sess.policy.policy.lm.prompt(sess.env.view())
    view, name, arg = human_handlers.propose_action(sess)
    assert name == "SEARCH" and sess.proposal.live and sess.proposal.prompt == prompt
    proposal = sess.proposal.completion
    view, sess, pair_id = human_handlers.human_step(sess, lm_svc, "ANSWER", "Sable River", "ann", queue=True)
    assert pair_id is not None and f"Queued human-correction pair #{pair_id}" in view.message
    pair = lm_svc.store().get_pair(pair_id)
    assert (pair.source, pair.annotator, pair.status, pair.stage) == ("human-correction", "ann", "queued", "discovery")
    assert pair.prompt == prompt and pair.prompt.endswith("<|im_start|>assistant\n")
    assert (pair.chosen, pair.rejected) == ("ANSWER: Sable River", proposal)
    assert pair.metadata["t"] == 1 and pair.metadata["question_id"] == "demo-001"
    assert sess.done and sess.record.answer == "Sable River"  # ANSWER ends the episode
    assert f'data-n="1"' in human_handlers.pairs_count_html(lm_svc)

    view, sess = episode_handlers.start_episode(lm_svc, settings)
    proposal = sess.propose()
    act = action_to_dict(proposal.action)
    view, sess, pair_id = human_handlers.human_step(sess, lm_svc, act["action"], act.get("query", ""), "ann", queue=True)
    assert pair_id is None and "no correction pair" in view.message  # the person did what the LM proposed
    view, sess = episode_handlers.run_to_end(sess)
    assert sess.done and sess.record.steps[0].info["actor"] == "human"
    assert all("actor" not in s.info for s in sess.record.steps[1:])


@pytest.mark.slow
def test_a_reset_says_which_adapter_it_loads(lm_svc, tmp_path):
    from app.common.policies import LIVE
    from tests.app.test_studio_activation import make_adapter, register

    register(lm_svc, "r3", make_adapter(lm_svc.cfg, lm_svc.cfg.policy.model, tmp_path / "r3", 3))
    training_handlers.activate_adapter(lm_svc, "r3")
    episode_handlers.start_episode(lm_svc, EpisodeSettings(question_id="demo-001", policy="lm:base"))
    settings = EpisodeSettings(question_id="demo-001", policy=LIVE)
    note = human_handlers.loading_note(lm_svc, settings)
    assert note == "loading adapter r3 into the policy model…"
    view, sess = episode_handlers.start_episode(lm_svc, settings, note)
    assert sess.policy.adapter == "r3" and "loading adapter r3 into the policy model took" in view.message
    assert human_handlers.loading_note(lm_svc, settings) == ""
