"""DynaKrag (SPEC §7): validity rules over enumerated states, each operation on a real BM25 index over the demo
corpus, gold-free features, controller fit/predict and save/load, training targets (Eq. 1), and the method end to
end with the embedded LM (slow)."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from tests.paths import DEMO
from evorag_core.config import DynaKragConfig, PolicyConfig, load_config
from evorag_core.data.corpus import build_corpus
from evorag_core.data.datasets import load_dataset
from evorag_core.errors import ConfigError, EnvStateError, ModelLoadError
from evorag_core.methods.dynakrag import (
    ACTIONS, FEATURE_NAMES, SCORED, EvidenceDoc, EvidenceState, LearnedController, OpContext, UniformController,
    ValueModels, action_features, execute, initial_state, load_models, save_models, state_features, valid_actions,
)
from evorag_core.methods.dynakrag.controller import make_forest
from evorag_core.evidence.entities import bridge_candidates
from evorag_core.methods.dynakrag.lm import align_snippets, clean_answer, uncovered_terms
from evorag_core.methods.dynakrag.ops import rewrite_query_text
from evorag_core.methods.dynakrag.training import (
    collect, continuation_utility, explore_question, fit_models, state_support_recall, target,
)
from evorag_core.types import Dataset, Passage



@pytest.fixture(scope="module")
def demo():
    return load_dataset(DEMO)


@pytest.fixture(scope="module")
def corpus(demo):
    return build_corpus(demo, "pooled")


@pytest.fixture(scope="module")
def bm25(corpus):
    from evorag_core.retrieval import BM25Retriever

    return BM25Retriever(corpus, backend="bm25s")


def make_ctx(corpus, bm25, cfg=DynaKragConfig(), lm=None) -> OpContext:
    return OpContext(cfg, bm25, bm25, {p.pid: p for p in corpus.passages}, lm)


class NoSearch:
    def search(self, query, k):
        raise AssertionError("an invalid operation reached the retriever")


# -- validity layer ------------------------------------------------------------------------------------------

DOC_PLAIN = EvidenceDoc(Passage("d1", "Sable River", "a river in the north."), 0.5, "retrieve_more", "q")
DOC_BRIDGE = EvidenceDoc(Passage("d2", "Ansel Travine", "He was born in Mirrow."), 0.5, "retrieve_more", "q")


def expected_valid(s: EvidenceState, cfg: DynaKragConfig) -> set[str]:
    """The paper's Table 5, restated independently of validity.py."""
    control = not s.terminated and s.steps < cfg.max_steps
    retrieval = control and s.retrieval_calls < cfg.retrieval_cap
    frontier = s.ranking is None or any(pid not in s.pids for pid, _ in s.ranking[s.cursor:])
    out = set()
    if retrieval and frontier:
        out.add("retrieve_more")
    if retrieval and s.missing:
        out.add("gap_query")
    if retrieval and s.docs:
        out.add("rewrite_query")
    if retrieval and any(d.passage.pid == "d2" for d in s.docs):  # only DOC_BRIDGE carries a bridge entity (Mirrow)
        out.add("bridge_entity_expand")
    if cfg.sufficiency and control and s.docs and s.probed_at != len(s.docs):
        out.add("sufficiency_check")
    if not s.terminated and (s.docs or not out):
        out.add("stop_answer")
    if cfg.compression and s.terminated and s.snippets is None and s.docs:
        out.add("compress_answer_evidence")
    return out


def enumerated_states():
    rankings = [None, (("d1", 1.0),), (("d1", 1.0), ("x9", 0.5))]
    for docs, ranking, cursor, missing, calls, steps, probed, terminated, snippets in itertools.product(
            [(), (DOC_PLAIN,), (DOC_BRIDGE,)], rankings, [0, 1], ["", "birthplace"], [0, 2, 3], [0, 3, 4],
            ["never", "now"], [False, True], [None, ("s",)]):
        history = ("retrieve_more",) * steps + (("stop_answer",) if terminated else ())
        yield EvidenceState("Where was Ansel Travine born?", docs=docs, ranking=ranking, cursor=cursor, missing=missing,
                            retrieval_calls=calls, history=history, probed_at=len(docs) if probed == "now" else -1,
                            terminated=terminated, snippets=snippets)


