"""Sibling-branch rollouts: env snapshots, pair filtering by hand, rollouts on the demo set into a real SQLite store
(a scripted policy, and the embedded LM), Ctrl-C keeping finished episodes, and the TRL JSONL round trip."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest

from tests.paths import DEMO
from evorag_core.env.actions import Action, Answer, Backtrack, Refuse, Search
from evorag_core.cli.main import main as cli_main
from evorag_core.config import EnvConfig, PolicyConfig, RewardConfig, RolloutConfig, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.env.env import RagEnv
from evorag_core.env.episode import StepRecord
from evorag_core.errors import DatasetFormatError
from evorag_core.env.judges import GoldCoverageJudge
from evorag_core.pairs.io import export_pairs, import_pairs, join_chatml, read_pairs, split_chatml
from evorag_core.policy.prompts import render_search_result
from evorag_core.pairs.branches import Branch, BranchState, RolloutPair
from evorag_core.pairs.rollout import branch_states, run_rollouts, signal_returns
from evorag_core.pairs.selection import PairSelector, build_pairs
from evorag_core.runtime import Runtime
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.store import NewPair, open_store
from evorag_core.types import Corpus, Passage, Question



# -- pure parts ---------------------------------------------------------------------------------------------------


def _branch(completion: str, ret: float, *, greedy: bool = False, complete: bool = True, steps: int = 2) -> Branch:
    return Branch(completion, Search(completion), -1.0, greedy, 1, ret, {"ret": ret}, steps, complete,
                  "answer: x" if complete else "cut")


def test_signal_returns_add_up_to_the_branch_return():
    """Two steps: w_beta = 2, ret = +1 and w_eta = 0.02, step = -1 -> G^ret = 2, G^step = -0.02;
    then w_beta = 1.5, ret = -1, w_eta = 0.03 -> G^ret = 2 - 1.5 = 0.5, G^step = -0.05."""
    w1 = {"beta": 2.0, "lambda": 1.5, "gamma": 0.1, "delta": 0.3, "rho": 0.5, "eta": 0.02, "kappa": 0.05}
    w2 = dict(w1, beta=1.5, eta=0.03)
    zero = {k: 0.0 for k in SIGNAL_NAMES}
    s1 = StepRecord(1, Search("a"), (), dict(zero, ret=1.0, step=-1.0), w1, 2.0 - 0.02)
    s2 = StepRecord(2, Search("b"), (), dict(zero, ret=-1.0, step=-1.0), w2, -1.5 - 0.03)
    out = signal_returns([s1, s2])
    assert out["ret"] == pytest.approx(0.5) and out["step"] == pytest.approx(-0.05)
    assert sum(out.values()) == pytest.approx(s1.reward + s2.reward)


def test_branch_states_are_spread_and_include_the_first():
    assert branch_states(7, 3) == [0, 3, 6]
    assert branch_states(2, 3) == [0, 1]
    assert branch_states(5, 1) == [0]
    assert branch_states(5, 0) == []


def test_build_pairs_applies_the_margin_and_comparability():
    """Returns g=1.0 (greedy), a=1.25, b=0.6, c=3.0 but cut (not comparable with complete branches).
    |dR|: g-a 0.25, g-b 0.4, a-b 0.65. Delta 0.2 keeps all three; Delta 0.3 drops g-a (0.25 < 0.3)."""
    state = BranchState(2, "PROMPT", (), (_branch("g", 1.0, greedy=True), _branch("a", 1.25), _branch("b", 0.6),
                                          _branch("c", 3.0, complete=False)))
    pairs = build_pairs(state, 0.2)
    assert {(p.chosen.completion, p.rejected.completion) for p in pairs} == {("a", "g"), ("g", "b"), ("a", "b")}
    assert all(p.margin >= 0.2 and p.chosen.ret > p.rejected.ret for p in pairs)
    assert {(p.chosen.completion, p.rejected.completion) for p in build_pairs(state, 0.3)} == {("g", "b"), ("a", "b")}
    # two branches cut at the same horizon are comparable
    cut = BranchState(1, "P", (), (_branch("x", 0.0, complete=False), _branch("y", 1.0, complete=False)))
    assert [(p.chosen.completion, p.margin) for p in build_pairs(cut, 0.3)] == [("y", 1.0)]


def _pair(prompt: str, chosen: str, rejected: str, greedy: str | None) -> RolloutPair:
    return RolloutPair(prompt, _branch(chosen, 1.0, greedy=greedy == chosen), _branch(rejected, 0.0,
                       greedy=greedy == rejected), 1)


def test_selector_drops_duplicates_and_balances_the_greedy_side():
    """Offered in order: G1 (greedy chosen), G2 (greedy chosen), R1 (greedy rejected), N (no greedy),
    dup of G1 with the sides swapped, G3 (greedy chosen), R2 (greedy rejected).
    Ratio 1 (+1 slack): G1 out (1:0); G2 held (2 > 0+1); R1 out (0:1 -> 1:1) and releases G2 (2:1);
    N out; dup dropped; G3 held (3 > 1+1); R2 out (2:2) and releases G3 (3:2). finish() drops nothing."""
    sel = PairSelector(balance_ratio=1.0)
    out = []
    out += sel.offer([_pair("s1", "g", "a", "g")])
    out += sel.offer([_pair("s2", "g", "a", "g")])
    assert [p.prompt for p in out] == ["s1"]
    out += sel.offer([_pair("s3", "a", "g", "g"), _pair("s4", "a", "b", None), _pair("s1", "a", "g", None)])
    assert [p.prompt for p in out] == ["s1", "s3", "s2", "s4"]
    out += sel.offer([_pair("s5", "g", "a", "g")])
    out += sel.offer([_pair("s6", "a", "g", "g")])
    assert [p.prompt for p in out] == ["s1", "s3", "s2", "s4", "s6", "s5"]
    assert sel.finish() == 0
    st = sel.stats
    assert (st.pairs_built, st.pairs_kept, st.dropped_duplicate, st.greedy_chosen, st.greedy_rejected) == (7, 6, 1, 3, 2)


def test_selector_drops_the_unmatched_majority_at_the_end():
    """Four greedy-chosen pairs, no greedy-rejected one: 1 stored (0 + 1 slack), 3 dropped by finish()."""
    sel = PairSelector(balance_ratio=1.0)
    out = sel.offer([_pair(f"s{i}", "g", "a", "g") for i in range(4)])
    assert len(out) == 1 and sel.finish() == 3 and sel.stats.dropped_balance == 3
    off = PairSelector(balance_ratio=0.0)
    assert len(off.offer([_pair(f"s{i}", "g", "a", "g") for i in range(4)])) == 4


# -- the environment snapshot ------------------------------------------------------------------------------------

PASSAGES = (
    Passage("p0", "Velmora River", "The Velmora River flows through the town of Ashcombe before reaching the sea."),
    Passage("p1", "Ashcombe", "Ashcombe is a market town founded in 1412 by the weaver Ida Marsh."),
    Passage("p2", "Brindle Lake", "Brindle Lake is a glacial lake north of the Velmora hills."),
)
QUESTION = Question("q1", "test", "In which year was the town on the Velmora River founded?", ("1412",), PASSAGES,
                    frozenset({"p0", "p1"}))


@pytest.fixture(scope="module")
def embedder():
    from evorag_core.retrieval.embedding import Embedder

    return Embedder()


@pytest.mark.slow
def test_snapshot_restore_branches_from_the_same_state(embedder):
    """After SEARCH a, snapshot; branch 1 = BACKTRACK, SEARCH b; restore; branch 2 = SEARCH b directly.
    Branch 2's SEARCH b sees history [a] only (branch 1's queries are gone) and t = 2, as on a fresh replay."""
    from evorag_core.retrieval import BM25Retriever

    env = RagEnv(Corpus(PASSAGES), BM25Retriever(Corpus(PASSAGES), backend="bm25s"), embedder.encode,
                 GoldCoverageJudge(), EnvConfig(t_max=5, top_k=1), RewardConfig())
    env.reset(QUESTION, episode_id="e")
    env.step(Search("Velmora River town"))
    snap = env.snapshot()
    view = env.view()
    env.step(Backtrack())
    env.step(Search("Brindle Lake"))
    assert env.view().dropped == ("Velmora River town",)
    env.restore(snap)
    assert env.view() == view and len(env.record.steps) == 1
    restored = env.step(Search("Brindle Lake"))
    env.reset(QUESTION, episode_id="e")
    env.step(Search("Velmora River town"))
    fresh = env.step(Search("Brindle Lake"))
    assert restored.signals == fresh.signals and restored.weights == fresh.weights and restored.record.t == 2


# -- rollouts on the demo set ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeDecision:
    action: Action
    logprob: float
    prompt: str
    completion: str


def _completion(action: Action) -> str:
    if isinstance(action, Search):
        return f"SEARCH: {action.query}"
    if isinstance(action, Answer):
        return f"ANSWER: {action.answer}"
    return "BACKTRACK" if isinstance(action, Backtrack) else "REFUSE"


class ScriptedPolicy:
    """Greedy: SEARCH the question, then ANSWER "Sable River". Siblings: a fixed list of four actions."""

    def __init__(self, interrupt_on: str | None = None):
        self.interrupt_on = interrupt_on

    def _decide(self, view, action: Action, lp: float) -> FakeDecision:
        if self.interrupt_on and self.interrupt_on in view.question:
            raise KeyboardInterrupt
        return FakeDecision(action, lp, f"PROMPT<{view.question}|t={view.t}|{len(view.chain)}>", _completion(action))

    def act(self, view):
        return self._decide(view, Search(view.question) if view.t == 1 else Answer("Sable River"), -1.0)

    def candidates(self, view, k=None, temperature=None, seed=None):
        pool = [Answer("Sable River"), Answer("Orlen"), Refuse(), Search("Harwick Polytechnic")]
        if view.t == 1:
            pool = [Search(view.question), Search("Travine lamp"), Search("Sable River"), Search("Harwick")]
        return [self._decide(view, a, -2.0 - i) for i, a in zip(range(k), pool * 2)]


@pytest.fixture(scope="module")
def demo_runtime(session_home):
    """The session's home: indexes and the dequantized LM are shared with the other test modules."""
    cfg = load_config(None, {"env.corpus": "per-question", "env.t_max": 3})
    return Runtime(cfg, session_home, load_dataset(DEMO))


