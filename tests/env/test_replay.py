"""`env.replay.step_views`: the states of a finished episode rebuilt from its record are the views the environment
showed before each step (checked against a real RagEnv run, with a BACKTRACK in it)."""
from __future__ import annotations

from evorag_core.env.actions import Answer, Backtrack, Search
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.env.replay import step_views
from evorag_core.types import Passage

P = {pid: Passage(pid, f"title {pid}", f"text {pid}") for pid in ("p1", "p2", "p3")}


def _step(t, action, passages=()):
    return StepRecord(t, action, tuple(passages), {}, {}, 0.0)


def test_search_backtrack_search_answer():
    """t=1: nothing; t=2: hop 'a' (p1, p2); t=3: 'a' dropped by BACKTRACK; t=4: hop 'b' (p3), 'a' still dropped."""
    record = EpisodeRecord("e", "q1", "demo", "Who?", "discovery", "time-dynamic", "full", 6, 2, (
        _step(1, Search("a"), ["p1", "p2"]), _step(2, Backtrack()), _step(3, Search("b"), ["p3"]),
        _step(4, Answer("x"))))
    views = step_views(record, P.__getitem__)
    assert [v.t for v in views] == [1, 2, 3, 4] and all(v.t_max == 6 and v.question == "Who?" for v in views)
    assert [(tuple(h.query for h in v.chain), v.dropped) for v in views] == [
        ((), ()), (("a",), ()), ((), ("a",)), (("b",), ("a",))]
    assert views[1].chain[0].passages == (P["p1"], P["p2"]) and views[3].passages == (P["p3"],)


def test_the_views_match_the_environments(session_home):
    """The oracle on demo-002 through a real environment: each view before a step equals the rebuilt one."""
    from evorag_core.config import load_config
    from evorag_core.data.datasets import load_dataset
    from evorag_core.methods.oracle import OraclePolicy
    from evorag_core.runtime import Runtime
    from tests.paths import DEMO

    rt = Runtime(load_config(), session_home, load_dataset(DEMO))
    question = rt.dataset.get("demo-002")
    env = rt.make_env(question)
    env.reset(question, stage="discovery")
    policy = OraclePolicy()
    policy.begin(question)
    seen = []
    while not env.done:
        seen.append(env.view())
        action = policy.act(env.view())
        env.step(action[0] if isinstance(action, tuple) else action)
    by_pid = {p.pid: p for p in rt.corpus_for(question).passages}
    assert step_views(env.record, by_pid.__getitem__) == seen and len(seen) >= 2
