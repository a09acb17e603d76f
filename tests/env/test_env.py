"""RagEnv end to end on a tiny corpus with a real BM25 index and the real MiniLM embedder (SPEC §1-3)."""
from __future__ import annotations

import pytest

from evorag_core.env.actions import Answer, Backtrack, Refuse, Search
from evorag_core.config import EnvConfig, RewardConfig
from evorag_core.env.env import RagEnv
from evorag_core.env.episode import EpisodeRecord, apply_override
from evorag_core.errors import EnvStateError
from evorag_core.env.judges import GoldCoverageJudge, OverrideJudge, Verdict
from evorag_core.env.scheduler import step_reward, weights_at
from evorag_core.types import Corpus, Passage, Question

PASSAGES = (
    Passage("p0", "Velmora River", "The Velmora River flows through the town of Ashcombe before reaching the sea."),
    Passage("p1", "Ashcombe", "Ashcombe is a market town founded in 1412 by the weaver Ida Marsh."),
    Passage("p2", "Ida Marsh", "Ida Marsh was a weaver and merchant who founded Ashcombe."),
    Passage("p3", "Brindle Lake", "Brindle Lake is a glacial lake north of the Velmora hills."),
    Passage("p4", "Corran Bridge", "Corran Bridge crosses the Velmora River at Ashcombe and opened in 1790."),
    Passage("p5", "Ottery Mill", "Ottery Mill was a paper mill on a tributary of the Velmora River."),
)
QUESTION = Question(
    id="q1",
    dataset="test",
    question="In which year was the town on the Velmora River founded?",
    answers=("1412",),
    passages=PASSAGES,
    gold_pids=frozenset({"p0", "p1"}),
)


@pytest.fixture(scope="module")
def embedder():
    from evorag_core.retrieval.embedding import Embedder

    return Embedder()


@pytest.fixture(scope="module")
def retriever():
    from evorag_core.retrieval import BM25Retriever

    return BM25Retriever(Corpus(PASSAGES), backend="bm25s")


def make_env(retriever, embedder, t_max=5, judge=None, k=2):
    return RagEnv(
        Corpus(PASSAGES),
        retriever,
        embedder.encode,
        judge or GoldCoverageJudge(),
        EnvConfig(t_max=t_max, top_k=k),
        RewardConfig(stage="discovery"),
    )


def test_step_before_reset_fails(retriever, embedder):
    env = make_env(retriever, embedder)
    with pytest.raises(EnvStateError):
        env.step(Search("x"))


def test_full_episode_signals_by_hand(retriever, embedder):
    """T_max = 5 -> p(t) = (t-1)/4: p(1)=0, p(2)=0.25, p(3)=0.5 (act applies from p >= 0.3 on)."""
    env = make_env(retriever, embedder)
    env.reset(QUESTION)
    r1 = env.step(Search("Velmora River town"))
    assert r1.signals["ret"] == 1.0  # hits p0 (gold)
    assert r1.signals["dup"] == 0.0  # first query
    assert r1.signals["act"] == 0.0 and r1.signals["step"] == -1.0
    assert r1.weights == weights_at("discovery", 1, 5)
    assert r1.reward == pytest.approx(2.0 * 1.0 + 0.02 * -1.0)  # beta * ret + eta * step at Start weights

    r2 = env.step(Search("Brindle Lake glacial"))
    e = embedder.encode(["Velmora River town", "Brindle Lake glacial"])
    assert r2.signals["dup"] == pytest.approx(-float(e[0] @ e[1]), abs=1e-5)
    assert r2.signals["act"] == 0.0  # p(2) = 0.25 < 0.3
    assert len(env.view().chain) == 2

    r3 = env.step(Backtrack())
    assert r3.signals["bt"] == -1.0
    view = env.view()
    assert [h.query for h in view.chain] == ["Velmora River town"]
    assert view.dropped == ("Brindle Lake glacial",)

    # Same query as the dropped one: the dropped query stays in the overlap history -> cos = 1 -> dup = -1,
    # and p(4) = 0.75 >= 0.3 with r_dup < 0 -> act = -1.
    r4 = env.step(Search("Brindle Lake glacial"))
    assert r4.signals["dup"] == pytest.approx(-1.0, abs=1e-5)
    assert r4.signals["act"] == -1.0
    w4 = weights_at("discovery", 4, 5)
    assert r4.reward == pytest.approx(step_reward(r4.signals, w4))

    r5 = env.step(Answer("1412"))
    assert r5.terminated and not r5.truncated
    assert r5.signals["ans"] == 1.0
    rec = env.record
    assert rec.answer == "1412" and rec.total_return == pytest.approx(sum(s.reward for s in rec.steps))
    with pytest.raises(EnvStateError):
        env.step(Refuse())


