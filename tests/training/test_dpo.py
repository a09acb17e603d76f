"""DPO through TRL with LoRA on a tiny 2-layer Llama (built here) and a tokenizer trained on the test pairs.

One slow test runs two steps on the embedded SmolLM2-135M.
"""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from evorag_core.config import TrainConfig
from evorag_core.errors import AdapterError, DatasetFormatError
from training.objectives.dpo.data import PairExample, fit_pairs, from_conversational, split_pairs, to_conversational
from training.objectives.dpo.trainer import completion_logps, heldout_accuracy, pair_margins, train_dpo
from evorag_core.adapters.files import WEIGHTS_FILE, load_adapter, read_adapter_meta, verify_adapter
from training.lora import attach_lora

BASE_ID = "tiny-llama-test"
QUESTIONS = [
    "who wrote hamlet", "capital of france", "when was the eiffel tower built", "who painted the mona lisa",
    "largest planet", "author of dune", "river through paris", "tallest mountain", "inventor of the telephone",
    "first man on the moon", "speed of light", "boiling point of water",
]


def chat(question: str) -> str:
    return (
        "<|im_start|>system\nYou are a search agent.<|im_end|>\n"
        f"<|im_start|>user\nQuestion: {question}<|im_end|>\n<|im_start|>assistant\n"
    )


PAIRS = [PairExample(chat(q), f"SEARCH: {q}", f"ANSWER: {q.split()[-1]}") for q in QUESTIONS]
TRAIN, HELDOUT = PAIRS[:8], PAIRS[8:]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A 300-token byte-level BPE trained on the pairs, with ChatML's two special tokens (EOS = pad = <|im_end|>)."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator([p.prompt + p.chosen + " " + p.rejected for p in PAIRS], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|im_end|>")


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return build_tokenizer()


