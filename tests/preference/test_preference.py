"""The multi-head preference model: the head-wise loss by hand, learnable synthetic features, pairs -> examples,
the question-level split, save/load, training from pairs with a cached encoder, and (slow) the real LM encoder,
candidate ranking and the best-of-K policy."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from evorag_core.config import Config, PolicyConfig, PreferenceConfig, RolloutConfig
from evorag_core.errors import ConfigError, ModelLoadError, TrainingError
from evorag_core.preference import (
    FeatureCache,
    PreferenceExample,
    PreferenceModel,
    PrefixEncoder,
    RankedPolicy,
    encode_examples,
    evaluate,
    examples_from_pairs,
    fit_preference_model,
    preference_loss,
    rank_candidates,
    split_examples,
    train_preference_model,
)
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.store import NewPair


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one torch thread (two OpenMP threads stall badly on a shared 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_loss_by_hand_two_heads():
    """Pair 1: f(x+) - f(x-) = (1, 0), both heads prefer the chosen side -> -log s(1) = 0.31326, -log s(0) = 0.69315.
    Pair 2: head 1 prefers the rejected side (direction -1), scores (2, 5) vs (0, 0) -> z1 = -2 -> -log s(-2) =
    2.12693; head 2 is masked out. Head 1 mean (0.31326 + 2.12693) / 2 = 1.22009; head 2 mean 0.69315.
    L = (1/2)(1.22009 + 0.69315) = 0.95662."""
    chosen = torch.tensor([[1.0, 0.0], [2.0, 5.0]])
    rejected = torch.zeros(2, 2)
    direction = torch.tensor([[1.0, 1.0], [-1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, per_head = preference_loss(chosen, rejected, direction, mask)
    sp = lambda z: math.log1p(math.exp(-z))  # -log sigmoid(z)
    assert per_head.tolist() == pytest.approx([(sp(1) + sp(-2)) / 2, sp(0)], abs=1e-5)
    assert float(loss) == pytest.approx(0.95662, abs=1e-4)
    # a head without any pair contributes 0 and still counts in the 1/H
    loss0, per0 = preference_loss(chosen, rejected, direction, torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    assert per0[1] == 0 and float(loss0) == pytest.approx((sp(1) + sp(-2)) / 4, abs=1e-5)


def _pairs_from_returns(a: np.ndarray, b: np.ndarray, returns):
    """Pairs of branches with features a[i], b[i]: `returns(x)` gives a branch's per-signal returns (signals it
    omits are 0); chosen = the branch with the larger total; 40 question groups."""
    examples, xc, xr = [], [], []
    for i in range(len(a)):
        ga = {k: 0.0 for k in SIGNAL_NAMES} | returns(a[i])
        gb = {k: 0.0 for k in SIGNAL_NAMES} | returns(b[i])
        (c, gc), (r, gr) = ((a[i], ga), (b[i], gb)) if sum(ga.values()) >= sum(gb.values()) else ((b[i], gb), (a[i], ga))
        examples.append(PreferenceExample(f"p{i}", "c", "r", sum(gc.values()) - sum(gr.values()),
                                          {k: gc[k] - gr[k] for k in SIGNAL_NAMES}, f"q{i % 40}"))
        xc.append(c)
        xr.append(r)
    return examples, np.array(xc, dtype=np.float32), np.array(xr, dtype=np.float32)


def _synthetic(n: int, dim: int = 24, seed: int = 0):
    """Features x ~ N(0, 1); signal k's per-branch return is w_k . x (w_ret, w_dup, w_step random, the other four
    signals always equal -> no pairs for their heads). chosen = the branch with the larger total."""
    rng = np.random.default_rng(seed)
    w = {k: rng.normal(size=dim) for k in ("ret", "dup", "step")}
    a, b = rng.normal(size=(n, dim)), rng.normal(size=(n, dim))
    return _pairs_from_returns(a, b, lambda x: {k: float(w[k] @ x) for k in w})


def test_training_on_learnable_synthetic_features_is_accurate():
    examples, xc, xr = _synthetic(600)
    train, evals = split_examples(examples, 0.25, 0)
    idx = {id(e): i for i, e in enumerate(examples)}
    ti, ei = [idx[id(e)] for e in train], [idx[id(e)] for e in evals]
    cfg = PreferenceConfig(l2=1e-3)
    model = fit_preference_model(xc[ti], xr[ti], train, cfg)
    heads, acc, loss = evaluate(model, xc[ei], xr[ei], evals)
    for k in ("ret", "dup", "step"):
        n, head_acc, _ = heads[k]
        assert n == len(evals) and head_acc > 0.9
    assert heads["bt"] == (0, None, None)  # a signal that never varies trains no head
    assert acc > 0.9 and loss < 0.4
    combine = dict(zip(model.heads_names, model.combine.tolist()))
    assert all(combine[k] == 0.0 for k in ("act", "bt", "ref", "ans"))  # ... and gets no weight in the overall score
    assert all(combine[k] > 0 for k in ("ret", "dup", "step"))


def _noisy_signal_pairs(n: int, dim: int = 60, seed: int = 0):
    """ret's returns are w . x (learnable); dup's are large N(0, 12^2) draws that the features cannot predict, so
    the dup head can only fit noise; chosen = the larger total (ret + dup)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    a, b = rng.normal(size=(n, dim)), rng.normal(size=(n, dim))
    return _pairs_from_returns(a, b, lambda x: {"ret": float(w @ x), "dup": float(rng.normal() * 12)})