@pytest.mark.parametrize("cfg", [DynaKragConfig(), DynaKragConfig(sufficiency=False, compression=False),
                                 DynaKragConfig(retrieval_cap=2, max_steps=3)])
def test_validity_rules_over_enumerated_states(cfg):
    """3 doc sets x 3 rankings x 2 cursors x 2 gaps x 3 call counts x 3 step counts x 2 probes x 2 x 2 = 2592 states
    per config; A(s) must equal the restated Table 5, never be empty, and every invalid action must raise before
    touching a retriever or a model."""
    ctx = OpContext(cfg, NoSearch(), NoSearch(), {}, None)
    n = 0
    for s in enumerated_states():
        valid = valid_actions(s, cfg)
        assert set(valid) == expected_valid(s, cfg), s
        if not s.terminated:
            assert valid, s
        for action in set(ACTIONS) - set(valid):
            with pytest.raises(EnvStateError):
                execute(s, action, ctx)
        n += 1
    assert n == 2592


def test_initial_state_allows_only_retrieve_more():
    """s_0 has no evidence, no gap, no bridge: the frontier is the only executable operation."""
    assert valid_actions(initial_state("Who founded Mirrow?"), DynaKragConfig()) == ("retrieve_more",)


def test_cap_zero_leaves_stop_only():
    """With a retrieval cap of 0 and no evidence nothing else is executable, so stop_answer is (set never empty)."""
    assert valid_actions(initial_state("q"), DynaKragConfig(retrieval_cap=0)) == ("stop_answer",)


def test_unknown_action_is_an_error():
    with pytest.raises(EnvStateError, match="unknown DynaKrag operation"):
        execute(initial_state("q"), "search_web", OpContext(DynaKragConfig(), NoSearch(), NoSearch(), {}))


# -- operations on a real BM25 index over the demo corpus ------------------------------------------------------

def test_retrieve_more_walks_the_initial_ranking(demo, corpus, bm25):
    """First call: one search of depth 30, docs = ranking[0:3], cursor 3. Second call: ranking[3:6], cursor 6;
    both count one retrieval call each, neither touches the LM."""
    q = demo.questions[0].question
    ctx = make_ctx(corpus, bm25)
    ranking = [h.pid for h in bm25.search(q, 30)]
    s1 = execute(initial_state(q), "retrieve_more", ctx)
    assert s1.pids == tuple(ranking[:3]) and s1.cursor == 3 and len(s1.ranking) == 30
    assert s1.retrieval_calls == 1 and s1.query == q and s1.history == ("retrieve_more",) and s1.lm_calls == 0
    assert [d.action for d in s1.docs] == ["retrieve_more"] * 3 and s1.cost == 1.0
    s2 = execute(s1, "retrieve_more", ctx)
    assert s2.pids == tuple(ranking[:6]) and s2.cursor == 6 and s2.retrieval_calls == 2 and s2.last_added == 3


def test_bridge_entity_expand_follows_mirrow(demo, corpus, bm25):
    """demo-001: "Ansel Travine ... was an Ostrevian chemist born in Mirrow." The question names Ansel Travine, so the
    first bridge candidate is Mirrow (the demonym Ostrevian is skipped); expanding it searches Mirrow with the question
    words the evidence lacks and adds three passages, among them the Mirrow passage, the question's second gold
    passage."""
    q = demo.questions[0]
    ctx = make_ctx(corpus, bm25)
    s = execute(initial_state(q.question), "retrieve_more", ctx)
    assert "Ansel Travine" in [d.passage.title for d in s.docs]
    assert s.bridge_candidates[0] == "Mirrow"
    s2 = execute(s, "bridge_entity_expand", ctx)
    assert s2.query == f"Mirrow {uncovered_terms(q.question, s.passages)}" and s2.query != "Mirrow"
    assert s2.expanded == ("Mirrow",) and s2.retrieval_calls == 2
    assert "Mirrow" in [d.passage.title for d in s2.docs[3:]]
    assert [d.action for d in s2.docs[3:]] == ["bridge_entity_expand"] * 3
    assert corpus.gold_for(q) <= set(s2.pids)
    assert "Mirrow" not in s2.bridge_candidates  # expanded, and now a retrieved title