def _check_store(store, stats, cfg: RolloutConfig):
    episodes = store.list_episodes(limit=None)
    assert len(episodes) == stats.episodes
    n_steps = n_siblings = 0
    for listed in episodes:
        ep = store.get_episode(listed.id)
        n_steps += len(ep.steps)
        assert ep.total_return == pytest.approx(sum(s.reward for s in ep.steps))
        branches = ep.config["branches"]
        for step in ep.steps:
            n_siblings += len(step.siblings)
            if step.siblings:  # a branch state: K siblings, each with its branch's return
                assert len(step.siblings) == cfg.siblings
                returns = {b["completion"]: b["return"] for b in branches[str(step.t)]}
                greedy = next(b for b in branches[str(step.t)] if b["greedy"])
                # the greedy branch is the rest of the main trajectory
                assert greedy["return"] == pytest.approx(sum(s.reward for s in ep.steps if s.t >= step.t))
                for sib in step.siblings:
                    text = sib.action + (f": {sib.argument}" if sib.argument else "")
                    assert sib.branch_return == pytest.approx(returns[text])
    assert (n_steps, n_siblings) == (stats.steps, stats.candidates)
    pairs = store.list_pairs(limit=None)
    assert len(pairs) == stats.pairs_kept
    for p in pairs:
        m = p.metadata
        assert p.source == "rollout" and p.chosen != p.rejected and p.stage == "discovery"
        assert p.margin == pytest.approx(m["return_chosen"] - m["return_rejected"])
        assert p.margin >= min(cfg.policy_margin, cfg.preference_margin) - 1e-9
        assert sum(m["signals_chosen"].values()) == pytest.approx(m["return_chosen"])
        assert sum(m["signals_rejected"].values()) == pytest.approx(m["return_rejected"])
        assert m["for_preference"] == (p.margin >= cfg.preference_margin)
        for side in ("chosen", "rejected"):  # a SEARCH branch records what it retrieved, nothing else does
            branch = m[f"{side}_branch"]
            if branch["completion"].startswith("SEARCH:"):
                lines = branch["observation"].split("\n")
                assert lines[0] == "Found:" and all(x.startswith(("[", "(again [")) for x in lines[1:]) and lines[1:]
            else:
                assert branch["observation"] == ""
    assert len({(p.prompt, p.chosen, p.rejected) for p in pairs}) == len(pairs)
    return pairs