def test_stacked_combiner_ignores_a_head_that_only_fits_noise():
    """In-sample, the dup head (noise) agrees with the training pairs' direction, so a combiner fitted on in-sample
    scores weighs it above the ret head (measured 0.72 vs 0.20) and the held-out overall accuracy is chance (0.45).
    Fitted on out-of-fold scores the dup weight drops far below the ret weight (-0.02; exactly 0 with the
    non-negative constraint) and the held-out accuracy rises by more than 0.1 (0.56 / 0.57)."""
    examples, xc, xr = _noisy_signal_pairs(300)
    train, evals = split_examples(examples, 0.3, 0)
    idx = {id(e): i for i, e in enumerate(examples)}
    ti, ei = [idx[id(e)] for e in train], [idx[id(e)] for e in evals]
    ret, dup = SIGNAL_NAMES.index("ret"), SIGNAL_NAMES.index("dup")
    results = {}
    for folds, nonneg in ((0, True), (5, False), (5, True)):
        model = fit_preference_model(xc[ti], xr[ti], train, PreferenceConfig(l2=1e-3, combine_folds=folds,
                                                                             combine_nonnegative=nonneg))
        results[folds, nonneg] = (evaluate(model, xc[ei], xr[ei], evals)[1], model.combine.detach())
    in_sample_acc, c = results[0, True]
    assert c[dup] > c[ret] and in_sample_acc < 0.55
    for key in ((5, False), (5, True)):
        acc, c = results[key]
        assert abs(c[dup]) < c[ret] and acc > in_sample_acc + 0.1
    assert results[5, True][1][dup] == 0.0 or results[5, True][1][dup] < 1e-3
    assert (results[5, True][1] >= 0).all()


def test_split_keeps_questions_together():
    examples, _, _ = _synthetic(100)
    train, evals = split_examples(examples, 0.2, 3)
    assert {e.group for e in train}.isdisjoint({e.group for e in evals})
    assert len({e.group for e in evals}) == 8  # 20 % of 40 questions
    with pytest.raises(ConfigError):
        split_examples(examples, 1.0, 0)


def _pair(i: int, margin: float, chosen_sig: dict | None, rejected_sig: dict | None) -> NewPair:
    return NewPair(f"prompt {i // 2}", f"SEARCH: c{i}", f"ANSWER: r{i}", "rollout", None, margin, "discovery",
                   {"question_id": f"q{i // 4}", "signals_chosen": chosen_sig, "signals_rejected": rejected_sig})


def test_examples_from_pairs_filters_by_margin_and_signals():
    """Only the first pair has margin >= 0.3 and per-signal returns; an export record of it gives the same example."""
    sig = {k: 0.0 for k in SIGNAL_NAMES}
    pairs = [_pair(0, 0.5, dict(sig, ret=1.0), dict(sig, ret=0.5)), _pair(1, 0.25, sig, sig), _pair(2, 0.9, None, None)]
    examples, skipped = examples_from_pairs(pairs, 0.3)
    assert skipped == 2 and len(examples) == 1
    e = examples[0]
    assert e.deltas["ret"] == 0.5 and e.deltas["dup"] == 0.0 and e.group == "q0" and e.chosen == "SEARCH: c0"
    record = {"prompt": [{"role": "user", "content": "prompt 0"}], "prompt_format": "raw",
              "chosen": [{"role": "assistant", "content": "SEARCH: c0"}],
              "rejected": [{"role": "assistant", "content": "ANSWER: r0"}], "margin": 0.5,
              "signals_chosen": dict(sig, ret=1.0), "signals_rejected": dict(sig, ret=0.5),
              "metadata": {"question_id": "q0"}}
    assert examples_from_pairs([record], 0.3)[0] == [e]


