"""A tiny random Llama with a ChatML tokenizer, saved as a model folder: fast stand-in for the policy model in
tests and smoke runs (`policy.model = <folder>`); every code path (loading, prompts, LoRA, rounds) stays the real one.

    python -m tests.tiny_model OUT_DIR [--text FILE ...]

The tokenizer is a byte-level BPE (any text encodes) trained on the system prompt, the demonstration and the given
texts, with ChatML's special tokens and chat template, so `apply_chat_template` renders prompts as SmolLM2's does.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterable

__all__ = ["CHATML_TEMPLATE", "build_tiny_model"]

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_model(
    out_dir: Path, texts: Iterable[str] = (), *, vocab_size: int = 512, hidden_size: int = 64, layers: int = 2,
    seed: int = 0,
) -> Path:
    """Write config, safetensors weights and tokenizer of a random `layers`-layer Llama to `out_dir`; returns it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from evorag_core.policy.prompts import SYSTEM_PROMPT, demo_turns

    corpus = [SYSTEM_PROMPT, *[u + "\n" + a for u, a in demo_turns(300)], *texts,
              "SEARCH: ANSWER: BACKTRACK REFUSE Question: Step of Your action:"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                        pad_token="<|im_end|>")
    tokenizer.chat_template = CHATML_TEMPLATE
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
            tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        model = LlamaForCausalLM(config)
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--text", type=Path, action="append", default=[], help="extra text to train the tokenizer on")
    args = parser.parse_args(argv)
    print(build_tiny_model(args.out_dir, [p.read_text(encoding="utf-8") for p in args.text]))


if __name__ == "__main__":
    main()