def tiny_model(vocab: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


CFG = dataclasses.replace(TrainConfig(), lr=1e-3, epochs=3, max_length=128, batch_size=4, seed=7)


@pytest.fixture(scope="module")
def round_one(tokenizer, tmp_path_factory):
    """One DPO round: 8 pairs, batch 4, 3 epochs -> 6 steps; 4 held-out pairs."""
    model = tiny_model(len(tokenizer))
    events: list[dict] = []
    out = tmp_path_factory.mktemp("round1") / "adapter"
    result = train_dpo(TRAIN, model, tokenizer, CFG, out, None, events.append, heldout=HELDOUT,
                       base_model_id=BASE_ID, meta={"round_id": 1})
    return result, model, events


@pytest.mark.slow  # trains the tiny model once per module (~3-8 s)
def test_dpo_round_trains_the_lora_and_reports_progress(round_one):
    """Step 1: policy = reference, so every margin is 0 and the loss is −log σ(0) = ln 2 = 0.693147.
    Afterwards the loss falls, the LoRA B matrices (zero at init) are non-zero, and each step was reported."""
    result, model, events = round_one
    step_events = [e for e in events if "loss" in e]
    assert [e["step"] for e in step_events] == [1, 2, 3, 4, 5, 6] and result.steps == 6
    assert math.isclose(step_events[0]["loss"], math.log(2), abs_tol=1e-5)
    assert step_events[0]["rewards/margins"] == 0.0
    assert step_events[-1]["loss"] < step_events[0]["loss"] - 0.01
    assert step_events[-1]["rewards/margins"] > 0 and step_events[-1]["rewards/accuracies"] == 1.0
    assert {"rewards/chosen", "rewards/rejected", "logps/chosen", "logps/rejected", "elapsed_s"} <= set(step_events[-1])
    lora_b = {n: p for n, p in model.named_parameters() if "lora_B.default" in n}
    assert len(lora_b) == 2 * 4 and all(p.abs().sum() > 0 for p in lora_b.values())
    assert result.metrics["first_loss"] == step_events[0]["loss"] and result.n_train == 8 and result.n_heldout == 4


@pytest.mark.slow  # trains the tiny model once per module (~3-8 s)
def test_lora_a_moved_from_its_seeded_init(round_one, tokenizer):
    """attach_lora with the same seed reproduces the initial A matrices; the trained ones differ from them."""
    result, _, _ = round_one
    fresh = attach_lora(tiny_model(len(tokenizer)), CFG)
    init = {n.replace(".default", ""): p for n, p in fresh.named_parameters() if "lora_A" in n}
    saved = load_file(str(result.adapter_dir / WEIGHTS_FILE))
    a_keys = [k for k in saved if "lora_A" in k]
    assert a_keys and all(not torch.allclose(saved[k], init[k]) for k in a_keys)


@pytest.mark.slow  # trains the tiny model once per module (~3-8 s)
def test_heldout_accuracy_is_our_margin_sign(round_one, tokenizer):
    """The pattern (SEARCH preferred to ANSWER) transfers to the 4 held-out questions: all margins > 0.
    Round 1's reference is the base model, so loading the saved adapter on a fresh base and scoring against the
    base (adapters disabled) reproduces the result's margins."""
    result, _, _ = round_one
    assert result.heldout_accuracy == 1.0 and result.heldout_margin > 0
    loaded = load_adapter(tiny_model(len(tokenizer)), result.adapter_dir, BASE_ID)
    margins = pair_margins(loaded, tokenizer, HELDOUT, beta=CFG.beta, max_length=CFG.max_length)
    assert math.isclose(sum(margins) / 4, result.heldout_margin, rel_tol=1e-4)
    assert heldout_accuracy(loaded, tokenizer, HELDOUT, beta=CFG.beta, max_length=CFG.max_length) == 1.0


@pytest.mark.slow  # trains the tiny model once per module (~3-8 s)
def test_adapter_saved_verified_and_corruption_detected(round_one, tokenizer, tmp_path):
    """Saved folder has the 3 files and our metadata; verify passes; a wrong base id, a flipped byte and a missing
    file each raise AdapterError."""
    result, _, _ = round_one
    folder = result.adapter_dir
    meta = read_adapter_meta(folder)
    assert meta["round_id"] == 1 and meta["objective"] == "dpo" and meta["base_model_id"] == BASE_ID
    assert meta["sha256"] == result.checksum and meta["metrics"]["heldout_accuracy"] == 1.0
    verify_adapter(folder, BASE_ID, model=tiny_model(len(tokenizer)))
    with pytest.raises(AdapterError, match="trained on"):
        verify_adapter(folder, "some-other-model")
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    data = bytearray((copy / WEIGHTS_FILE).read_bytes())
    data[-1] ^= 0xFF
    (copy / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(AdapterError, match="sha256"):
        verify_adapter(copy, BASE_ID)
    (copy / WEIGHTS_FILE).unlink()
    with pytest.raises(AdapterError, match="missing adapter_model.safetensors"):
        verify_adapter(copy, BASE_ID)


@pytest.mark.slow  # trains the tiny model once per module (~3-8 s)
def test_shape_mismatch_against_the_base_model(round_one):
    """An adapter for hidden size 64 does not fit a base model with hidden size 32 (lora_A in_features)."""
    result, _, _ = round_one
    torch.manual_seed(0)
    other = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    with pytest.raises(AdapterError, match="base layer needs in=32"):
        verify_adapter(result.adapter_dir, BASE_ID, model=other)


@pytest.mark.slow
def test_previous_adapter_is_the_reference_and_the_start(round_one, tokenizer, tmp_path):
    """Round 2 from round 1's adapter: the policy starts at round 1 and so does the reference, so the first loss is
    ln 2 again. (Were the reference the base model, round 1's margin ≈ 0.066 would give −log σ(0.066) ≈ 0.66.)"""
    result, _, _ = round_one
    events: list[dict] = []
    second = train_dpo(TRAIN, tiny_model(len(tokenizer)), tokenizer, dataclasses.replace(CFG, epochs=1),
                       tmp_path / "r2", result.adapter_dir, events.append, base_model_id=BASE_ID)
    losses = [e["loss"] for e in events if "loss" in e]
    assert math.isclose(losses[0], math.log(2), abs_tol=1e-5) and losses[-1] < losses[0]
    assert read_adapter_meta(second.adapter_dir)["reference"] == str(result.adapter_dir)
    with pytest.raises(AdapterError, match="trained on"):
        train_dpo(TRAIN, tiny_model(len(tokenizer)), tokenizer, CFG, tmp_path / "r3", result.adapter_dir,
                  base_model_id="another-base")


@pytest.mark.slow
def test_same_inputs_and_seed_give_the_same_adapter(round_one, tokenizer, tmp_path):
    """CPU training is deterministic here: a second run with the same pairs, model init and seed writes a
    byte-identical adapter (same sha256)."""
    result, _, _ = round_one
    again = train_dpo(TRAIN, tiny_model(len(tokenizer)), tokenizer, CFG, tmp_path / "again", None,
                      heldout=HELDOUT, base_model_id=BASE_ID, meta={"round_id": 1})
    assert again.checksum == result.checksum


@pytest.mark.slow
def test_compact_lm_head_switch_changes_nothing_but_cost(round_one, tokenizer, tmp_path, monkeypatch):
    """With TRL's own CPU path (every position through the LM head) the adapter is byte-identical to the one
    trained with our compact switch: prompt positions are masked out either way."""
    import training.objectives.dpo.trainer as dpo_module

    result, _, _ = round_one
    monkeypatch.setattr(dpo_module, "COMPACT_LM_HEAD", False)
    plain = train_dpo(TRAIN, tiny_model(len(tokenizer)), tokenizer, CFG, tmp_path / "plain", None,
                      base_model_id=BASE_ID)
    assert plain.checksum == result.checksum


@pytest.mark.slow
def test_bf16_autocast_with_gradient_checkpointing(tokenizer, tmp_path):
    """train.dtype = bfloat16 (autocast) and gradient checkpointing also train on CPU: first loss ln 2, then lower."""
    cfg = dataclasses.replace(CFG, dtype="bfloat16", gradient_checkpointing=True)
    events: list[dict] = []
    train_dpo(TRAIN, tiny_model(len(tokenizer)), tokenizer, cfg, tmp_path / "bf16", None, events.append,
              base_model_id=BASE_ID)
    losses = [e["loss"] for e in events if "loss" in e]
    assert math.isclose(losses[0], math.log(2), abs_tol=1e-4) and min(losses[1:]) < losses[0]


def test_completion_logps_match_full_logits(tokenizer):
    """Our sparse LM-head computation equals log_softmax over the full logits, summed over completion tokens
    (including the appended EOS), for a batch with padding."""
    model = tiny_model(len(tokenizer)).eval()
    prompts, completions = [PAIRS[0].prompt, PAIRS[1].prompt], ["SEARCH: x", "ANSWER: a much longer answer"]
    got = completion_logps(model, tokenizer, prompts, completions, max_length=128)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        n_prompt = len(tokenizer(p)["input_ids"])
        ids = torch.tensor([tokenizer(p + c + tokenizer.eos_token)["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
        want = logp[torch.arange(n_prompt - 1, ids.shape[1] - 1), ids[0, n_prompt:]].sum()
        assert math.isclose(float(got[i]), float(want), rel_tol=1e-4)


def test_untrained_adapter_has_zero_margins(tokenizer):
    """A fresh LoRA (B = 0) computes the base model, so against the base every margin is 0 and accuracy is 0."""
    model = attach_lora(tiny_model(len(tokenizer)), CFG)
    margins = pair_margins(model, tokenizer, HELDOUT, beta=0.1, max_length=128, ref_adapter_name=None)
    assert margins == [0.0] * 4
    assert heldout_accuracy(model, tokenizer, HELDOUT, beta=0.1, max_length=128, ref_adapter_name=None) == 0.0


@pytest.mark.slow  # trains the tiny model once per module (~3-8 s)
def test_load_adapter_round_trip(round_one, tokenizer):
    """Loading the saved adapter onto a fresh base reproduces the trained policy's completion log-probs."""
    result, trained, _ = round_one
    loaded = load_adapter(tiny_model(len(tokenizer)), result.adapter_dir, BASE_ID)
    args = ([HELDOUT[0].prompt], [HELDOUT[0].chosen])
    trained.eval()
    assert torch.allclose(completion_logps(loaded, tokenizer, *args, max_length=128),
                          completion_logps(trained, tokenizer, *args, max_length=128), atol=1e-5)


# ---- data helpers ---------------------------------------------------------------------------------------------------

def test_pair_validation_and_conversational_round_trip(tokenizer):
    with pytest.raises(DatasetFormatError, match="identical"):
        PairExample("p", "SEARCH: a", "SEARCH: a")
    with pytest.raises(DatasetFormatError, match="non-empty"):
        PairExample("p", "", "ANSWER: b")
    conv = to_conversational(PAIRS[0])
    assert conv["prompt"] == [
        {"role": "system", "content": "You are a search agent."},
        {"role": "user", "content": "Question: who wrote hamlet"},
    ]
    assert conv["chosen"] == [{"role": "assistant", "content": "SEARCH: who wrote hamlet"}]
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    assert from_conversational(conv, tokenizer) == PAIRS[0]
    with pytest.raises(DatasetFormatError, match="assistant opener"):
        to_conversational(PairExample("plain text", "a", "b"))


def test_split_keeps_states_together():
    """Two pairs share each prompt; holdout 0.25 of 4 prompts -> 1 prompt (2 pairs) held out; deterministic."""
    pairs = [PairExample(chat(q), f"SEARCH: {q}", alt) for q in QUESTIONS[:4] for alt in ("ANSWER: x", "REFUSE")]
    train, held = split_pairs(pairs, 0.25, seed=3)
    assert len(held) == 2 and len(train) == 6 and len({p.prompt for p in held}) == 1
    assert not {p.prompt for p in held} & {p.prompt for p in train}
    assert split_pairs(pairs, 0.25, seed=3) == (train, held)


def test_fit_pairs_cuts_the_prompt_middle(tokenizer):
    """A long prompt is cut to fit max_length with its start (question) and end (assistant opener) intact;
    a completion that alone exceeds the budget drops the pair."""
    long_prompt = chat("who wrote hamlet " + "and the river through paris " * 40)
    pair = PairExample(long_prompt, "SEARCH: hamlet", "ANSWER: paris")
    report = fit_pairs([pair, PAIRS[0]], tokenizer, max_length=96)  # 967 prompt tokens; PAIRS[0] has 46 + 18
    assert report.truncated == 1 and report.dropped == 0 and report.pairs[1] == PAIRS[0]
    cut = report.pairs[0].prompt
    assert cut.startswith("<|im_start|>system") and cut.endswith("<|im_start|>assistant\n") and "…" in cut
    total = len(tokenizer(cut + pair.chosen + tokenizer.eos_token)["input_ids"])
    assert total <= 96 and "Question: who" in cut and "paris" in cut
    assert fit_pairs([PairExample("q", "SEARCH: " + "x " * 80, "ANSWER: y")], tokenizer, 96).dropped == 1


# ---- the embedded model -------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_two_steps_on_the_embedded_model(session_home, tmp_path):
    """SmolLM2-135M, 2 pairs, batch 1, max_length 128: two steps; first loss ln 2; the adapter verifies."""
    from evorag_core.lm.loading import load_model

    model, tok, folder = load_model("embedded", session_home, device="cpu")
    pairs = [PairExample(tok.apply_chat_template([{"role": "user", "content": f"Question: {q}"}], tokenize=False,
                                                 add_generation_prompt=True), f"SEARCH: {q}", "ANSWER: unknown")
             for q in QUESTIONS[:2]]
    cfg = dataclasses.replace(TrainConfig(), max_length=128, batch_size=1, epochs=1, lr=1e-4)
    result = train_dpo(pairs, model, tok, cfg, tmp_path / "adapter", None, None, base_model_id=str(folder))
    assert result.steps == 2 and math.isclose(result.metrics["first_loss"], math.log(2), abs_tol=1e-4)
    verify_adapter(result.adapter_dir, str(folder), model=model)  # LoRA-wrapped layers are checked via base_layer
    meta = json.loads((result.adapter_dir / "evorag_adapter.json").read_text())
    assert meta["n_train"] == 2 and meta["sha256"] == result.checksum


# ---- LoRA helpers ---------------------------------------------------------------------------------------------------

def test_lora_config_and_save_rules(tokenizer, tmp_path):
    """LoRA targets q/k/v/o with the configured rank; 2 layers x 4 projections x (A, B) = 16 tensors saved.
    Metadata must name round_id, objective, base_model_id and metrics; an existing folder needs overwrite=True."""
    from training.lora import lora_config, save_adapter

    lc = lora_config(CFG)
    assert set(lc.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj"} and lc.r == CFG.lora_r
    model = attach_lora(tiny_model(len(tokenizer)), CFG)
    meta = {"round_id": 0, "objective": "dpo", "base_model_id": BASE_ID, "metrics": {}}
    with pytest.raises(AdapterError, match="lacks metrics"):
        save_adapter(model, tmp_path / "a", {k: v for k, v in meta.items() if k != "metrics"})
    first = save_adapter(model, tmp_path / "a", meta)
    assert len(load_file(str(tmp_path / "a" / WEIGHTS_FILE))) == 16
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no temporary folder left behind
    with pytest.raises(AdapterError, match="already exists"):
        save_adapter(model, tmp_path / "a", meta)
    assert save_adapter(model, tmp_path / "a", {**meta, "round_id": 1}, overwrite=True) == first
    assert read_adapter_meta(tmp_path / "a")["round_id"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    with pytest.raises(AdapterError, match="already exists"):
        train_dpo(TRAIN, tiny_model(len(tokenizer)), tokenizer, CFG, tmp_path / "a", None, base_model_id=BASE_ID)
