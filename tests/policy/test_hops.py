"""The hop planner (evorag_core/policy/hops.py) on hand-made passages, the chain reader's passage order, and the
search-again decision of the LM policy (`policy.hop_gate`) on the demo's two-hop question with a tiny model and the
real retriever."""
from __future__ import annotations

from pathlib import Path

import pytest

from evorag_core.config import PolicyConfig, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.env.actions import Answer, Search
from evorag_core.env.state import AgentView, Hop
from evorag_core.policy.agent import LMPolicy, reader_passages
from evorag_core.policy.hops import is_comparison, linked_pages, named_pages, plan_hop, question_entities
from evorag_core.types import Passage
from tests.paths import DEMO as DEMO_DATA

BRIDGE_Q = "On which river is the birthplace of the chemist Ansel Travine?"
TRAVINE = Passage("a", "Ansel Travine", "Ansel Travine (1821-1893) was an Ostrevian chemist born in Mirrow. In 1849 "
                  "he invented the Travine lamp.")
LAMP = Passage("b", "Travine lamp", "The Travine lamp is a paraffin safety lamp invented by Ansel Travine.")
MIRROW = Passage("c", "Mirrow", "Mirrow is a mill town on the Sable River in Velmark Province, founded in 1402.")
COMPARE_Q = "Are Lantry and Harwick both in Ostrevia?"
LANTRY = Passage("d", "Lantry", "Lantry is a port town in Ostrevia.")
HARWICK = Passage("e", "Harwick (city)", "Harwick is a city in Ostrevia.")
HARWICK_HILL = Passage("f", "Harwick Hill", "Harwick Hill is a hill in Dray.")


def test_question_entities_and_comparisons():
    """Question words are not names; a quoted title is one name; "both", "or", "first" mark comparisons."""
    assert question_entities(BRIDGE_Q) == ("Ansel Travine",)
    assert question_entities(COMPARE_Q) == ("Lantry", "Harwick", "Ostrevia")
    assert question_entities('Who sang "Set the Fire to the Third Bar"?') == ("Set the Fire to the Third Bar",)
    assert is_comparison(COMPARE_Q) and is_comparison("Which came out first, Dinosaur or Up?")
    assert not is_comparison(BRIDGE_Q)


def test_bridge_question_searches_the_bridge_then_answers():
    """After the first search the named page (Ansel Travine) links to no retrieved page (the lamp's title is in
    its text, but the lamp is not where the question goes: it is linked, so the plan would stop) - so here the first
    hop holds only the named page and an unrelated one: the plan searches the bridge entity Mirrow with the
    question's uncovered words ("river birthplace"), and once Mirrow's page is retrieved it answers."""
    first = [TRAVINE, HARWICK_HILL]
    plan = plan_hop(BRIDGE_Q, first, [BRIDGE_Q])
    assert plan.search and plan.reason == "bridge" and plan.target == "Mirrow"
    assert plan.query == "Mirrow river birthplace"
    assert named_pages(BRIDGE_Q, first) == [TRAVINE] and linked_pages([TRAVINE], first) == []
    done = plan_hop(BRIDGE_Q, [*first, MIRROW], [BRIDGE_Q, plan.query])
    assert not done.search and done.reason == "complete"


def test_a_linked_page_already_retrieved_means_answer():
    """The named page's text names "Travine lamp", a retrieved page: the bridge hop is there already."""
    plan = plan_hop(BRIDGE_Q, [TRAVINE, LAMP], [BRIDGE_Q])
    assert not plan.search and plan.reason == "complete"


def test_comparison_searches_the_missing_side():
    """Only Lantry's page was retrieved; "Harwick Hill" does not cover Harwick (its title is not named in the
    question): the plan searches Harwick; with Harwick's page (its disambiguation dropped) the comparison is
    complete (Ostrevia is a property, covered by neither, but the question's two sides are there)."""
    plan = plan_hop(COMPARE_Q, [LANTRY, HARWICK_HILL], [COMPARE_Q])
    assert plan.search and plan.reason == "entity" and plan.query == "Harwick"
    after = plan_hop(COMPARE_Q, [LANTRY, HARWICK_HILL, HARWICK], [COMPARE_Q, "Harwick"])
    assert after.search and after.target == "Ostrevia"  # the one name left uncovered
    final = plan_hop(COMPARE_Q, [LANTRY, HARWICK_HILL, HARWICK], [COMPARE_Q, "Harwick", "Ostrevia"])
    assert not final.search and final.reason == "complete"