@pytest.mark.slow
def test_scripted_rollout_stores_episodes_candidates_and_pairs(demo_runtime, tmp_path):
    """T_max 3, K 4: the main trajectory is SEARCH, ANSWER; both states branch. At t=2 the candidates are the
    greedy ANSWER (merged with the identical sample), a wrong ANSWER, REFUSE and a SEARCH continued to t=3."""
    cfg = RolloutConfig(siblings=4, max_states=3, balance_ratio=0.0)
    sel = PairSelector(balance_ratio=0.0)
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        questions = demo_runtime.dataset.questions[:2]
        stats = run_rollouts(questions, demo_runtime.make_env, ScriptedPolicy(), store, cfg, sel,
                             policy_name="scripted", stage="discovery")
        assert (stats.episodes, stats.steps, stats.candidates) == (2, 4, 16)
        pairs = _check_store(store, stats, cfg)
        assert stats.pairs_kept > 0
        t2 = [p for p in pairs if p.metadata["t"] == 2]
        # the correct and the wrong ANSWER differ only in kappa * (1/2)(EM+F1) = 0.075 at p(2) = 0.5: never a pair
        assert not any({p.chosen, p.rejected} == {"ANSWER: Sable River", "ANSWER: Orlen"} for p in t2)
        # a first-step SEARCH's observation is what the environment returns for its query, numbered from [1]
        first = next(p for p in pairs if p.metadata["t"] == 1)
        question = next(q for q in questions if q.id == first.metadata["question_id"])
        env = demo_runtime.make_env(question)
        env.reset(question)
        query = first.chosen.removeprefix("SEARCH: ")
        assert first.metadata["chosen_branch"]["observation"] == render_search_result(
            env.view(), env.preview_search(query), PolicyConfig.passage_chars)


