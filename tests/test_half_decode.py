"""fp16 weight copies for decode steps (evorag_core/policy/half_decode.py).

A tiny random Llama checks the mechanics; one slow test bounds the drift on the embedded SmolLM2-135M.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from evorag_core.config import PolicyConfig
from evorag_core.policy import TransformersBackend
from evorag_core.policy.half_decode import HalfDecodeLinear, enable_half_decode, half_decode


def _tiny_llama(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


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


def test_copy_follows_in_place_weight_updates():
    """After an optimizer-like in-place update the next decode uses the new weights (the copy is rebuilt)."""
    layer = torch.nn.Linear(16, 8, bias=False)
    enable_half_decode(torch.nn.Sequential(layer))
    x = torch.randn(1, 16)
    with torch.inference_mode(), half_decode(layer):
        before = layer(x)
    with torch.no_grad():
        layer.weight.add_(1.0)
    with torch.inference_mode(), half_decode(layer):
        after = layer(x)
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
    """SmolLM2-135M, a 40-token greedy continuation: the fast backend (default config) produces the same tokens
    as the exact one (half_decode_rows=0), and its summed log-prob is within 0.02 of the fp32 score of the same
    text (measured ~3e-3)."""
    fast = TransformersBackend(PolicyConfig(device="cpu"), session_home)
    exact = TransformersBackend(PolicyConfig(device="cpu", half_decode_rows=0), session_home)
    assert fast.half_decode_linears == 211 and exact.half_decode_linears == 0
    prompt = fast.chat_prompt("You are a helpful assistant.", "Describe the river Thames in a few sentences.")
    got, want = fast.generate(prompt, 40)[0], exact.generate(prompt, 40)[0]
    assert got.token_ids == want.token_ids
    assert got.logprob == pytest.approx(exact.sequence_logprob(prompt, got.text), abs=0.02)
    assert want.logprob == pytest.approx(exact.sequence_logprob(prompt, want.text), abs=2e-3)