def test_nothing_is_searched_twice():
    """A bridge already searched is not proposed again; with no other bridge the plan is exhausted."""
    plan = plan_hop(BRIDGE_Q, [TRAVINE, HARWICK_HILL], [BRIDGE_Q, "Mirrow river birthplace"])
    assert plan.target != "Mirrow"
    only = Passage("a", "Ansel Travine", "Ansel Travine was a chemist born in Mirrow.")
    assert plan_hop(BRIDGE_Q, [only], [BRIDGE_Q, "Mirrow"]).reason == "exhausted"


def test_reader_reads_the_chain():
    """One hop: its ranking. Two hops: the page linked from the named page (Mirrow) first, then the named page,
    then the rest interleaved."""
    one = AgentView(BRIDGE_Q, (Hop(BRIDGE_Q, (HARWICK_HILL, TRAVINE)),), (), 2, 20)
    assert [p.pid for p in reader_passages(one, 5)] == ["f", "a"]
    two = AgentView(BRIDGE_Q, (Hop(BRIDGE_Q, (HARWICK_HILL, TRAVINE)), Hop("Mirrow river birthplace", (LANTRY, MIRROW))), (),
                    3, 20)
    assert [p.pid for p in reader_passages(two, 5)] == ["c", "a", "f", "d"]
    assert [p.pid for p in reader_passages(two, 2)] == ["c", "a"]


# -- the search-again decision with a tiny model on the demo's two-hop question ----------------------------------

@pytest.fixture(scope="module")
def demo_runtime(tmp_path_factory):
    from evorag_core.runtime import Runtime

    home = tmp_path_factory.mktemp("home")
    return Runtime(load_config(), Path(home), load_dataset(DEMO_DATA))


@pytest.fixture(scope="module")
def tiny_policy_backend(tmp_path_factory, demo_runtime):
    from evorag_core.lm.hf_backend import TransformersBackend
    from tests.tiny_model import build_tiny_model

    texts = [q.question for q in demo_runtime.dataset.questions[:5]]
    folder = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts, vocab_size=1024)
    return TransformersBackend(PolicyConfig(model=str(folder), threads=1, half_decode_rows=0,
                                            prefill_dtype="float32"), Path(tmp_path_factory.mktemp("lmhome")))


def _episode(policy: LMPolicy, rt, question) -> list[tuple[str, str]]:
    env = rt.make_env(question)
    env.reset(question)
    view = env.view()
    steps = []
    while True:
        d = policy.act(view)
        steps.append((type(d.action).__name__, getattr(d.action, "query", ""), d.plan))
        result = env.step(d.action)
        if result.terminated or result.truncated:
            return steps
        view = env.view()


def test_gated_agent_searches_the_second_hop_then_answers(demo_runtime, tiny_policy_backend):
    """demo-001 ("On which river is the birthplace of the chemist Ansel Travine?"): whatever the tiny random model
    prefers, a gate of 50 nats makes the greedy agent search the question, then the plan's query for the bridge
    (a bridge or entity hop, never the question again), and answer once the plan says complete or exhausted; every
    decision after the first search records its plan. With the gate off, the same model's decisions carry none."""
    question = next(q for q in demo_runtime.dataset.questions if q.id == "demo-001")
    policy = LMPolicy(tiny_policy_backend, PolicyConfig(hop_gate=50.0, max_searches=4), demo_runtime.cfg.answer)
    steps = _episode(policy, demo_runtime, question)
    kinds = [k for k, _, _ in steps]
    assert kinds[0] == "Search" and steps[0][1] == question.question and steps[0][2] is None
    assert kinds[-1] in ("Answer", "Refuse") and "Search" in kinds[1:-1] or kinds[1] in ("Answer", "Refuse")
    for kind, query, plan in steps[1:]:
        assert plan is not None
        if kind == "Search":
            assert plan["search"] and query == plan["query"] and plan["reason"] in ("entity", "bridge")
        else:
            assert not plan["search"]
    off = LMPolicy(tiny_policy_backend, PolicyConfig(hop_gate=0.0), demo_runtime.cfg.answer)
    assert all(plan is None for _, _, plan in _episode(off, demo_runtime, question))