def test_gap_query_searches_the_recorded_gap(demo, corpus, bm25):
    """A recorded gap "Velmark Province" is searched as is; the top unseen hits of that search are added."""
    q = demo.questions[0].question
    ctx = make_ctx(corpus, bm25)
    s = replace(execute(initial_state(q), "retrieve_more", ctx), missing="Velmark Province")
    s2 = execute(s, "gap_query", ctx)
    expected = [h.pid for h in bm25.search("Velmark Province", 20) if h.pid not in s.pids][:3]
    assert s2.pids[3:] == tuple(expected) and s2.query == "Velmark Province" and s2.queries[-1] == "Velmark Province"


def test_rewrite_query_expands_with_evidence_terms(demo, corpus, bm25):
    """The rewrite = question + up to 4 evidence terms that are not in the question or earlier queries."""
    q = demo.questions[0].question
    ctx = make_ctx(corpus, bm25)
    s = execute(initial_state(q), "retrieve_more", ctx)
    text = rewrite_query_text(s)
    added = text[len(q):].split()
    assert text.startswith(q) and 1 <= len(added) <= 4
    assert not set(added) & set(q.lower().split())
    s2 = execute(s, "rewrite_query", ctx)
    assert s2.query == text and len(s2.docs) == 6 and set(s2.pids[3:]).isdisjoint(s.pids)
    assert rewrite_query_text(s2) != text  # its terms are now excluded


def test_title_deduplication():
    """Two passages with the same normalised title: only the first is kept."""
    passages = (Passage("a", "Sable River", "x"), Passage("b", "sable  river", "y"), Passage("c", "Mirrow", "z"))

    class Fixed:
        def search(self, query, k):
            from evorag_core.retrieval import Hit
            return [Hit(p.pid, 1.0 - i / 10, i + 1) for i, p in enumerate(passages)][:k]

    ctx = OpContext(DynaKragConfig(), Fixed(), Fixed(), {p.pid: p for p in passages})
    s = execute(initial_state("q"), "retrieve_more", ctx)
    assert s.pids == ("a", "c") and s.cursor == 3 and s.frontier_unseen() == 0
    assert "retrieve_more" not in valid_actions(s, ctx.cfg)  # frontier exhausted


def test_stop_then_only_compression(demo, corpus, bm25):
    ctx = make_ctx(corpus, bm25)
    s = execute(execute(initial_state(demo.questions[0].question), "retrieve_more", ctx), "stop_answer", ctx)
    assert s.terminated and s.steps == 1
    assert valid_actions(s, ctx.cfg) == ("compress_answer_evidence",)
    with pytest.raises(EnvStateError):
        execute(s, "retrieve_more", ctx)


def test_unknown_gap_source_is_a_config_error():
    with pytest.raises(ConfigError, match="gap_source"):
        OpContext(DynaKragConfig(gap_source="oracle"), NoSearch(), NoSearch(), {})


