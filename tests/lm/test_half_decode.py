"""fp16 weight copies for decode steps and bf16 copies for prompt forwards (evorag_core/lm/half_decode.py).

A tiny random Llama checks the mechanics; two slow tests bound the drift on the embedded SmolLM2-135M.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from evorag_core.config import PolicyConfig
from evorag_core.errors import ConfigError
from evorag_core.lm.hf_backend import TransformersBackend
from evorag_core.lm.half_decode import (
    HalfDecodeLinear,
    bf16_prefill,
    cpu_has_native_bf16,
    enable_half_decode,
    half_decode,
    resolve_prefill_dtype,
)


def _tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


def _assert_same_greedy_or_near_tie(exact, prompt: str, got, want, tolerance: float) -> None:
    """`got` (approximate weights) and `want` (exact weights) are greedy continuations of `prompt`. They must have the
    same tokens, or diverge only where the exact model itself finds the two tokens within `tolerance` nat of each
    other: a near-tie that weight rounding may break either way (e.g. " flows" / " runs" on a Thames query on an
    AMX-BF16 Xeon). Anything else is drift that changes a decision, and fails."""
    if got.token_ids == want.token_ids:
        return
    i = next((k for k, (a, b) in enumerate(zip(got.token_ids, want.token_ids)) if a != b),
             min(len(got.token_ids), len(want.token_ids)))
    assert i < len(got.token_ids) and i < len(want.token_ids), ("one continuation stopped early", got, want)
    ids = torch.tensor([exact.encode(prompt) + list(want.token_ids[:i])])
    with torch.inference_mode():
        logprobs = torch.log_softmax(exact.model(input_ids=ids).logits[0, -1].float(), dim=-1)
    a, b = float(logprobs[got.token_ids[i]]), float(logprobs[want.token_ids[i]])
    assert b - a < tolerance, (f"token {i}: {exact.tokenizer.decode([got.token_ids[i]])!r} scores {a:.3f}, "
                               f"the exact greedy {exact.tokenizer.decode([want.token_ids[i]])!r} {b:.3f}")


def test_enable_converts_every_linear_and_changes_nothing_outside_the_context():
    """2 layers x (q, k, v, o, gate, up, down) + the LM head = 15 linears. Outside `half_decode` the logits are bit
    for bit those of the unconverted model, and no copy is made."""
    model, reference = _tiny_llama(), _tiny_llama()
    ids = torch.randint(0, 300, (1, 1))
    assert enable_half_decode(model) == 15
    assert sum(isinstance(m, HalfDecodeLinear) for m in model.modules()) == 15
    assert set(model.state_dict()) == set(reference.state_dict())  # the copy is no parameter or buffer
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, reference(ids).logits)
    assert all(m.half_weight is None for m in model.modules() if isinstance(m, HalfDecodeLinear))


def test_inside_the_context_small_inputs_use_fp16_copies_large_ones_stay_exact():
    """One row: fp16 weights (close to fp32, not equal; copies made). Five rows with max_rows=4: exactly fp32."""
    model, reference = _tiny_llama(), _tiny_llama()
    enable_half_decode(model, max_rows=4)
    one, five = torch.randint(0, 300, (1, 1)), torch.randint(0, 300, (1, 5))
    with torch.inference_mode(), half_decode(model) as n:
        small, large = model(one).logits, model(five).logits
    assert n == 15
    with torch.inference_mode():
        small_ref, large_ref = reference(one).logits, reference(five).logits
    assert torch.equal(large, large_ref)
    assert not torch.equal(small, small_ref)
    torch.testing.assert_close(small, small_ref, atol=2e-3, rtol=2e-3)
    assert all(m.half_weight is not None for m in model.modules() if isinstance(m, HalfDecodeLinear))


def test_lm_head_top_logits_are_recomputed_in_fp32():
    """Hidden row h: the head's `exact_top` = 3 largest outputs equal h @ W.T in fp32; the others are fp16-rounded
    (they differ from fp32 somewhere)."""
    torch.manual_seed(1)
    head = torch.nn.Linear(32, 200, bias=False)
    head.weight.data.mul_(40)  # logits of ~20: fp16 output rounding is visible
    enable_half_decode(torch.nn.Sequential(head), exact_top=3)  # a Sequential has no output embeddings...
    assert head.exact_top == 0  # ...so no module is treated as the head
    head.exact_top = 3
    x = torch.randn(2, 1, 32)
    exact = F.linear(x, head.weight)
    with torch.inference_mode(), half_decode(head):
        got = head(x)
    top = exact.topk(3, dim=-1).indices
    torch.testing.assert_close(got.gather(-1, top), exact.gather(-1, top), atol=1e-5, rtol=0)
    assert (got - exact).abs().max() > 1e-4


def _outputs_around_update(layer, x, context):
    """`layer(x)` inside `context(layer)` before and after an optimizer-like in-place update of its weight."""
    with torch.inference_mode(), context(layer):
        before = layer(x)
    with torch.no_grad():
        layer.weight.add_(1.0)
    with torch.inference_mode(), context(layer):
        after = layer(x)
    return before, after


def test_copy_follows_in_place_weight_updates():
    """After an optimizer-like in-place update the next decode uses the new weights (the copy is rebuilt)."""
    layer = torch.nn.Linear(16, 8, bias=False)
    enable_half_decode(torch.nn.Sequential(layer))
    x = torch.randn(1, 16)
    before, after = _outputs_around_update(layer, x, half_decode)
    torch.testing.assert_close(after, F.linear(x, layer.weight.detach()), atol=1e-2, rtol=1e-3)
    assert (after - before).abs().min() > 0.1


def test_gradients_always_use_fp32_weights():
    """With autograd on, even a one-row input inside the context takes the fp32 path and gradients flow."""
    layer = torch.nn.Linear(16, 8, bias=False)
    enable_half_decode(torch.nn.Sequential(layer))
    x = torch.randn(1, 16)
    with half_decode(layer):
        out = layer(x)
    assert torch.equal(out, F.linear(x, layer.weight))
    out.sum().backward()
    assert layer.weight.grad is not None and layer.half_weight is None


def test_bf16_prefill_uses_copies_for_large_inputs_only_and_never_for_the_head():
    """Inside `bf16_prefill` the 14 block linears (not the LM head) run a 6-row input through bf16 copies: logits
    close to fp32, not equal. A 1-row input (<= max_rows) and everything outside the context stay exact; so does a
    model enabled without `prefill_bf16` (no copy is made)."""
    model, plain, reference = _tiny_llama(), _tiny_llama(), _tiny_llama()
    enable_half_decode(model, max_rows=4, prefill_bf16=True)
    enable_half_decode(plain, max_rows=4)
    one, six = torch.randint(0, 300, (1, 1)), torch.randint(0, 300, (1, 6))
    with torch.inference_mode():
        want_one, want_six = reference(one).logits, reference(six).logits
        with bf16_prefill(model) as n, bf16_prefill(plain) as n_plain:
            got_one, got_six, plain_six = model(one).logits, model(six).logits, plain(six).logits
        after = model(six).logits
    assert (n, n_plain) == (14, 0)
    assert model.lm_head.bf16_weight is None and not model.lm_head.prefill_copy
    assert torch.equal(got_one, want_one) and torch.equal(plain_six, want_six) and torch.equal(after, want_six)
    assert not torch.equal(got_six, want_six)
    torch.testing.assert_close(got_six, want_six, atol=3e-2, rtol=3e-2)
    assert all(m.half_weight is None for m in model.modules() if isinstance(m, HalfDecodeLinear))


def test_bf16_prefill_copy_follows_weights_and_gradients_stay_fp32():
    """An in-place weight update rebuilds the bf16 copy; with autograd on the fp32 path runs and gradients flow."""
    layer = torch.nn.Linear(16, 8, bias=False)
    enable_half_decode(torch.nn.Sequential(layer), max_rows=1, prefill_bf16=True)
    x = torch.randn(6, 16)
    before, after = _outputs_around_update(layer, x, bf16_prefill)
    torch.testing.assert_close(after, F.linear(x, layer.weight.detach()), atol=5e-2, rtol=1e-2)
    assert (after - before).abs().min() > 0.1
    with bf16_prefill(layer):
        out = layer(x)
    assert torch.equal(out, F.linear(x, layer.weight))
    out.sum().backward()
    assert layer.weight.grad is not None


def test_unknown_prefill_dtype_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="prefill_dtype"):
        TransformersBackend(PolicyConfig(device="cpu", prefill_dtype="float16"), tmp_path)


def test_auto_prefill_dtype_follows_the_cpu_flags():
    """The "auto" setting gives bfloat16 only with native bf16 instructions; explicit settings pass through."""
    zen4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
    zen3 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"
    sapphire = "flags\t\t: avx512f amx_bf16 amx_tile\n"
    assert cpu_has_native_bf16(zen4) and cpu_has_native_bf16(sapphire) and not cpu_has_native_bf16(zen3)
    assert [resolve_prefill_dtype("auto", c) for c in (zen4, zen3)] == ["bfloat16", "float32"]
    assert resolve_prefill_dtype("float32", zen4) == "float32" and resolve_prefill_dtype("bfloat16", zen3) == "bfloat16"
    with pytest.raises(ValueError):
        resolve_prefill_dtype("fp8", zen4)


def test_lora_wraps_a_converted_model():
    """peft wraps the converted q/v projections (its A/B layers stay plain Linears); with the adapter active the
    fp16 decode output stays close to the fp32 one, and the saved adapter keys are peft's usual ones."""
    from peft import LoraConfig, get_peft_model

    model = _tiny_llama()
    enable_half_decode(model)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, param in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.5)
    lora_layers = [m for n, m in peft_model.named_modules() if n.rsplit(".", 1)[-1] in ("lora_A", "lora_B")]
    assert lora_layers and not any(isinstance(m["default"], HalfDecodeLinear) for m in lora_layers)
    ids = torch.randint(0, 300, (1, 1))
    with torch.inference_mode():
        exact = peft_model(ids).logits
        with half_decode(peft_model):
            fast = peft_model(ids).logits
    torch.testing.assert_close(fast, exact, atol=5e-3, rtol=5e-3)
    assert all("half" not in key for key in peft_model.state_dict())