def test_save_load_gives_identical_scores(tmp_path):
    examples, xc, xr = _synthetic(80)
    cfg = PreferenceConfig(max_iter=50, hidden=8, layer=12, pooling="last")
    model = fit_preference_model(xc, xr, examples, cfg, model_id="m")
    model.metrics = {"overall_accuracy": 0.5}
    model.save(tmp_path / "rm")
    loaded = PreferenceModel.load(tmp_path / "rm")
    x = torch.as_tensor(xc[:5])
    assert torch.allclose(model(x), loaded(x)) and torch.allclose(model.overall(x), loaded.overall(x))
    assert loaded.cfg == cfg and loaded.heads_names == SIGNAL_NAMES and loaded.model_id == "m"
    assert loaded.metrics == {"overall_accuracy": 0.5}
    with pytest.raises(ModelLoadError):
        PreferenceModel.load(tmp_path / "missing")


class KeywordEncoder:
    """A stand-in for the LM encoder: feature = [completion starts with SEARCH, ... ANSWER, ... REFUSE] + noise."""

    model_id = "keyword"
    dim = 6

    def __init__(self):
        self.specs = ((PreferenceConfig().layer, PreferenceConfig().pooling),)  # what the default config asks for
        self.calls = 0

    def encode(self, prompt, completions):
        self.calls += 1
        out = np.zeros((len(completions), 1, self.dim), dtype=np.float32)
        for i, c in enumerate(completions):
            seed = sum(map(ord, prompt + c))
            out[i, 0, :3] = [c.startswith(k) for k in ("SEARCH", "ANSWER", "REFUSE")]
            out[i, 0, 3:] = np.random.default_rng(seed).normal(scale=0.1, size=3)
        return out


def test_train_from_pairs_saves_and_caches_features(tmp_path):
    """SEARCH beats ANSWER on `ret` (+1) and loses on `step` (-0.05): both heads learn their direction from the
    action-kind feature. Pairs below the 0.3 margin are not used. The second run reads every feature from the cache."""
    sig = {k: 0.0 for k in SIGNAL_NAMES}
    pairs = [_pair(i, 0.95, dict(sig, ret=1.0, step=-0.1), dict(sig, ret=0.0, step=-0.05)) for i in range(40)]
    pairs.append(_pair(99, 0.1, dict(sig, ret=0.1), sig))
    cfg = Config(rollout=RolloutConfig(preference_margin=0.3), preference=PreferenceConfig())
    enc = KeywordEncoder()
    metrics = train_preference_model(pairs, cfg, tmp_path / "rm", encoder=enc, home=tmp_path)
    assert metrics.train_pairs + metrics.eval_pairs == 40 and metrics.skipped_pairs == 1
    assert metrics.heads["ret"].accuracy == 1.0 and metrics.heads["step"].accuracy == 1.0
    assert metrics.heads["dup"].eval_pairs == 0 and metrics.overall_accuracy == 1.0
    assert (tmp_path / "cache" / "preference_features.safetensors").is_file()
    loaded = PreferenceModel.load(tmp_path / "rm")
    assert loaded.metrics["overall_accuracy"] == 1.0
    calls = enc.calls
    again = train_preference_model(pairs, cfg, tmp_path / "rm2", encoder=enc, home=tmp_path)
    assert enc.calls == calls and again.overall_accuracy == metrics.overall_accuracy
    with pytest.raises(TrainingError):
        train_preference_model(pairs[-1:], cfg, tmp_path / "rm3", encoder=enc, home=tmp_path)


# -- the real encoder (embedded SmolLM2) ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backend(session_home):
    from evorag_core.lm.hf_backend import TransformersBackend

    return TransformersBackend(PolicyConfig(device="cpu", max_query_tokens=8, max_answer_tokens=6), session_home)