def test_bridge_candidates_rules():
    """Question words, retrieved titles, months, demonyms and words only seen opening a sentence are not bridge
    entities. Ranking: the question match of the best passage naming the span (Tromsø: the passage about Ada
    Lind's birth, all three question terms; Bergen: two of three; University of Oslo: none), then passage count."""
    texts = ["Ada Lind was a Norwegian painter born in Tromsø in May 1901.", "Tromsø lies north of the University of Oslo.",
             "Previously, the Canadian-American Ada Lind lived in Bergen."]
    titles = ["Ada Lind", "Northern Norway", "Ada Lind"]
    assert bridge_candidates("Where was Ada Lind born?", texts, titles) == ("Tromsø", "Bergen", "University of Oslo")
    # the span in the passage that matches the question outranks one that more (unrelated) passages name
    texts = ["Sable River floods.", "Ansel Travine was born in Velmark.", "Boats on the Sable River."]
    assert bridge_candidates("Where was Ansel Travine born?", texts, ["Rivers", "Ansel Travine", "Boats"])[:2] == (
        "Velmark", "Sable River")
    with pytest.raises(ValueError, match="titles"):
        bridge_candidates("q", texts, ["only one"])


def test_align_snippets_and_clean_answer():
    """Generated lines map to real evidence sentences (>= half their terms); a line with nothing in common is dropped."""
    p = Passage("p", "Mirrow", "Mirrow is a mill town on the Sable River. It was founded in 1402.")
    kept = align_snippets(["Mirrow is a town on the Sable River", "Bananas grow in Peru"], [p], 8)
    assert kept == ("Mirrow: Mirrow is a mill town on the Sable River.",)
    assert clean_answer(' Answer: "Sable River".\nmore') == "Sable River"


# -- features ------------------------------------------------------------------------------------------------

def test_features_ignore_gold(demo, bm25):
    """Flipping every gold flag of the data set (same passages) leaves every feature of every visited state and
    scored action unchanged; the features are read from the state, which holds the question text only."""
    q = demo.questions[0]
    flipped = replace(q, gold_pids=frozenset(p.pid for p in q.passages) - q.gold_pids, answers=("nothing",))
    states = []
    for question in (q, flipped):
        corpus = build_corpus(Dataset("d", "d", (question,) + demo.questions[1:]), "pooled")
        ctx = make_ctx(corpus, bm25)
        s = execute(initial_state(question.question), "retrieve_more", ctx)
        s = execute(s, "bridge_entity_expand", ctx)
        states.append(s)
    assert states[0].pids == states[1].pids
    for action in SCORED:
        assert action_features(states[0], action, DynaKragConfig()) == action_features(states[1], action, DynaKragConfig())


def test_feature_vector_shape_and_action_identity(demo, corpus, bm25):
    cfg = DynaKragConfig()
    s = execute(initial_state(demo.questions[0].question), "retrieve_more", make_ctx(corpus, bm25))
    feats = {a: dict(zip(FEATURE_NAMES, action_features(s, a, cfg))) for a in SCORED}
    assert all(len(f) == len(FEATURE_NAMES) for f in feats.values())
    assert feats["gap_query"]["is_gap_query"] == 1.0 and feats["gap_query"]["is_retrieve_more"] == 0.0
    assert feats["retrieve_more"]["n_docs"] == 3 and feats["retrieve_more"]["cursor"] == 3
    assert feats["retrieve_more"]["action_cost"] == 1.0 and feats["stop_answer"]["action_cost"] == 0.0
    assert feats["sufficiency_check"]["action_cost"] > 1.0


# -- controller ----------------------------------------------------------------------------------------------

def synthetic(cfg, n=60):
    """States with 0..5 docs; target 1 for retrieve_more when the state has < 3 docs, else 1 for stop_answer."""
    rng = np.random.default_rng(0)
    x, y = [], []
    for i in range(n):
        k = int(rng.integers(0, 6))
        docs = tuple(EvidenceDoc(Passage(f"p{j}", f"T{j}", "text"), 0.1, "retrieve_more", "q") for j in range(k))
        s = EvidenceState("Which river?", docs=docs, ranking=(("z", 1.0),) * 10, retrieval_calls=min(k, 2))
        for a in SCORED:
            x.append(action_features(s, a, cfg))
            y.append(float((a == "retrieve_more" and k < 3) or (a == "stop_answer" and k >= 3)))
    return np.asarray(x), np.asarray(y)