@pytest.mark.slow
def test_embedded_model_decodes_faster_weights_with_bounded_drift(session_home):
    """SmolLM2-135M, a 40-token greedy continuation: the fp16-decode backend (default half_decode_rows) produces the
    same tokens as the exact one (half_decode_rows=0), or first differs at a near-tie (0.02 nat), and its summed
    log-prob is within 0.02 of the fp32 score of the same text (measured ~3e-3). Both prefill in fp32 here; the
    next test bounds bf16 prefill."""
    fast = TransformersBackend(PolicyConfig(device="cpu", prefill_dtype="float32"), session_home)
    exact = TransformersBackend(PolicyConfig(device="cpu", half_decode_rows=0, prefill_dtype="float32"), session_home)
    assert fast.half_decode_linears == 211 and exact.half_decode_linears == 0
    prompt = fast.chat_prompt("You are a helpful assistant.", "Describe the river Thames in a few sentences.")
    got, want = fast.generate(prompt, 40)[0], exact.generate(prompt, 40)[0]
    _assert_same_greedy_or_near_tie(exact, prompt, got, want, tolerance=0.02)
    assert got.logprob == pytest.approx(exact.sequence_logprob(prompt, got.text), abs=0.02)
    assert want.logprob == pytest.approx(exact.sequence_logprob(prompt, want.text), abs=2e-3)