@pytest.mark.slow
def test_interrupt_keeps_the_finished_episodes(demo_runtime, tmp_path):
    """The policy raises KeyboardInterrupt inside the second question: the first episode and its pairs stay."""
    cfg = RolloutConfig(siblings=4, balance_ratio=0.0)
    sel = PairSelector(balance_ratio=0.0)
    questions = demo_runtime.dataset.questions[:3]
    policy = ScriptedPolicy(interrupt_on=questions[1].question)
    with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        with pytest.raises(KeyboardInterrupt):
            run_rollouts(questions, demo_runtime.make_env, policy, store, cfg, sel, policy_name="scripted")
        assert sel.stats.episodes == 1
        [episode] = store.list_episodes()
        assert episode.question_id == questions[0].id and episode.status == "finished"
        assert sum(store.count_pairs("status").values()) == sel.stats.pairs_kept


@pytest.mark.slow
def test_lm_rollout_of_demo_questions(demo_runtime, tmp_path):
    """The embedded SmolLM2 policy, T_max 2 (t=1 must SEARCH, t=2 = T_max must ANSWER or REFUSE), K = 3."""
    import torch

    from evorag_core.policy.agent import LMPolicy
    from evorag_core.lm.hf_backend import TransformersBackend

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pcfg = PolicyConfig(device="cpu", max_query_tokens=12, max_answer_tokens=8)
        policy = LMPolicy(TransformersBackend(pcfg, demo_runtime.home), pcfg)
        runtime = Runtime(replace(demo_runtime.cfg, env=replace(demo_runtime.cfg.env, t_max=2)), demo_runtime.home,
                          demo_runtime.dataset)
        cfg = RolloutConfig(siblings=3, t_max=2, seed=0)
        sel = PairSelector(balance_ratio=cfg.balance_ratio)
        with open_store(f"sqlite:///{tmp_path / 'lm.db'}") as store:
            stats = run_rollouts(runtime.dataset.questions[:2], runtime.make_env, policy, store, cfg, sel,
                                 policy_name="lm", stage="discovery")
            sel.finish()
            assert stats.episodes == 2 and stats.steps == 4 and stats.candidates == 2 * 2 * 3
            pairs = _check_store(store, stats, cfg)
            for p in pairs:  # the prompt is the policy's own prompt at that state; completions are its replies
                assert p.prompt.endswith("<|im_start|>assistant\n") and "Step " in p.prompt
                assert p.chosen.split(":")[0] in ("SEARCH", "ANSWER", "REFUSE", "BACKTRACK")
    finally:
        torch.set_num_threads(threads)