def test_forest_settings_are_the_papers():
    f = make_forest(DynaKragConfig())
    assert (f.n_estimators, f.min_samples_leaf, f.random_state) == (300, 8, 13)


def test_learned_controller_fits_and_ranks(tmp_path):
    """On the synthetic targets the forest picks retrieve_more with one document and stop_answer with four; scores
    cover exactly the valid actions. Saved and loaded, it predicts the same values."""
    cfg = DynaKragConfig(n_estimators=30, min_samples_leaf=1, continuation=False)
    x, y = synthetic(cfg)
    models = ValueModels(make_forest(cfg).fit(x, y))
    ctrl = LearnedController(models, cfg)
    one = EvidenceState("Which river?", docs=(DOC_PLAIN,), ranking=(("z", 1.0),) * 10, retrieval_calls=1)
    four = replace(one, docs=tuple(replace(DOC_PLAIN, passage=Passage(f"p{j}", f"T{j}", "t")) for j in range(4)))
    valid = valid_actions(one, cfg)
    d = ctrl.choose(one, valid)
    assert d.action == "retrieve_more" and set(d.scores) == set(valid)
    assert ctrl.choose(four, valid_actions(four, cfg)).action == "stop_answer"
    save_models(models, cfg, tmp_path / "m")
    loaded = load_models(tmp_path / "m")
    np.testing.assert_allclose(loaded.value.predict(x), models.value.predict(x))
    assert loaded.continuation is None


def test_continuation_suppresses_stop():
    """A continuation model predicting a gain of 1.0 removes stop_answer from the candidates."""
    cfg = DynaKragConfig(n_estimators=10, min_samples_leaf=1, continuation=True, continuation_threshold=0.5)
    x, y = synthetic(cfg)
    s = EvidenceState("Which river?", docs=(DOC_PLAIN,) * 1, ranking=(("z", 1.0),) * 10, retrieval_calls=1)
    xs = np.asarray([state_features(s, cfg)] * 4)
    cont = make_forest(cfg).fit(xs, np.ones(4))
    value = make_forest(cfg).fit(x, np.asarray([1.0 if i % len(SCORED) == SCORED.index("stop_answer") else 0.0
                                                for i in range(len(y))]))
    d = LearnedController(ValueModels(value, cont), cfg).choose(s, valid_actions(s, cfg))
    assert d.stop_suppressed and d.continuation == pytest.approx(1.0) and "stop_answer" not in d.scores


def test_load_refuses_missing_or_mismatched(tmp_path):
    with pytest.raises(ModelLoadError, match="no trained DynaKrag controller"):
        load_models(tmp_path / "none")
    cfg = DynaKragConfig(n_estimators=5, min_samples_leaf=1)
    x, y = synthetic(cfg, 10)
    save_models(ValueModels(make_forest(cfg).fit(x, y)), cfg, tmp_path / "m")
    meta = tmp_path / "m" / "controller.json"
    meta.write_text(meta.read_text().replace('"q_chars"', '"q_length"'))
    with pytest.raises(ModelLoadError, match="other features"):
        load_models(tmp_path / "m")


def test_uniform_controller_is_seeded_and_valid():
    s = EvidenceState("Which river?", docs=(DOC_BRIDGE,), ranking=(("z", 1.0),), retrieval_calls=1,
                      history=("retrieve_more",), missing="x")
    valid = valid_actions(s, DynaKragConfig())
    picks = [UniformController(13).choose(s, valid).action for _ in range(3)]
    assert len(set(picks)) == 1 and picks[0] in valid
    draws = {UniformController(seed).choose(s, valid).action for seed in range(40)}
    assert draws == set(valid) - {"compress_answer_evidence"}


# -- training targets ----------------------------------------------------------------------------------------

def test_targets_follow_equation_1():
    """Acquisition: SR(s') - SR(s); sufficiency: 1[SR(s) = 1]; stop: SR(s)."""
    assert target("gap_query", 0.5, 1.0) == 0.5
    assert target("sufficiency_check", 1.0, 1.0) == 1.0 and target("sufficiency_check", 0.5, 0.5) == 0.0
    assert target("stop_answer", 0.5, 0.5) == 0.5


