"""Preference pairs for policy training: the record, TRL's formats, a leak-free split, and fitting max_length.

A `PairExample` is one state with two candidate actions: `prompt` is the full chat-formatted agent prompt (ending
with the assistant turn opener), `chosen` / `rejected` are completion strings such as "SEARCH: x" / "ANSWER: y".
TRL's standard format is the same three strings; its conversational format holds message lists, converted here.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from evorag_core.errors import DatasetFormatError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "PairExample",
    "FitReport",
    "to_conversational",
    "from_conversational",
    "split_pairs",
    "fit_pairs",
    "pairs_to_dataset",
]

_CHATML_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>\n?", re.DOTALL)
_GENERATION_PROMPT = "<|im_start|>assistant\n"
_CUT_MARKER = "\n…\n"


@dataclass(frozen=True)
class PairExample:
    prompt: str
    chosen: str
    rejected: str

    def __post_init__(self) -> None:
        for name in ("prompt", "chosen", "rejected"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise DatasetFormatError("<pair>", None, name, f"must be a non-empty string, got {value!r}")
        if self.chosen == self.rejected:
            raise DatasetFormatError("<pair>", None, "rejected", "chosen and rejected completions are identical")


def to_conversational(pair: PairExample) -> dict[str, list[dict[str, str]]]:
    """TRL's conversational form of a pair whose prompt is ChatML text ending with the assistant opener."""
    body = pair.prompt
    if not body.endswith(_GENERATION_PROMPT):
        raise DatasetFormatError("<pair>", None, "prompt", "does not end with the ChatML assistant opener")
    body = body[: -len(_GENERATION_PROMPT)]
    messages, pos = [], 0
    for match in _CHATML_TURN.finditer(body):
        if body[pos : match.start()].strip():
            raise DatasetFormatError("<pair>", None, "prompt", f"text outside ChatML turns at offset {pos}")
        messages.append({"role": match.group(1), "content": match.group(2)})
        pos = match.end()
    if not messages or body[pos:].strip():
        raise DatasetFormatError("<pair>", None, "prompt", "is not a sequence of ChatML turns")
    return {
        "prompt": messages,
        "chosen": [{"role": "assistant", "content": pair.chosen}],
        "rejected": [{"role": "assistant", "content": pair.rejected}],
    }


def from_conversational(record: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase) -> PairExample:
    """A pair from TRL's conversational record; the prompt is rendered with the tokenizer's chat template."""
    try:
        prompt = tokenizer.apply_chat_template(list(record["prompt"]), tokenize=False, add_generation_prompt=True)
        chosen, rejected = record["chosen"][-1]["content"], record["rejected"][-1]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise DatasetFormatError("<pair>", None, None, f"not a conversational preference record: {exc}") from None
    return PairExample(prompt=prompt, chosen=chosen, rejected=rejected)


def split_pairs(
    pairs: Sequence[PairExample], holdout: float, seed: int
) -> tuple[list[PairExample], list[PairExample]]:
    """(train, heldout) with about `holdout` of the *prompts* held out: pairs of one state never straddle the split.

    Deterministic in `seed`; the order within each part follows the input order.
    """
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {holdout}")
    prompts = list(dict.fromkeys(p.prompt for p in pairs))
    random.Random(seed).shuffle(prompts)
    n_held = round(holdout * len(prompts))
    if holdout > 0 and len(prompts) >= 2:
        n_held = min(max(n_held, 1), len(prompts) - 1)
    held = set(prompts[:n_held])
    return [p for p in pairs if p.prompt not in held], [p for p in pairs if p.prompt in held]


@dataclass(frozen=True)
class FitReport:
    pairs: tuple[PairExample, ...]
    truncated: int  # prompts shortened in the middle
    dropped: int  # pairs whose completions alone do not fit


def fit_pairs(pairs: Sequence[PairExample], tokenizer: PreTrainedTokenizerBase, max_length: int, *,
              min_prompt: int = 32) -> FitReport:
    """Shorten prompts so that prompt + longer completion + EOS fits `max_length` tokens.

    TRL keeps the *start* of an over-long sequence and drops pairs whose prompt fills max_length, which would cut
    the completion we are training on. We cut the prompt's middle instead: the first third of the budget (system
    prompt, question) and the rest from its end (latest hops, assistant opener) survive, joined by "\n…\n".
    Pairs that leave fewer than `min_prompt` prompt tokens are dropped.
    """
    kept: list[PairExample] = []
    truncated = dropped = 0
    for pair in pairs:
        completion = max(_n_tokens(tokenizer, pair.chosen), _n_tokens(tokenizer, pair.rejected)) + 1  # + EOS
        budget = max_length - completion - 2  # slack for merges at the prompt/completion boundary
        if budget < min_prompt:
            dropped += 1
            continue
        ids = tokenizer(pair.prompt, add_special_tokens=False)["input_ids"]
        if len(ids) <= budget:
            kept.append(pair)
            continue
        kept.append(PairExample(_cut_middle(tokenizer, ids, budget), pair.chosen, pair.rejected))
        truncated += 1
    return FitReport(pairs=tuple(kept), truncated=truncated, dropped=dropped)


def _n_tokens(tokenizer: PreTrainedTokenizerBase, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _cut_middle(tokenizer: PreTrainedTokenizerBase, ids: list[int], budget: int) -> str:
    room = budget - _n_tokens(tokenizer, _CUT_MARKER)
    for _ in range(8):  # decoding and re-encoding can merge a token or two at the seams; shrink until it fits
        head = room // 3
        text = tokenizer.decode(ids[:head]) + _CUT_MARKER + tokenizer.decode(ids[len(ids) - (room - head) :])
        if _n_tokens(tokenizer, text) <= budget:
            return text
        room -= 2
    return text


def pairs_to_dataset(pairs: Sequence[PairExample]):
    """A `datasets.Dataset` in TRL's standard preference format (prompt, chosen, rejected columns)."""
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "prompt": [p.prompt for p in pairs],
            "chosen": [p.chosen for p in pairs],
            "rejected": [p.rejected for p in pairs],
        }
    )
