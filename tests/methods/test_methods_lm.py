"""The `agent` method and the four pipeline baselines on the embedded LM and the demo data."""
from __future__ import annotations



import pytest

from evorag_core.config import Config, apply_overrides
from evorag_core.data.datasets import load_dataset
from evorag_core.evaluation.runner import evaluate
from evorag_core.methods.baselines import BASELINES, clean_answer
from evorag_core.methods.registry import build_method
from evorag_core.runtime import Runtime


def test_clean_answer():
    assert clean_answer("Answer: Sable River.\nmore") == "Sable River"
    assert clean_answer("So the final answer is: 1412") == "1412"
    assert clean_answer('  "Mirrow" ') == "Mirrow"
    assert clean_answer("") == ""
    assert clean_answer("10) Sigmund Jähn") == "Sigmund Jähn" and clean_answer("(2) Paris") == "Paris"
    assert clean_answer("1996.") == "1996" and clean_answer("3 May 1990") == "3 May 1990"


@pytest.fixture(scope="module")
def runtime(session_home, demo_path):
    cfg = apply_overrides(Config(), {"env.t_max": 3, "env.top_k": 3, "policy.max_answer_tokens": 12})
    return Runtime(cfg, session_home, load_dataset(demo_path))


@pytest.mark.slow
def test_agent_method_runs_episodes_with_logprobs(runtime):
    method = build_method("agent", runtime)
    questions = runtime.dataset.questions[:2]
    summary, results = evaluate(method, questions)
    assert summary["n"] == 2 and summary["format_valid"] == 1.0
    for res in results:
        episode = res.extras["episode"]
        assert 1 <= res.steps <= 3 and len(episode["steps"]) == res.steps
        for step in episode["steps"]:
            assert step["info"]["logprob"] <= 0.0
            assert step["info"]["logprob"] == pytest.approx(
                step["info"]["action_logprob"] + step["info"]["argument_logprob"])
        # the first action is a SEARCH: ANSWER/REFUSE are masked before any evidence
        assert res.trace[0]["action"] == "SEARCH"


@pytest.fixture(scope="module")
def free_runtime(session_home, demo_path):
    """The baselines' free-generation reader (`answer.mode = "free"`): this test counts generated tokens."""
    cfg = apply_overrides(Config(), {"env.t_max": 3, "env.top_k": 3, "policy.max_answer_tokens": 12,
                                     "answer.mode": "free"})
    return Runtime(cfg, session_home, load_dataset(demo_path))


@pytest.mark.slow
@pytest.mark.parametrize("name", BASELINES)
def test_baselines_answer_with_the_shared_backend(free_runtime, name):
    runtime = free_runtime
    method = build_method(name, runtime)
    method.cfg = type(method.cfg)(k=3, max_iterations=2, max_answer_tokens=12, max_thought_tokens=24)
    q = runtime.dataset.questions[0]
    res = method.run_question(q)
    assert res.question_id == q.id and res.trace[-1]["action"] == "ANSWER"
    searches = [t for t in res.trace if t["action"] == "SEARCH"]
    assert res.steps == len(searches)
    assert [p for t in searches for p in t["passages"] if p not in res.passages] == []  # each search's finds
    assert all(0 < len(t["passages"]) <= 3 for t in searches)
    if name == "direct":
        assert res.steps == 0 and res.passages == () and res.support_recall == 0.0
    else:
        assert 1 <= res.steps <= 3 and 0 < len(res.passages) <= 3 * res.steps
        assert 0.0 <= res.support_recall <= 1.0
    assert 0.0 <= res.f1 <= 1.0
    assert method.backend.tokens_generated > 0
