"""Per-token log-probs of completions after prompts, with gradients, for the step-level objectives (GRPO, PPO).

Tokens follow the policy's boundary rule (`evorag_core.lm.base.encode_pair`): the prompt's ids, then the
completion's ids, each encoded without special tokens and no EOS — so a completion's summed log-prob here equals
`backend.sequence_logprob(prompt, completion)` at sampling time. A prompt longer than the budget loses its middle:
its head (HEAD_SHARE = 1/6 of the budget: the system prompt) and its tail (the current user turn — question, hops —
and the assistant opener) are kept, joined by the ids of "\n…\n". The agent prompt puts the demonstration episode
between the system prompt and the current turn, so the demonstration is what is cut first (`training.objectives.dpo.data.fit_pairs`
keeps a third at the head; `fit_text` applies this rule to DPO's text prompts first). Only completion positions go
through the LM head, so the `[B, T, vocab]` logits are never built.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch
from torch import Tensor

from evorag_core.lm.base import encode_pair

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["HEAD_SHARE", "Encoded", "encode", "fit_prompt", "fit_text", "completion_token_logps", "base_lm"]

_CUT_MARKER = "\n…\n"
HEAD_SHARE = 1 / 6


@dataclass(frozen=True)
class Encoded:
    """A right-padded batch. `completion_mask[b, j]` marks the j-th completion token of row b; `starts[b]` is the
    index of row b's first completion token in `input_ids`; `prompt_lengths[b]` = starts[b]."""

    input_ids: Tensor  # [B, L] long
    attention_mask: Tensor  # [B, L] long
    completion_mask: Tensor  # [B, C] float, C = longest completion
    starts: tuple[int, ...]
    lengths: tuple[int, ...]  # completion lengths
    truncated: int  # prompts whose middle was cut


def fit_prompt(prompt_ids: list[int], budget: int, marker_ids: list[int]) -> list[int]:
    """`prompt_ids` if it fits `budget`, else its head (HEAD_SHARE of the room) + marker + its end, exactly
    `budget` ids long."""
    if len(prompt_ids) <= budget:
        return prompt_ids
    room = budget - len(marker_ids)
    if room < 2:
        raise ValueError(f"a prompt budget of {budget} tokens leaves no room for the prompt")
    head = int(room * HEAD_SHARE)
    return prompt_ids[:head] + marker_ids + prompt_ids[len(prompt_ids) - (room - head):]


def fit_text(tokenizer: PreTrainedTokenizerBase, prompt: str, budget: int) -> str:
    """`prompt` as text, cut like `fit_prompt` to about `budget` tokens (4 tokens of slack: decoding and encoding
    again can merge a token or two at the seams)."""
    ids = encode_pair(tokenizer, prompt, "")[0]
    if len(ids) <= budget:
        return prompt
    room = budget - len(encode_pair(tokenizer, _CUT_MARKER, "")[0]) - 4
    if room < 2:
        raise ValueError(f"a prompt budget of {budget} tokens leaves no room for the prompt")
    head = int(room * HEAD_SHARE)
    return tokenizer.decode(ids[:head]) + _CUT_MARKER + tokenizer.decode(ids[len(ids) - (room - head):])


def encode(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], completions: Sequence[str],
           max_length: int) -> Encoded:
    """Tokenise (prompt, completion) rows under the boundary rule, cutting prompts to fit `max_length`."""
    if len(prompts) != len(completions) or not prompts:
        raise ValueError(f"need as many prompts as completions (>= 1), got {len(prompts)} and {len(completions)}")
    marker = encode_pair(tokenizer, _CUT_MARKER, "")[0]
    rows: list[tuple[list[int], list[int]]] = []
    truncated = 0
    for prompt, completion in zip(prompts, completions):
        p, c = encode_pair(tokenizer, prompt, completion)
        if not c:
            raise ValueError(f"empty completion after prompt ...{prompt[-40:]!r}")
        c = c[: max(1, max_length // 2)]
        fitted = fit_prompt(p, max_length - len(c), marker)
        truncated += len(fitted) != len(p)
        rows.append((fitted, c))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    length = max(len(p) + len(c) for p, c in rows)
    width = max(len(c) for _, c in rows)
    ids = torch.full((len(rows), length), int(pad), dtype=torch.long)
    attention = torch.zeros((len(rows), length), dtype=torch.long)
    cmask = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, (p, c) in enumerate(rows):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attention[i, : len(p) + len(c)] = 1
        cmask[i, : len(c)] = 1.0
    return Encoded(ids, attention, cmask, tuple(len(p) for p, _ in rows), tuple(len(c) for _, c in rows), truncated)


def base_lm(model: PreTrainedModel | PeftModel) -> PreTrainedModel:
    """The causal LM under a peft wrapper (its LoRA layers stay active), or the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def completion_token_logps(model: PreTrainedModel | PeftModel, batch: Encoded, *,
                           with_hidden: bool = False) -> tuple[Tensor, Tensor | None]:
    """(log π(token) per completion token `[B, C]` float32 (0 where `completion_mask` is 0), last hidden states
    `[B, L, H]` or None). Gradients flow when called outside `torch.no_grad()`."""
    lm = base_lm(model)
    device = next(lm.parameters()).device
    hidden = lm.base_model(
        input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device)
    ).last_hidden_state
    rows, cols, positions = [], [], []
    for b, (start, n) in enumerate(zip(batch.starts, batch.lengths)):
        rows += [b] * n
        cols += list(range(n))
        positions += list(range(start - 1, start + n - 1))  # position t predicts token t + 1
    rows_t = torch.tensor(rows, device=device)
    pos_t = torch.tensor(positions, device=device)
    logits = lm.get_output_embeddings()(hidden[rows_t, pos_t]).float()
    targets = batch.input_ids.to(device)[rows_t, pos_t + 1]
    picked = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    out = torch.zeros(batch.completion_mask.shape, dtype=torch.float32, device=device)
    out = out.index_put((rows_t, torch.tensor(cols, device=device)), picked)
    return out, (hidden if with_hidden else None)