def test_explore_question_labels_every_valid_action(demo, corpus, bm25):
    """Without the sufficiency check no LM is needed. From s_0 only retrieve_more is valid; its target is the
    recall of the first three documents. Every later state labels all its valid actions."""
    cfg = DynaKragConfig(sufficiency=False, train_rollouts=1)
    q = demo.questions[0]
    gold = corpus.gold_for(q)
    ctx = make_ctx(corpus, bm25, cfg)
    transitions, prefixes, final = explore_question(q.id, q.question, gold, ctx, 0)
    first = transitions[0]
    s1 = execute(initial_state(q.question), "retrieve_more", ctx)
    assert first.action == "retrieve_more" and first.step == 0
    assert first.target == pytest.approx(len(gold & set(s1.pids)) / len(gold))
    by_step = {}
    for t in transitions:
        by_step.setdefault(t.step, set()).add(t.action)
    assert by_step[0] == {"retrieve_more"} and "stop_answer" in by_step[1]
    assert final.steps == cfg.max_steps or final.retrieval_calls == cfg.retrieval_cap
    assert len(prefixes) == len(by_step) and prefixes[-1].target == 0.0
    models = fit_models(transitions * 3, prefixes * 3, replace(cfg, n_estimators=10), holdout=0.0)
    assert models.metrics["transitions"] == 3 * len(transitions)


def test_continuation_target_is_checked_and_support_is_recall(demo, corpus, bm25):
    """"support": U(s) = SR(s). An unknown target, or "answer" without a generator, is a ConfigError."""
    q = demo.questions[0]
    gold = corpus.gold_for(q)
    s1 = execute(initial_state(q.question), "retrieve_more", make_ctx(corpus, bm25))
    support = continuation_utility(q, make_ctx(corpus, bm25, DynaKragConfig(continuation_target="support")), gold)
    assert support(s1) == state_support_recall(s1, gold)
    with pytest.raises(ConfigError, match="continuation_target must be one of"):
        continuation_utility(q, make_ctx(corpus, bm25, DynaKragConfig(continuation_target="em")), gold)
    with pytest.raises(ConfigError, match="needs the generator"):
        continuation_utility(q, make_ctx(corpus, bm25, DynaKragConfig(continuation_target="answer")), gold)

def test_eval_method_is_registered():
    from evorag_core.methods.registry import METHODS

    assert "dynakrag" in METHODS
    assert load_config().dynakrag == DynaKragConfig()


