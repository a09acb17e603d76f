"""Grouped-query attention for masked CPU forwards (evorag_core/lm/gqa_attention.py): the same logits as
transformers' sdpa, without its copy of the keys to every head, and only where it applies."""
from __future__ import annotations

import pytest
import torch
import transformers.integrations.sdpa_attention as hf_sdpa

from evorag_core.lm.gqa_attention import GROUPED_SDPA, bf16_prompt_attention, grouped_sdpa_forward, use_grouped_sdpa
from evorag_core.lm.kv_cache import cache_kwargs, growing_cache


def _tiny_llama(kv_heads: int = 2, attn: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=kv_heads, max_position_embeddings=64, attn_implementation=attn)
    return LlamaForCausalLM(cfg).eval()


def _block_scored(model, prompt, conts):
    """Logits of `conts` laid out in one row after the cached `prompt`, each seeing the prompt and itself."""
    cache = growing_cache(model.config.num_hidden_layers)
    model(prompt, **cache_kwargs(model, cache), use_cache=True)
    n, q = prompt.shape[1], sum(len(c) for c in conts)
    mask = torch.full((q, n + q), torch.finfo(torch.float32).min)
    mask[:, :n] = 0
    positions, offset = [], 0
    for c in conts:
        block = mask[offset: offset + len(c), n + offset: n + offset + len(c)]
        block.masked_fill_(torch.ones(len(c), len(c), dtype=torch.bool).tril(), 0)
        positions.extend(range(n, n + len(c)))
        offset += len(c)
    ids = torch.tensor([[t for c in conts for t in c]])
    return model(ids, **cache_kwargs(model, cache), use_cache=True, position_ids=torch.tensor([positions]),
                 attention_mask=mask[None, None]).logits


def test_masked_block_forward_matches_sdpa_without_copying_keys(monkeypatch):
    """Continuations scored in one row over a cached prompt (block mask): the grouped path gives sdpa's logits, and
    never expands the keys per head (repeat_kv is what it saves); sdpa itself does expand them here."""
    prompt = torch.randint(0, 50, (1, 12), generator=torch.Generator().manual_seed(3))
    conts = [[4, 9, 11], [7], [20, 21]]
    reference = _tiny_llama()
    calls = []
    original = hf_sdpa.repeat_kv
    monkeypatch.setattr(hf_sdpa, "repeat_kv", lambda x, n: calls.append(n) or original(x, n))
    with torch.inference_mode():
        want = _block_scored(reference, prompt, conts)
    assert calls, "transformers' sdpa no longer copies the keys here: gqa_attention.py may be unneeded"
    calls.clear()
    model = _tiny_llama()
    assert use_grouped_sdpa(model)
    assert model.config._attn_implementation == GROUPED_SDPA
    with torch.inference_mode():
        got = _block_scored(model, prompt, conts)
    assert calls == []
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_training_forwards_keep_sdpa_and_its_gradients():
    """With gradients the grouped model runs transformers' sdpa: same loss, same gradients."""
    ids = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.tensor([[1] * 9, [0, 0] + [1] * 7])
    grads = []
    for grouped in (False, True):
        model = _tiny_llama()
        if grouped:
            assert use_grouped_sdpa(model)
        loss = model(ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        grads.append((loss.detach(), model.model.layers[0].self_attn.k_proj.weight.grad.clone()))
    torch.testing.assert_close(grads[1][0], grads[0][0])
    torch.testing.assert_close(grads[1][1], grads[0][1])


@pytest.mark.parametrize("kv_heads, attn", [(4, "sdpa"), (2, "eager")])
def test_only_grouped_sdpa_models_are_switched(kv_heads, attn):
    """Nothing to save without grouped keys, and an eager model keeps its own attention."""
    model = _tiny_llama(kv_heads, attn)
    assert not use_grouped_sdpa(model)
    assert model.config._attn_implementation == attn


def test_bf16_prompt_attention_is_causal_close_and_only_for_gradient_free_prompts():
    """Inside `bf16_prompt_attention` a mask-less prompt and a block-masked one attend in bf16: logits close to fp32,
    not equal, and still causal (changing the last tokens leaves every earlier position's logits bit for bit).
    One-token decode steps, forwards with gradients and everything after the block stay exact fp32."""
    model = _tiny_llama()
    assert use_grouped_sdpa(model)
    ids = torch.randint(0, 50, (1, 12), generator=torch.Generator().manual_seed(5))
    changed = ids.clone()
    changed[0, 9:] = (changed[0, 9:] + 1) % 50
    prompt, conts = ids[:, :8], [[4, 9, 11], [7], [20, 21]]
    with torch.inference_mode():
        want, want_block = model(ids).logits, _block_scored(model, prompt, conts)
        cache = growing_cache(2)
        model(ids[:, :11], **cache_kwargs(model, cache), use_cache=True)
        want_step = model(ids[:, 11:], **cache_kwargs(model, cache), use_cache=True).logits
        cache = growing_cache(2)
        model(ids[:, :11], **cache_kwargs(model, cache), use_cache=True)
        with bf16_prompt_attention():
            got_step = model(ids[:, 11:], **cache_kwargs(model, cache), use_cache=True).logits
            got, got_changed, got_block = model(ids).logits, model(changed).logits, _block_scored(model, prompt, conts)
        after = model(ids).logits
    for fast, exact in ((got, want), (got_block, want_block)):
        assert not torch.equal(fast, exact)
        torch.testing.assert_close(fast, exact, atol=3e-2, rtol=3e-2)
    assert torch.equal(got[:, :9], got_changed[:, :9]) and not torch.equal(got[:, 9:], got_changed[:, 9:])
    assert torch.equal(after, want) and torch.equal(got_step, want_step)
    with bf16_prompt_attention():
        trained = model(ids).logits
    assert torch.equal(trained.detach(), want)
    # transformers may pass is_causal=None: still causal (the module's flag), as in its own sdpa
    q, kv = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8)
    with torch.inference_mode(), bf16_prompt_attention():
        unset = grouped_sdpa_forward(model.model.layers[0].self_attn, q, kv, kv, None, is_causal=None)[0]
        causal = grouped_sdpa_forward(model.model.layers[0].self_attn, q, kv, kv, None)[0]
    assert torch.equal(unset, causal)


@pytest.mark.slow
def test_embedded_backend_scores_with_grouped_keys(backend):
    """The embedded SmolLM2 (9 heads over 3 key/value heads) runs on the CPU with the grouped attention."""
    assert backend.grouped_sdpa
    assert backend.model.config._attn_implementation == GROUPED_SDPA