@pytest.mark.slow
def test_encoder_matches_a_full_forward_and_is_cached(backend, tmp_path):
    """Prompt once, completions on its KV cache == one uncached forward of prompt + completion (mean over the
    completion positions of hidden layer 20, and the last position of layer 30)."""
    from evorag_core.lm.base import encode_pair

    enc = PrefixEncoder.from_backend(backend, ((20, "mean"), (30, "last")))
    prompt = backend.chat_prompt("You answer questions.", "Question: Who wrote Hamlet?\nStep 1 of 5. Your action:")
    completions = ["SEARCH: Hamlet author", "REFUSE"]
    feats = enc.encode(prompt, completions)
    assert feats.shape == (2, 2, 576)
    for i, c in enumerate(completions):
        p_ids, c_ids = encode_pair(backend.tokenizer, prompt, c)
        with torch.no_grad():
            hs = backend.model.model(input_ids=torch.tensor([p_ids + c_ids]), output_hidden_states=True).hidden_states
        n = len(c_ids)
        assert np.allclose(feats[i, 0], hs[20][0, -n:].mean(0).numpy(), atol=1e-3)
        assert np.allclose(feats[i, 1], hs[30][0, -1].numpy(), atol=1e-3)
    ex = [PreferenceExample(prompt, completions[0], completions[1], 1.0, {}, "q")]
    cache = FeatureCache(tmp_path / "f.safetensors")
    c1, r1 = encode_examples(enc, ex, cache)
    again = FeatureCache(tmp_path / "f.safetensors")
    assert len(again.items) == 4  # 2 completions x 2 specs
    c2, r2 = encode_examples(enc, ex, again)
    assert np.array_equal(c1, c2) and np.array_equal(r1, r2)


@pytest.mark.slow
def test_probe_pooling_reads_the_question_asked_after_the_candidate(backend, tmp_path):
    """"probe" = mean over the hidden states of the question re-asked after the completion (one forward of prompt +
    completion + probe); the completion's own mean/last features are the same with or without a probe spec."""
    from evorag_core.lm.base import encode_pair
    from evorag_core.preference import probe_text

    prompt = backend.chat_prompt("You answer questions.", "Question: Who wrote Hamlet?\nStep 1 of 5. Your action:")
    assert probe_text(prompt) == '\nDoes this answer the question "Who wrote Hamlet?"?'
    assert probe_text("no question line here") == "\nDoes this answer the question?"
    completions = ["SEARCH: Hamlet author\nFound:\n[1] Hamlet: a tragedy by William Shakespeare", "REFUSE"]
    both = PrefixEncoder.from_backend(backend, ((12, "probe"), (20, "mean"), (30, "last"))).encode(prompt, completions)
    plain = PrefixEncoder.from_backend(backend, ((20, "mean"), (30, "last"))).encode(prompt, completions)
    assert np.allclose(both[:, 1:], plain, atol=1e-4)
    probe_ids = encode_pair(backend.tokenizer, "", probe_text(prompt))[1]
    for i, c in enumerate(completions):
        p_ids, c_ids = encode_pair(backend.tokenizer, prompt, c)
        with torch.no_grad():
            hs = backend.model.model(input_ids=torch.tensor([p_ids + c_ids + probe_ids]),
                                     output_hidden_states=True).hidden_states
        assert np.allclose(both[i, 0], hs[12][0, -len(probe_ids):].mean(0).numpy(), atol=1e-3)
    assert not np.allclose(both[0, 0], both[1, 0], atol=1e-3)  # the probe sees what each candidate retrieved
    other = prompt.replace("Who wrote Hamlet?", "Who painted the Mona Lisa?")
    moved = PrefixEncoder.from_backend(backend, ((12, "probe"),)).encode(other, completions[1:])
    assert not np.allclose(moved[0, 0], both[1, 0], atol=1e-3)
    # the cache key depends on the probe template, so features of another probe are never reused
    assert FeatureCache.key("m", 12, "probe", prompt, "x") != FeatureCache.key("m", 12, "mean", prompt, "x")