# -- the embedded LM (slow) ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    """The embedded model at the process's torch thread count (one under xdist, tests/conftest.py). Not two: that
    setting outlived this module and ran every later test of its worker on two threads beside the other worker."""
    from evorag_core.lm.hf_backend import TransformersBackend

    return TransformersBackend(PolicyConfig(device="cpu"), tmp_path_factory.mktemp("dynakrag-home"))


SMALL = DynaKragConfig(retrieval_cap=2, max_steps=3, passage_chars=120, gap_tokens=8, compress_tokens=32,
                       answer_tokens=8)


@pytest.mark.slow
def test_sufficiency_and_compression_with_the_embedded_lm(demo, corpus, bm25, backend):
    """Threshold 1.0: never sufficient, so a gap is recorded: with gap_source "lm" the LM writes it (2 LM calls);
    with "uncovered" it is the question's words no passage contains (1 call), or the LM's when there are none.
    Threshold 0.0: always sufficient, no gap (1 call). Compression returns only real sentences of the evidence."""
    from evorag_core.methods.dynakrag import EvidenceLM

    q = demo.questions[0].question
    s = execute(initial_state(q), "retrieve_more", make_ctx(corpus, bm25, SMALL))
    uncovered = uncovered_terms(q, s.passages)
    for source in ("lm", "uncovered"):
        cfg1 = replace(SMALL, sufficiency_threshold=1.0, gap_source=source)
        no = execute(s, "sufficiency_check", make_ctx(corpus, bm25, cfg1, EvidenceLM(backend, cfg1)))
        assert no.sufficient is False and no.missing and no.probed_at == 3
        assert 0.0 <= no.p_sufficient < 1.0 and no.prompt_tokens > 100
        if source == "uncovered" and uncovered:
            assert no.missing == uncovered and no.lm_calls == 1 and no.completion_tokens == 0
        else:
            assert no.lm_calls == 2
            if no.completion_tokens == 0:  # the LM stopped at once: the observable fallback gap is used
                assert no.missing in (uncovered, q)
        assert "sufficiency_check" not in valid_actions(no, SMALL) and "gap_query" in valid_actions(no, SMALL)
    cfg0 = replace(SMALL, sufficiency_threshold=0.0)
    yes = execute(s, "sufficiency_check", make_ctx(corpus, bm25, cfg0, EvidenceLM(backend, cfg0)))
    assert yes.sufficient is True and yes.missing == "" and yes.lm_calls == 1
    done = execute(yes, "stop_answer", make_ctx(corpus, bm25, cfg0))
    packed = execute(done, "compress_answer_evidence", make_ctx(corpus, bm25, cfg0, EvidenceLM(backend, cfg0)))
    assert packed.snippets is not None and packed.lm_calls == 2
    texts = [f"{d.passage.title}: " for d in packed.docs]
    assert all(any(sn.startswith(t) for t in texts) for sn in packed.snippets)


@pytest.mark.slow
def test_method_on_two_demo_questions(demo, corpus, bm25, backend):
    """Uniform-valid controller, full method: every chosen action was in the valid set, the accounting adds up
    (LM calls = 1 or 2 per sufficiency check + compression + answer), at most 12 documents are used."""
    from evorag_core.methods.dynakrag import DynaKragMethod, EvidenceLM

    ctx = make_ctx(corpus, bm25, SMALL, EvidenceLM(backend, SMALL))
    method = DynaKragMethod(SMALL, UniformController(13), lambda q: ctx, corpus.gold_for)
    for q in demo.questions[:2]:
        r = method.run_question(q)
        m = r.extras["metrics"]
        assert all(step["action"] in step["valid"] for step in r.trace)
        assert r.trace[0]["action"] == "retrieve_more" and r.trace[-1]["action"] == "compress_answer_evidence"
        assert r.prediction is not None and 0.0 <= r.f1 <= 1.0 and r.support_recall is not None
        suff = m["n_sufficiency_check"]
        assert suff + 2 <= m["lm_calls"] <= 2 * suff + 2
        assert m["tokens"] == m["prompt_tokens"] + m["completion_tokens"] > 0
        assert m["retrieval_calls"] <= SMALL.retrieval_cap and r.steps <= SMALL.max_steps
        assert m["n_stop_answer"] == 1 and m["n_compress_answer_evidence"] == 1 and m["context_docs"] <= 12


@pytest.mark.slow
def test_answer_continuation_targets_with_the_embedded_lm(demo, corpus, bm25, backend):
    """continuation_target "answer": each prefix target is F1(answer at the rollout's end) - F1(answer at the prefix),
    the answers being the generator's direct ones (recomputed here without the memo); each distinct evidence set is
    answered once, and the action-value targets are still Eq. 1's support recall."""
    from evorag_core.methods.base import score
    from evorag_core.methods.dynakrag import EvidenceLM
    from evorag_core.methods.dynakrag.ops import final_context

    cfg = replace(SMALL, sufficiency=False, train_rollouts=1, continuation_target="answer")
    lm = EvidenceLM(backend, cfg)
    q = demo.questions[0]
    ctx = make_ctx(corpus, bm25, cfg, lm)
    transitions, prefixes, info = collect([q], lambda _: ctx, corpus.gold_for, cfg)
    assert info["lm_calls"] == 0 and info["continuation_answer_calls"] == len(prefixes)  # states all differ

    def f1(state):
        return score(q, lm.answer(q.question, final_context(state, cfg), None)[0])[1]

    _, _, final = explore_question(q.id, q.question, corpus.gold_for(q), make_ctx(corpus, bm25, cfg), 0)
    states, state = [initial_state(q.question)], initial_state(q.question)
    for action in final.history:
        state = execute(state, action, make_ctx(corpus, bm25, cfg))
        states.append(state)
    assert [p.target for p in prefixes] == pytest.approx([f1(final) - f1(s) for s in states[:-1]] + [0.0])
    sr = [t for t in transitions if t.action == "stop_answer"]
    assert sr and all(t.target == t.sr_before for t in sr)

def test_uncovered_terms_is_the_gap_fallback():
    """'river' and 'birthplace' occur in no passage; 'chemist', 'ansel', 'travine' do."""

    p = Passage("a", "Ansel Travine", "A chemist born in Mirrow.")
    assert uncovered_terms("On which river is the birthplace of the chemist Ansel Travine?", [p]) == "river birthplace"


def test_studio_trace_view_escapes_and_lists_scores():
    """One row per step; valid actions with their scores; the chosen action in bold; data text escaped."""
    from app.common.dynakrag_view import TRACE_HEADERS, trace_html, trace_rows

    trace = [{"t": 1, "action": "retrieve_more", "valid": ["retrieve_more"], "scores": {"retrieve_more": 0.25},
              "query": "<b>q</b>", "added": ["p1"], "state": {"docs": [], "cursor": 0, "ranking": None}},
             {"t": 2, "action": "stop_answer", "valid": ["rewrite_query", "stop_answer"],
              "scores": {"rewrite_query": 0.1, "stop_answer": 0.5}, "query": "", "added": [],
              "state": {"docs": [{"title": "A & B"}], "cursor": 3, "ranking": 30, "missing": "x"}}]
    headers, rows = trace_rows(trace)
    assert headers == list(TRACE_HEADERS) and len(rows) == 2
    assert rows[1][1] == "rewrite_query (0.100), stop_answer (0.500)"
    allowed = trace_rows([{**trace[1], "continuation": -0.0412}])[1][0][1]
    assert allowed.endswith("; stop allowed (continuation gain -0.041)")
    vetoed = trace_rows([{**trace[1], "valid": ["rewrite_query", "stop_answer"], "scores": {"rewrite_query": 0.1},
                          "continuation": 0.3, "stop_suppressed": True}])[1][0][1]
    assert vetoed == "rewrite_query (0.100), stop_answer (-); stop suppressed (continuation gain 0.300)"
    assert "1 docs: A & B" in rows[1][5] and "frontier 3/30" in rows[1][5] and "gap: x" in rows[1][5]
    page = trace_html(trace)
    assert "&lt;b&gt;q&lt;/b&gt;" in page and "A &amp; B" in page and "<b>stop_answer</b>" in page
    assert trace_html([]) == "<p>No DynaKrag steps.</p>"


def test_eval_and_training_load_the_configured_backend(demo, tmp_path):
    """`policy.backend = "vllm"` reaches DynaKrag's eval method and its training (they built a transformers model
    whatever the setting said). Without vLLM installed both stop with the backend's own error, before any work."""
    import importlib.util

    from evorag_core.methods.base import MethodOptions
    from evorag_core.methods.dynakrag.method import build_dynakrag_method
    from evorag_core.methods.dynakrag.training import train_dynakrag
    from evorag_core.runtime import Runtime

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the backend would load")
    cfg = load_config(None, {"policy.backend": "vllm", "dynakrag.controller": "uniform"})
    rt = Runtime(cfg, tmp_path, demo)
    with pytest.raises(ModelLoadError, match="vLLM"):
        build_dynakrag_method(MethodOptions(), rt)
    with pytest.raises(ModelLoadError, match="vLLM"):
        train_dynakrag(demo, rt, cfg.dynakrag, tmp_path / "controller")
    assert not (tmp_path / "controller").exists()