# -- export / import ----------------------------------------------------------------------------------------------

CHATML = join_chatml([{"role": "system", "content": "sys"}, {"role": "user", "content": "Question: q\nStep 1 of 5."}])


def _seed_pairs(store):
    return store.add_pairs([
        NewPair(CHATML, "SEARCH: a", "ANSWER: b", "rollout", None, 0.5, "discovery",
                {"signals_chosen": {"ret": 1.0}, "signals_rejected": {"ret": 0.5}, "question_id": "q"}),
        NewPair("Plain prompt\nwith lines", "REFUSE", "ANSWER: c", "human", "ann", None, "refinement", {"t": 3}),
    ])


def test_export_import_round_trip(tmp_path):
    """Export -> TRL conversational lines (prompt = messages, chosen/rejected = one assistant message) -> import
    into a fresh store gives the same prompt, completions, source, annotator, margin, stage and metadata."""
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as a, open_store(f"sqlite:///{tmp_path / 'b.db'}") as b:
        ids = _seed_pairs(a)
        out = tmp_path / "pairs.jsonl"
        assert export_pairs(a, out) == 2
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        assert lines[0]["prompt"] == [{"role": "system", "content": "sys"},
                                      {"role": "user", "content": "Question: q\nStep 1 of 5."}]
        assert lines[0]["chosen"] == [{"role": "assistant", "content": "SEARCH: a"}]
        assert lines[0]["signals_chosen"] == {"ret": 1.0} and lines[0]["id"] == ids[0]
        assert lines[1]["prompt_format"] == "raw"
        new_ids = import_pairs(b, out)
        for old_id, new_id in zip(ids, new_ids):
            x, y = a.get_pair(old_id), b.get_pair(new_id)
            assert (x.prompt, x.chosen, x.rejected, x.source, x.annotator, x.margin, x.stage) == \
                   (y.prompt, y.chosen, y.rejected, y.source, y.annotator, y.margin, y.stage)
            assert y.status == "queued" and y.metadata == {**x.metadata, "imported_from_id": old_id}
        assert split_chatml(CHATML) is not None and split_chatml("Plain prompt") is None


def test_malformed_import_names_the_line_and_imports_nothing(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as a:
        _seed_pairs(a)
        out = tmp_path / "pairs.jsonl"
        export_pairs(a, out)
        good = out.read_text().splitlines()
        bad = json.loads(good[1])
        bad["chosen"] = [{"role": "user", "content": "x"}]
        out.write_text("\n".join([good[0], json.dumps(bad), good[0]]) + "\n")
        before = a.count_pairs()
        with pytest.raises(DatasetFormatError, match=r"line 2.*chosen\[0\]"):
            import_pairs(a, out)
        out.write_text(good[0] + "\n{not json\n")
        with pytest.raises(DatasetFormatError, match="line 2.*invalid JSON"):
            read_pairs(out)
        assert a.count_pairs() == before


def test_pairs_cli_export_and_import(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with open_store(url) as store:
        _seed_pairs(store)
    out = tmp_path / "x.jsonl"
    assert cli_main(["pairs", "export", "--out", str(out), "--db", url, "--home", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exported"] == 2
    assert cli_main(["pairs", "import", str(out), "--db", url, "--home", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["imported"] == 2
    out.write_text("[]\n")
    assert cli_main(["pairs", "import", str(out), "--db", url, "--home", str(tmp_path)]) == 2
    assert "line 1" in capsys.readouterr().err