@pytest.mark.slow
def test_ranking_and_best_of_k_policy(backend):
    """A model whose only head scores +1 on the 'SEARCH' direction of the features picks a SEARCH candidate."""
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.env.state import AgentView, Hop
    from evorag_core.types import Passage

    policy = LMPolicy(backend, PolicyConfig(max_query_tokens=8, max_answer_tokens=6))
    view = AgentView("Who wrote Hamlet?", (Hop("Hamlet", (Passage("p", "Hamlet", "Hamlet is a play by Shakespeare."),)),),
                     (), 2, 5)
    enc = PrefixEncoder.from_backend(backend, ((20, "mean"),))
    prompt = policy.prompt(view)
    search, answer = enc.encode(prompt, ["SEARCH: Shakespeare", "ANSWER: Shakespeare"])[:, 0]
    model = PreferenceModel(576, heads=("ret",), cfg=PreferenceConfig(layer=20, pooling="mean", observation=False),
                            model_id=backend.model_id)
    with torch.no_grad():
        model.heads.weight.copy_(torch.as_tensor(search - answer)[None])
        model.combine.fill_(1.0)
    model.attach(enc)
    decisions = policy.candidates(view, k=4, temperature=1.0, seed=3)
    scores = rank_candidates(model, decisions)
    assert len(scores) == 4 and all(math.isfinite(s) for s in scores)
    # a model trained with observations scores reply + retrieved passages, and refuses to rank without them
    observed = PreferenceModel(576, heads=("ret",), cfg=PreferenceConfig(layer=20, pooling="mean"),
                               model_id=backend.model_id)
    observed.load_state_dict(model.state_dict())
    observed.attach(enc)
    with pytest.raises(ConfigError, match="retrieves"):
        rank_candidates(observed, decisions)
    found = ["Found:\n[2] Shakespeare: William Shakespeare wrote Hamlet." if d.completion.startswith("SEARCH")
             else None for d in decisions]
    with_obs = rank_candidates(observed, decisions, found)
    for d, obs, plain, got in zip(decisions, found, scores, with_obs):
        assert (got == pytest.approx(plain, abs=1e-4)) == (obs is None)
    with pytest.raises(ConfigError, match="environment"):
        RankedPolicy(policy, observed, k=2, seed=1).act(view)
    ranked = RankedPolicy(policy, model, k=4, seed=1)
    ranked.begin(None)
    action, info = ranked.act(view)
    assert info["rm_candidates"] >= 1 and math.isfinite(info["rm_score"]) and info["completion"]
    with pytest.raises(ConfigError):
        PreferenceModel(576, heads=("ret",), model_id="other-model").attach(enc)


@pytest.mark.slow
def test_agent_method_ranks_with_a_saved_preference_model(backend, session_home, demo_path, tmp_path):
    """`evorag eval --method agent --rank-with-rm FOLDER` builds this: a saved one-head model (scores the SEARCH
    direction, as above) ranks the greedy decision + 2 siblings at every state of a demo episode (T_max 3); every
    step records its preference score and candidate count, and the episode ends well-formed."""
    from evorag_core.config import load_config
    from evorag_core.data.datasets import load_dataset
    from evorag_core.methods.agent import agent_on
    from evorag_core.runtime import Runtime

    enc = PrefixEncoder.from_backend(backend, ((20, "mean"),))
    search, answer = enc.encode("<|im_start|>user\nWho wrote Hamlet?<|im_end|>\n<|im_start|>assistant\n",
                                ["SEARCH: Shakespeare", "ANSWER: Shakespeare"])[:, 0]
    model = PreferenceModel(576, heads=("ret",), cfg=PreferenceConfig(layer=20, pooling="mean"),
                            model_id=backend.model_id)
    with torch.no_grad():
        model.heads.weight.copy_(torch.as_tensor(search - answer)[None])
        model.combine.fill_(1.0)
    folder = model.save(tmp_path / "rm")
    cfg = load_config(None, {"env.t_max": 3, "policy.siblings": 2, "policy.max_query_tokens": 8,
                             "policy.max_answer_tokens": 6})
    rt = Runtime(cfg, session_home, load_dataset(demo_path))
    method = agent_on(backend, rt, None, folder)
    assert method.name == "agent-rm" and "best-of-2" in method.label
    result = method.run_question(rt.dataset.questions[0])
    steps = result.extras["episode"]["steps"]
    assert 1 <= len(steps) <= 3 and result.format_valid
    for step in steps:
        assert math.isfinite(step["info"]["rm_score"]) and 1 <= step["info"]["rm_candidates"] <= 3
    # the saved model reads observations: at t = 1 the greedy SEARCH (the question) was scored with its passages
    assert steps[0]["info"]["rm_observed"] >= 1