@pytest.mark.slow
def test_embedded_model_bf16_prefill_keeps_the_agent_decisions(session_home):
    """SmolLM2-135M, agent prompts with 1-3 hops of passages: with bf16 prefill (the 210 block linears and the
    prompt's attention; the LM head stays fp32) the four action labels score within 0.15 nat of fp32 prefill with the
    same best label (at 3 hops SEARCH and ANSWER are 0.05 apart), and the greedy 16-token query is the same text or
    first differs at a token the fp32 model itself finds within 0.15 nat of its own choice."""
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.policy.prompts import LABELS
    from evorag_core.env.state import AgentView, Hop
    from evorag_core.types import Passage

    bf16 = TransformersBackend(PolicyConfig(device="cpu", prefill_dtype="bfloat16"), session_home)
    fp32 = TransformersBackend(PolicyConfig(device="cpu", prefill_dtype="float32"), session_home)
    assert bf16.bf16_prefill_linears == 210 and fp32.bf16_prefill_linears == 0 and bf16.grouped_sdpa
    facts = [("Thames", "The River Thames flows through southern England, including London, to the North Sea."),
             ("London", "London is the capital of England and the United Kingdom; its population is about 9 million."),
             ("North Sea", "The North Sea lies between Great Britain, Scandinavia, Germany and the Netherlands.")]
    passages = [Passage(f"p{i}", title, " ".join([text] * 3)) for i, (title, text) in enumerate(facts)]
    question = "Which sea does the river that flows through the capital of England run into?"
    policy = LMPolicy(fp32, PolicyConfig())
    labels = list(LABELS.values())
    for hops in (1, 2, 3):
        chain = tuple(Hop(f"query {i}", (p,)) for i, p in enumerate(passages[:hops]))
        prompt = policy.prompt(AgentView(question, chain, (), hops + 1, 6))
        got, want = bf16.score_choices(prompt, labels), fp32.score_choices(prompt, labels)
        assert max(abs(a - b) for a, b in zip(got, want)) < 0.15, (got, want)
        assert max(range(4), key=got.__getitem__) == max(range(4), key=want.__getitem__)
        query = prompt + "SEARCH:"
        _assert_same_greedy_or_near_tie(fp32, query, bf16.generate(query, 16, stop=("\n",))[0],
                                        fp32.generate(query, 16, stop=("\n",))[0], tolerance=0.15)
