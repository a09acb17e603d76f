"""The agent policy (allowed actions, the prompt, decisions, answers, ARENA answers, fallbacks) and the LLM judge.

Slow tests run the REAL embedded SmolLM2-135M-Instruct through the `lm_home` / `backend` fixtures of tests/conftest.py
(the GGUF is converted once per session).
"""
from __future__ import annotations

import math

import pytest

from evorag_core.env.actions import Answer, Backtrack, Refuse, Search
from evorag_core.config import AnswerConfig, PolicyConfig
from evorag_core.errors import ConfigError
from evorag_core.policy.llm_judge import LLMSufficiencyJudge
from evorag_core.policy.agent import LMPolicy, allowed_actions
from evorag_core.policy.agent import reader_passages
from evorag_core.policy.prompts import LABELS, render_passage, render_user
from evorag_core.env.state import AgentView, Hop
from evorag_core.types import Passage

P1 = Passage("p1", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.")
P2 = Passage("p2", "Gustave Eiffel", "Gustave Eiffel was a French civil engineer born in Dijon in 1832.")
QUESTION = "Where was the engineer whose company designed the Eiffel Tower born?"


# -- fast tests: no language model ---------------------------------------------------------------------------

def test_allowed_actions_constraints():
    """t=1, nothing retrieved: only SEARCH. With passages: all four. Last step: ANSWER/REFUSE only."""
    assert allowed_actions(AgentView(QUESTION, (), (), 1, 5)) == ("SEARCH",)
    hop = Hop("Eiffel Tower", (P1,))
    assert allowed_actions(AgentView(QUESTION, (hop,), (), 2, 5)) == ("SEARCH", "BACKTRACK", "ANSWER", "REFUSE")
    assert allowed_actions(AgentView(QUESTION, (Hop("x", ()),), (), 2, 5)) == ("SEARCH", "BACKTRACK")
    assert allowed_actions(AgentView(QUESTION, (hop,), (), 5, 5)) == ("ANSWER", "REFUSE")
    assert allowed_actions(AgentView(QUESTION, (), (), 5, 5)) == ("ANSWER", "REFUSE")


def test_search_budget_counts_active_and_dropped_searches():
    """Budget 2: one active + one dropped search exhaust it (ANSWER/REFUSE only, even at t=3 of 20); one search
    leaves all four; budget 0 means none."""
    hop = Hop("Eiffel Tower", (P1,))
    assert allowed_actions(AgentView(QUESTION, (hop,), ("first try",), 3, 20), 2) == ("ANSWER", "REFUSE")
    assert allowed_actions(AgentView(QUESTION, (hop,), (), 2, 20), 2) == ("SEARCH", "BACKTRACK", "ANSWER", "REFUSE")
    assert allowed_actions(AgentView(QUESTION, (hop, hop), ("a", "b"), 5, 20), 0) == (
        "SEARCH", "BACKTRACK", "ANSWER", "REFUSE")


def test_reader_passages_interleave_hop_rankings():
    """Hops [P1, P2] and [P3, P1]: interleaved P1 (hop 1 #1), P3 (hop 2 #1), P2 (hop 1 #2), P1 again skipped;
    limit 2 keeps P1, P3; limit 0 keeps all."""
    p3 = Passage("p3", "Dijon", "Dijon is a city in eastern France.")
    view = AgentView(QUESTION, (Hop("a", (P1, P2)), Hop("b", (p3, P1))), (), 3, 6)
    assert [p.pid for p in reader_passages(view, 0)] == ["p1", "p3", "p2"]
    assert [p.pid for p in reader_passages(view, 2)] == ["p1", "p3"]
    with pytest.raises(ConfigError):
        LMPolicy(object(), PolicyConfig(answer_with="oracle"))


def test_prompt_layout_numbers_passages_and_cuts_text():
    """Passages numbered across hops, repeats referenced, text cut at a word boundary; step line last."""
    assert render_passage(3, P1, 30) == "[3] Eiffel Tower: The Eiffel Tower is a..."
    view = AgentView(QUESTION, (Hop("Eiffel Tower", (P1,)), Hop("Gustave Eiffel", (P2, P1))), ("old query",), 3, 20)
    text = render_user(view, 300)
    lines = text.splitlines()
    assert lines[0] == f"Question: {QUESTION}"
    assert lines[1:3] == ["Search 1: Eiffel Tower", "[1] Eiffel Tower: " + P1.text]
    assert lines[4] == "[2] Gustave Eiffel: " + P2.text and lines[5] == "(again [1] Eiffel Tower)"
    assert lines[-2:] == ["Dropped searches: old query", "Step 3 of 20. Your action:"]


# -- slow tests: the embedded model --------------------------------------------------------------------------

@pytest.mark.slow
def test_policy_act_and_candidates_are_well_formed(backend):
    """t=1 with nothing retrieved -> SEARCH (the only allowed action). logprob = action + argument parts =
    sequence_logprob(prompt, completion). K=4 siblings are well-formed too."""
    backend.activate(None)
    policy = LMPolicy(backend, PolicyConfig(max_query_tokens=12, max_answer_tokens=8, first_query="generate"))
    decision = policy.act(AgentView(QUESTION, (), (), 1, 6))
    assert isinstance(decision.action, Search) and decision.action.query
    assert decision.completion == f"SEARCH: {decision.action.query}"
    assert decision.logprob == pytest.approx(decision.action_logprob + decision.argument_logprob, abs=1e-9)
    assert decision.logprob == pytest.approx(backend.sequence_logprob(decision.prompt, decision.completion), abs=2e-3)
    view = AgentView(QUESTION, (Hop("Eiffel Tower designer", (P1, P2)),), (), 2, 6)
    siblings = policy.candidates(view, k=4, temperature=1.5, seed=3)
    assert len(siblings) == 4
    for d in siblings:
        assert isinstance(d.action, (Search, Backtrack, Answer, Refuse)) and d.prompt == siblings[0].prompt
        assert d.logprob == pytest.approx(backend.sequence_logprob(d.prompt, d.completion), abs=5e-3)
        assert set(d.choice_probs) == {"SEARCH", "BACKTRACK", "ANSWER", "REFUSE"}
    final = policy.act(AgentView(QUESTION, (Hop("Eiffel Tower designer", (P1, P2)),), (), 6, 6))
    assert isinstance(final.action, (Answer, Refuse))
    # first_query="question" (the default): the greedy first search is the question, scored as the policy's
    # completion; sampled siblings at that state still generate theirs
    opening = LMPolicy(backend, PolicyConfig()).act(AgentView(QUESTION, (), (), 1, 6))
    assert opening.action == Search(QUESTION) and opening.fallback is None
    assert opening.logprob == pytest.approx(backend.sequence_logprob(opening.prompt, opening.completion), abs=2e-3)
    sampled = LMPolicy(backend, PolicyConfig(max_query_tokens=12)).candidates(AgentView(QUESTION, (), (), 1, 6), k=3,
                                                                               temperature=1.5, seed=2)
    assert all(isinstance(d.action, Search) for d in sampled) and any(d.action.query != QUESTION for d in sampled)


@pytest.mark.slow
def test_answer_text_from_the_reader_or_the_policy_prompt(backend):
    """At the last step (ANSWER/REFUSE only) with T=5 some of 6 seeded draws are ANSWER. answer_with="reader": the
    text is the reader's greedy answer over the chain's passages (same for every ANSWER sibling at T=0), cleaned,
    and its log-prob is the completion's under the AGENT prompt. answer_with="policy": the agent prompt's own
    continuation, whose token log-probs add up to the same sequence log-prob."""
    from evorag_core.reader.prompt import clean_answer, reader_prompt

    backend.activate(None)
    view = AgentView(QUESTION, (Hop("Eiffel Tower designer", (P1, P2)),), (), 6, 6)
    for mode in ("reader", "policy"):  # the reader's free generation (span mode: tests/reader/test_span.py)
        policy = LMPolicy(backend, PolicyConfig(max_answer_tokens=10, answer_with=mode), AnswerConfig(mode="free"))
        greedy = policy.act(view)
        if isinstance(greedy.action, Answer):
            assert greedy.completion == f"ANSWER: {greedy.action.answer}"
            assert greedy.logprob == pytest.approx(backend.sequence_logprob(greedy.prompt, greedy.completion),
                                                   abs=5e-3)
            if mode == "reader":
                expected = backend.generate(reader_prompt(backend, QUESTION, [P1, P2], 300), 10, stop=("\n",),
                                            temperature=0.0, n=1)[0].text
                assert greedy.action.answer == clean_answer(expected)
        sampled = policy.candidates(view, k=6, temperature=5.0, seed=1)
        answers = [d for d in sampled if isinstance(d.action, Answer)]
        assert answers, "T=5 should draw ANSWER at least once in 6"
        for d in answers:
            assert d.logprob == pytest.approx(backend.sequence_logprob(d.prompt, d.completion), abs=5e-3)


def _work(backend) -> int:
    """Tokens the backend has handled: prompt tokens forwarded or served from its prefix cache, plus generated."""
    return backend.prompt_tokens + backend.cached_prompt_tokens + backend.tokens_generated


@pytest.mark.slow
def test_prepare_computes_the_next_greedy_decision_without_changing_it(backend):
    """prepare(view) then act(view): the same decision as act alone on a cold cache, and act itself then runs no
    prompt token and generates nothing (at the last step ANSWER is coming: reader prompt and answer included). A
    prepared decision is used once, only for its view, and never after the backend changed (cache reset, adapter)."""
    backend.activate(None)
    policy = LMPolicy(backend, PolicyConfig(max_query_tokens=12, max_answer_tokens=8))
    views = (AgentView(QUESTION, (Hop("Eiffel Tower designer", (P1, P2)),), (), 2, 6),
             AgentView(QUESTION, (Hop("Eiffel Tower designer", (P1, P2)),), (), 6, 6))
    for view in views:
        backend.reset_cache()
        cold = policy.act(view)
        backend.reset_cache()
        policy.prepare(view)
        before = (backend.prompt_tokens, backend.tokens_generated)
        warm = policy.act(view)
        assert warm.action == cold.action and warm.completion == cold.completion
        assert warm.logprob == pytest.approx(cold.logprob, abs=5e-3)
        assert (backend.prompt_tokens, backend.tokens_generated) == before, "act redid work that prepare had done"
        used = _work(backend)
        policy.act(view)  # used once: this one decides again (generated or, for a span answer, scored tokens)
        assert _work(backend) > used
    assert isinstance(cold.action, Answer)  # the last view exercised the reader and the answer
    for change in (backend.reset_cache, lambda: None):
        policy.prepare(views[1])
        change()
        asked = views[0] if change is not backend.reset_cache else views[1]  # another view, or a changed backend
        work = _work(backend)
        policy.act(asked)
        assert _work(backend) > work


@pytest.mark.slow
def test_argument_logprobs_take_no_scoring_pass_of_their_own(backend, monkeypatch):
    """The greedy first search (the question) is scored in the labels' pass: one scoring call, no re-score. K = 4
    siblings re-score their arguments in at most one pass. Siblings at a state whose greedy decision was just made
    reuse its label scores, until the adapter changes. Every log-prob still equals sequence_logprob's."""
    backend.activate(None)
    calls: list[tuple[str, tuple[str, ...]]] = []  # ("score", choices) / ("rescore", completions)
    score, rescore = backend.score_choices, backend.sequence_logprobs
    labels = tuple(LABELS.values())
    spy = lambda p, c: calls.append(("score", tuple(c))) or score(p, c)  # noqa: E731
    monkeypatch.setattr(backend, "score_choices", spy)
    monkeypatch.setattr(backend, "sequence_logprobs",
                        lambda pairs: calls.append(("rescore", tuple(c for _, c in pairs))) or rescore(pairs))
    policy = LMPolicy(backend, PolicyConfig(max_query_tokens=12, max_answer_tokens=8))
    opening = policy.act(AgentView(QUESTION, (), (), 1, 6))
    assert opening.action == Search(QUESTION) and calls == [("score", (*labels, opening.completion))]
    view = AgentView(QUESTION, (Hop("Eiffel Tower designer", (P1, P2)),), (), 2, 6)
    policy.act(view)
    calls.clear()
    siblings = policy.candidates(view, k=4, temperature=1.5, seed=3)
    assert all(c[:4] != labels for _, c in calls), "the labels were scored again at a state already scored"
    assert len([c for c in calls if c[0] == "rescore"]) <= 1
    monkeypatch.setattr(backend, "score_choices", score)
    monkeypatch.setattr(backend, "sequence_logprobs", rescore)
    for d in [opening, *siblings]:
        assert d.logprob == pytest.approx(backend.sequence_logprob(d.prompt, d.completion), abs=5e-3)
    calls.clear()
    monkeypatch.setattr(backend, "score_choices", spy)
    backend.reset_cache()  # as an adapter switch does: the memo no longer applies
    policy.candidates(view, k=2, temperature=1.5, seed=3)
    assert calls and calls[0] == ("score", labels)


def test_warm_up_caches_the_prompt_heads_every_episode_shares(backend):
    """After warm_up on an empty cache, the first decision of an episode runs only its own prompt tokens (the
    question onwards), not the system turn and the demonstrations; the decision is the cold one."""
    backend.activate(None)
    policy = LMPolicy(backend, PolicyConfig(max_query_tokens=12, max_answer_tokens=8))
    view = AgentView(QUESTION, (), (), 1, 6)
    backend.reset_cache()
    cold = policy.act(view)
    backend.reset_cache()
    policy.warm_up()
    before = backend.prompt_tokens
    warm = policy.act(view)
    total = len(backend.encode(policy.prompt(view)))
    assert backend.prompt_tokens - before < total / 3
    assert warm.completion == cold.completion


@pytest.mark.slow
def test_arena_answerer_cites_the_reader_passages(backend):
    """answer_with="arena": every ANSWER decision carries ARENA's reply over the reader passages (numbered P1, P2);
    the answer is the reply's <answer> part (or the lenient extraction), cleaned, or REFUSE("empty_answer") when
    the reply holds none; the greedy reply is ArenaGenerator's own; the log-prob is the completion's under the
    AGENT prompt; SEARCH siblings carry no reply."""
    from evorag_core.reader.prompt import clean_answer
    from evorag_core.reader.arena.generator import ArenaGenerator
    from evorag_core.reader.arena.prompt import ArenaConfig

    backend.activate(None)
    view = AgentView(QUESTION, (Hop("Eiffel Tower designer", (P1, P2)),), (), 6, 6)
    policy = LMPolicy(backend, PolicyConfig(answer_with="arena", arena_tokens=48))
    greedy = policy.act(view)
    assert greedy.arena is not None and greedy.arena["references"] == ["p1", "p2"]
    own = ArenaGenerator(backend, ArenaConfig(max_new_tokens=48)).generate(QUESTION, [P1, P2])
    assert greedy.arena["text"] == own.text and greedy.arena["format_ok"] == own.parsed.ok
    assert set(greedy.arena["selected"]) <= {"p1", "p2"}
    if isinstance(greedy.action, Answer):
        assert greedy.action.answer == clean_answer(own.answer) and greedy.fallback is None
        assert greedy.logprob == pytest.approx(backend.sequence_logprob(greedy.prompt, greedy.completion), abs=5e-3)
    else:
        assert greedy.fallback == "empty_answer" and not clean_answer(own.answer or "")
    mid = AgentView(QUESTION, (Hop("Eiffel Tower designer", (P1, P2)),), (), 2, 6)
    sampled = policy.candidates(mid, k=6, temperature=5.0, seed=4)
    assert any(isinstance(d.action, Search) for d in sampled) and any(d.arena is not None for d in sampled)
    for d in sampled:
        assert (d.arena is not None) == (isinstance(d.action, Answer) or d.fallback == "empty_answer")
        assert d.logprob == pytest.approx(backend.sequence_logprob(d.prompt, d.completion), abs=5e-3)
    with pytest.raises(ConfigError, match="answer_with"):
        LMPolicy(backend, PolicyConfig(answer_with="oracle"))


@pytest.mark.slow
def test_policy_fallbacks_on_empty_output(backend):
    """No tokens allowed: SEARCH falls back to the question ("empty_query"); ANSWER becomes REFUSE
    ("empty_answer"). At the last step only ANSWER/REFUSE are allowed; T=5 flattens the choice so that some of the
    8 seeded draws are ANSWER (its prior is far above REFUSE's)."""
    backend.activate(None)
    cfg = PolicyConfig(first_query="generate")
    # a model that stops at once: the settings refuse 0 tokens (ConfigError), so the built config is forced here
    object.__setattr__(cfg, "max_query_tokens", 0)
    object.__setattr__(cfg, "max_answer_tokens", 0)
    policy = LMPolicy(backend, cfg, AnswerConfig(mode="free"))  # span answers are never empty
    first = policy.act(AgentView(QUESTION, (), (), 1, 6))
    assert first.action == Search(QUESTION) and first.fallback == "empty_query"
    assert first.logprob == pytest.approx(backend.sequence_logprob(first.prompt, first.completion), abs=2e-3)
    last = policy.candidates(AgentView(QUESTION, (Hop("q", (P1,)),), (), 6, 6), k=8, temperature=5.0, seed=0)
    assert all(isinstance(d.action, Refuse) for d in last)
    refused = [d for d in last if d.fallback == "empty_answer"]
    assert refused and all(d.completion == "REFUSE" and d.argument_logprob == 0.0 for d in refused)
    assert policy.fallback_counts == {"empty_query": 1, "empty_answer": len(refused)}


@pytest.mark.slow
def test_llm_judge_probability(backend):
    """p_yes = sigmoid(logP(yes) - logP(no)); threshold 0 always answerable, threshold 1 never."""
    backend.activate(None)
    verdict = LLMSufficiencyJudge(backend).judge(QUESTION, [P1, P2])
    assert 0.0 < verdict.p_yes < 1.0
    assert verdict.p_yes == pytest.approx(1 / (1 + math.exp(verdict.logprob_no - verdict.logprob_yes)))
    assert LLMSufficiencyJudge(backend, threshold=0.0).judge_passages(QUESTION, [])[0] is True
    assert LLMSufficiencyJudge(backend, threshold=1.0).judge_passages(QUESTION, [P1])[0] is False
