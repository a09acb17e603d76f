"""Grounded follow-up queries (evorag_core/policy/queries.py): candidates come from the passages and the question,
filtered against repeats, copied passage lines and loops; the policy searches the best-scored one. The model tests
use a tiny random Llama (tests/tiny_model.py), so they are fast."""
from __future__ import annotations

from pathlib import Path

import pytest

import evorag_core.policy.agent as agent_module
from evorag_core.env.actions import Search
from evorag_core.config import PolicyConfig
from evorag_core.errors import ConfigError
from evorag_core.evidence.text import title_key, words
from evorag_core.policy.agent import LMPolicy
from evorag_core.lm.hf_backend import TransformersBackend
from evorag_core.policy.prompts import LABELS
from evorag_core.policy.queries import choose_queries, filter_reason, grounded_candidates, score_candidates
from evorag_core.env.state import AgentView, Hop
from evorag_core.types import Passage

QUESTION = "In which country was the engineer whose company designed the Eiffel Tower born?"
P1 = Passage("p1", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, designed by the company "
             "of the engineer Gustave Eiffel. Maurice Koechlin drew the first sketch.")
P2 = Passage("p2", "Champ de Mars", "The Champ de Mars is a large public green space in Paris near the Eiffel Tower, "
             "named after the Campus Martius in Rome.")
HOP = Hop(QUESTION, (P1, P2))
VIEW = AgentView(QUESTION, (HOP,), (), 2, 20)


def _allowed_words(view: AgentView) -> set[str]:
    return set(words(view.question)) | {w for p in view.passages for w in words(f"{p.title} {p.text}")}


def test_candidates_come_from_the_passages_and_the_question():
    """Bridge entities named in the passages but not the question (Gustave Eiffel, Maurice Koechlin, ...) lead the
    list, each with the question words no passage covers; every word of every candidate is the question's or a
    passage's; none repeats the question."""
    cands, filtered = grounded_candidates(VIEW, 300)
    texts = [c.text for c in cands]
    assert any(t.startswith("Gustave Eiffel") for t in texts), texts
    assert {c.source for c in cands} == {"bridge", "rewrite"}
    assert all(set(words(t)) <= _allowed_words(VIEW) for t in texts)
    assert texts[0].endswith("country born")  # the question words no passage covers ride along with the entity
    assert title_key(QUESTION) not in {title_key(t) for t in texts}
    assert sum(filtered.values()) == 0


def test_candidates_skip_earlier_queries_and_searched_entities():
    """An active query naming Gustave Eiffel and a dropped one naming Paris remove both entities (counted as
    repeats); no candidate equals an earlier query, active or dropped."""
    first, _ = grounded_candidates(VIEW, 300)
    assert first[0].text.startswith("Paris")
    view = AgentView(QUESTION, (HOP, Hop("Gustave Eiffel birthplace", (P2,))), (first[0].text,), 4, 20)
    cands, filtered = grounded_candidates(view, 300)
    earlier = {title_key(q) for q in (QUESTION, "Gustave Eiffel birthplace", first[0].text)}
    assert cands and not {title_key(c.text) for c in cands} & earlier
    bridges = [c.text for c in cands if c.source == "bridge"]
    assert bridges and not any(t.startswith(("Gustave", "Paris")) for t in bridges)
    assert filtered["repeat"] == 2


def test_filter_reasons():
    """A passage's first line copied out (last word cut) is a copy; a looping query is a loop; an earlier query
    (case and punctuation aside) is a repeat; a short entity query that occurs in a passage is fine."""
    passages = [P1]
    assert filter_reason("The Eiffel Tower is a wrought-iron lattice to", [QUESTION], passages) == "copy"
    assert filter_reason("William Connolley born 1964 in 1964 in 1964", [QUESTION], passages) == "loop"
    assert filter_reason("  gustave eiffel, BIRTHPLACE ", ["Gustave Eiffel birthplace"], passages) == "repeat"
    assert filter_reason("Gustave Eiffel", [QUESTION], passages) is None
    assert filter_reason(" ...", [QUESTION], passages) == "empty"


def test_copied_lines_in_the_passages_are_never_candidates():
    """A passage whose capitalised run is a long line still yields no candidate that copies five of its words."""
    long = Passage("p3", "Koechlin", "Maurice Koechlin Swiss Structural Engineer Emile Nouguier Stephen Sauvestre "
                   "were the three names on the patent.")
    view = AgentView(QUESTION, (Hop(QUESTION, (P1, long)),), (), 2, 20)
    cands, _ = grounded_candidates(view, 300)
    assert cands
    assert all(filter_reason(c.text, [QUESTION], view.passages) is None for c in cands)


# -- with a tiny random model ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_backend(tmp_path_factory) -> TransformersBackend:
    from tests.tiny_model import build_tiny_model

    folder = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", [QUESTION, P1.text, P2.text],
                              vocab_size=1024)
    return TransformersBackend(PolicyConfig(model=str(folder), threads=1, half_decode_rows=0, prefill_dtype="float32"),
                               Path(tmp_path_factory.mktemp("home")))