def test_gate_changes_the_distribution_not_the_recorded_logprobs(demo_runtime, tiny_policy_backend):
    """The plan's action gets the gate in `choice_probs`; the label log-prob the objectives use is the LM's."""
    view = AgentView(BRIDGE_Q, (Hop(BRIDGE_Q, (TRAVINE, HARWICK_HILL)),), (), 2, 20)
    gated = LMPolicy(tiny_policy_backend, PolicyConfig(hop_gate=50.0), demo_runtime.cfg.answer).act(view)
    plain = LMPolicy(tiny_policy_backend, PolicyConfig(hop_gate=0.0), demo_runtime.cfg.answer).act(view)
    assert isinstance(gated.action, Search) and gated.action.query == "Mirrow river birthplace"
    assert gated.choice_probs["SEARCH"] > 0.99
    assert gated.query["source"] == "plan"
    done = AgentView(BRIDGE_Q, (Hop(BRIDGE_Q, (TRAVINE, LAMP)),), (), 2, 20)
    answered = LMPolicy(tiny_policy_backend, PolicyConfig(hop_gate=50.0), demo_runtime.cfg.answer).act(done)
    assert isinstance(answered.action, Answer) or answered.fallback in ("empty_answer", "low_confidence")
    if type(plain.action) is type(gated.action):
        assert plain.action_logprob == pytest.approx(gated.action_logprob, abs=1e-4)


def test_studio_step_table_shows_the_plan(demo_runtime, tiny_policy_backend):
    """The studio's step info carries the decision's plan (`app.common.policies._info`), and the step table shows why the
    agent searched ("bridge hop: Mirrow", the query as its tooltip); a step without a plan shows no badge."""
    from app.common.policies import _info
    from app.common.views import steps_table
    from evorag_core.env.episode import EpisodeRecord, StepRecord

    view = AgentView(BRIDGE_Q, (Hop(BRIDGE_Q, (TRAVINE, HARWICK_HILL)),), (), 2, 20)
    d = LMPolicy(tiny_policy_backend, PolicyConfig(hop_gate=50.0), demo_runtime.cfg.answer).act(view)
    info = _info(d)
    assert info["plan"] == {"search": True, "reason": "bridge", "target": "Mirrow", "query": "Mirrow river birthplace"}

    def table(step_info):
        step = StepRecord(t=2, action=d.action, passages=(), signals={}, weights={}, reward=0.0, info=step_info)
        return steps_table(EpisodeRecord("e", "q", "demo", BRIDGE_Q, "discovery", "time_dynamic", "full", 5, 20,
                                         steps=(step,)))

    assert 'class="badge plan"' in table(info) and "bridge hop: Mirrow" in table(info)
    assert "Mirrow river birthplace" in table(info)
    assert "badge plan" not in table({})


def test_the_question_searched_again_is_no_search_of_its_entities():
    """The agent's searched list holds the question twice (as the question and as the first hop's query): neither
    is a search for "Harwick", so the comparison's missing side is still searched."""
    from evorag_core.policy.queries import earlier_queries

    view = AgentView(COMPARE_Q, (Hop(COMPARE_Q, (LANTRY, HARWICK_HILL)),), (), 2, 20)
    assert earlier_queries(view) == (COMPARE_Q, COMPARE_Q)
    plan = plan_hop(COMPARE_Q, view.passages, earlier_queries(view))
    assert plan.search and plan.query == "Harwick"