def test_preview_search_is_what_search_returns_and_changes_nothing(retriever, embedder):
    env = make_env(retriever, embedder)
    env.reset(QUESTION)
    env.step(Search("Velmora River town"))
    before = (env.view(), env.record)
    preview = env.preview_search("Brindle Lake glacial")
    assert (env.view(), env.record) == before and preview[0].pid == "p3"
    assert env.step(Search("Brindle Lake glacial")).observation.passages == preview


def test_truncation_at_t_max(retriever, embedder):
    env = make_env(retriever, embedder, t_max=2)
    env.reset(QUESTION)
    assert not env.step(Search("Ashcombe")).truncated
    res = env.step(Search("Ida Marsh weaver"))
    assert res.truncated and not res.terminated and env.done


def test_refusal_with_and_without_override(retriever, embedder):
    """Gold p0+p1 not both in evidence -> gold judge says unanswerable -> REFUSE earns ref = +1;
    a human override 'answerable' for (episode, t=2) flips it to -1."""
    env = make_env(retriever, embedder)
    env.reset(QUESTION, episode_id="ep-a")
    env.step(Search("Brindle Lake"))
    res = env.step(Refuse())
    assert res.signals["ref"] == 1.0 and res.record.verdict.judge == "gold"

    judge = OverrideJudge(GoldCoverageJudge())
    judge.set_override("ep-b", 2, answerable=True, who="ann")
    env = make_env(retriever, embedder, judge=judge)
    env.reset(QUESTION, episode_id="ep-b")
    env.step(Search("Brindle Lake"))
    res = env.step(Refuse())
    assert res.signals["ref"] == -1.0
    assert res.record.verdict == Verdict(answerable=True, judge="human", who="ann")


def test_apply_override_recomputes_reward(retriever, embedder):
    env = make_env(retriever, embedder)
    env.reset(QUESTION)
    env.step(Search("Brindle Lake"))
    env.step(Refuse())
    rec = env.record
    new = apply_override(rec, 2, Verdict(answerable=True, judge="human", who="x"))
    w = rec.steps[1].weights
    assert new.steps[1].signals["ref"] == -1.0
    assert new.steps[1].reward == pytest.approx(rec.steps[1].reward - 2 * w["rho"])
    assert new.total_return == pytest.approx(rec.total_return - 2 * w["rho"])


def test_episode_json_round_trip(retriever, embedder):
    env = make_env(retriever, embedder)
    env.reset(QUESTION)
    env.step(Search("Velmora River"))
    env.step(Backtrack())
    env.step(Search("Ashcombe founded"))
    env.step(Refuse())
    rec = env.record
    again = EpisodeRecord.from_json(rec.to_json())
    assert again == rec
    assert again.to_json() == rec.to_json()


def test_gold_coverage_judge_answerable_when_all_gold_seen(retriever, embedder):
    env = make_env(retriever, embedder, k=3)
    env.reset(QUESTION)
    env.step(Search("Velmora River flows through Ashcombe"))
    env.step(Search("Ashcombe market town founded 1412"))
    assert {"p0", "p1"} <= {p.pid for p in env.view().passages}
    res = env.step(Refuse())
    assert res.record.verdict.answerable and res.signals["ref"] == -1.0