@pytest.fixture
def search_only(monkeypatch):
    """Only SEARCH allowed, so the tiny model's decision is a search whatever its label scores."""
    monkeypatch.setattr(agent_module, "allowed_actions", lambda view, max_searches=0: ("SEARCH",))


def test_greedy_query_is_the_best_scored_candidate(tiny_backend, search_only):
    policy = LMPolicy(tiny_backend, PolicyConfig(query_mode="grounded", query_score="mean", hop_gate=0))
    d = policy.act(VIEW)
    assert isinstance(d.action, Search) and d.query is not None
    listed = d.query["candidates"]
    assert d.action.query in {c["text"] for c in listed}
    best = max(listed, key=lambda c: c["score"])
    assert d.action.query == best["text"] and d.query["source"] == best["source"]
    scores = score_candidates(tiny_backend, d.prompt + LABELS["SEARCH"], [c["text"] for c in listed])
    assert [round(s, 4) for s in scores] == [c["score"] for c in listed]
    # the decision's log-prob is the completion's under the agent prompt, whichever candidate won
    assert d.logprob == pytest.approx(tiny_backend.sequence_logprob(d.prompt, d.completion), abs=1e-3)
    assert not {title_key(c["text"]) for c in listed} & {title_key(QUESTION)}


def test_sampled_siblings_stay_inside_the_candidate_pool(tiny_backend, search_only):
    policy = LMPolicy(tiny_backend, PolicyConfig(query_mode="grounded", hop_gate=0))
    sibs = policy.candidates(VIEW, k=6, temperature=1.0, seed=3)
    assert all(isinstance(d.action, Search) for d in sibs)
    for d in sibs:
        assert d.action.query in {c["text"] for c in d.query["candidates"]}
        assert filter_reason(d.action.query, [QUESTION], VIEW.passages) is None
    again = policy.candidates(VIEW, k=6, temperature=1.0, seed=3)
    assert [d.action.query for d in again] == [d.action.query for d in sibs]  # seeded


def test_free_mode_searches_the_generated_query(tiny_backend, search_only):
    """query_mode = "free": the argument is the greedy generation after "SEARCH:", with no query info."""
    policy = LMPolicy(tiny_backend, PolicyConfig(query_mode="free", hop_gate=0))
    d = policy.act(VIEW)
    gen = tiny_backend.generate(d.prompt + LABELS["SEARCH"], policy.cfg.max_query_tokens, stop=("\n",))[0]
    expected = " ".join(gen.text.split()) or QUESTION
    assert d.query is None and d.action == Search(expected)


def test_first_hop_and_no_passages_keep_generation(tiny_backend):
    """Before any passage there is nothing to ground in: choose_queries is not consulted."""
    policy = LMPolicy(tiny_backend, PolicyConfig(query_mode="grounded", first_query="generate"))
    d = policy.act(AgentView(QUESTION, (), (), 1, 20))
    assert isinstance(d.action, Search) and d.query is None


def test_every_candidate_filtered_keeps_the_generated_query(tiny_backend):
    """No passage-built candidate and the generated query a repeat: the row keeps its own text, reported."""
    view = AgentView("Who?", (Hop("Who?", (Passage("x", "x", "who is it"),)),), (), 2, 20)
    out = choose_queries(tiny_backend, view, "p", ["Who?"], 300, 0.0, 0)
    assert out == [("Who?", {"mode": "grounded", "fallback": "no_candidate", "filtered": {"repeat": 1},
                             "candidates": [], "source": "generated"})]


def test_query_mode_is_validated():
    with pytest.raises(ConfigError, match="query_mode"):
        LMPolicy(object(), PolicyConfig(query_mode="bridges"))


def test_pmi_score_subtracts_the_question_only_prompt(tiny_backend, search_only):
    """query_score = "pmi": each candidate's score is its mean token log-prob after the agent prompt minus the same
    after the question-only prompt, and the greedy query is the best by that score."""
    policy = LMPolicy(tiny_backend, PolicyConfig(query_mode="grounded", query_score="pmi", hop_gate=0))
    d = policy.act(VIEW)
    listed = d.query["candidates"]
    texts = [c["text"] for c in listed]
    base = policy.prompt(AgentView(QUESTION, (), (), 1, VIEW.t_max)) + LABELS["SEARCH"]
    pmi = [a - b for a, b in zip(score_candidates(tiny_backend, d.prompt + LABELS["SEARCH"], texts),
                                 score_candidates(tiny_backend, base, texts))]
    assert [round(s, 4) for s in pmi] == [c["score"] for c in listed]
    assert d.action.query == texts[max(range(len(pmi)), key=pmi.__getitem__)]
    with pytest.raises(ConfigError, match="query_score"):
        LMPolicy(tiny_backend, PolicyConfig(query_score="sum"))
