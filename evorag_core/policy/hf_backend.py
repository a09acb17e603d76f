"""`TransformersBackend`: the policy LM in transformers, with a prefix KV cache and a hand-written decode loop.

- Prefix reuse: the backend keeps the KV cache of the last token sequence it ran. A new prompt is compared token
  by token with it; only the tokens after the longest common prefix are run (an episode's prompt grows by
  appending, so a step costs its new tokens, not the whole prompt).
- `score_choices` runs all continuations in ONE extra forward on top of the cached prompt: they are laid out one
  after the other in a single row with a block attention mask (each continuation sees the prompt and itself) and
  their own position ids, so no copy of the prompt cache is made.
- `generate(n>1)` runs the prompt once and copies its cache into n rows; all samples decode together.
- Changing the active LoRA adapter drops the cache (its keys/values belong to the old weights).
All computation runs under `torch.inference_mode()`; log-probs are float32.
"""
from __future__ import annotations

import secrets
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import torch

from ..config import PolicyConfig, home_dir
from .base import Generation, encode_pair
from .kv_cache import PrefixCache, common_prefix_length, fork_cache, growing_cache
from .loading import load_model
from .lora import AdapterSet

__all__ = ["TransformersBackend"]

_KEEP_LOGPROBS = 4  # next-token distributions remembered at recent prompt ends


class TransformersBackend:
    """See the module docstring. `TransformersBackend(cfg, home)` loads `cfg.model` (PolicyConfig); `from_model`
    wraps a model that is already loaded."""

    def __init__(self, cfg: PolicyConfig | None = None, home: Path | None = None) -> None:
        cfg = cfg if cfg is not None else PolicyConfig()
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        start = time.perf_counter()
        model, tokenizer, folder = load_model(
            cfg.model, home if home is not None else home_dir(), device=cfg.device, dtype=cfg.dtype
        )
        self._setup(model, tokenizer, cfg.model if cfg.model != "embedded" else f"embedded:{folder.name}")
        self.load_seconds = time.perf_counter() - start

    @classmethod
    def from_model(cls, model, tokenizer, *, model_id: str) -> "TransformersBackend":
        backend = cls.__new__(cls)
        backend._setup(model, tokenizer, model_id)
        return backend

    def _setup(self, model, tokenizer, model_id: str) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.model_id = model_id
        param = next(model.parameters())
        self.device = str(param.device)
        self.dtype = str(param.dtype).removeprefix("torch.")
        self.max_block_tokens = 1024  # continuations scored in one forward, at most this many tokens
        self.tokens_generated = 0
        self.prompt_tokens = 0  # prompt tokens actually run (cache misses)
        self.cached_prompt_tokens = 0  # prompt tokens served from the prefix cache
        self.load_seconds = 0.0
        self._prefix = PrefixCache(growing_cache(model.config.get_text_config().num_hidden_layers))
        self._adapters = AdapterSet(model)
        self._end_ids = self._collect_end_ids()

    def _collect_end_ids(self) -> frozenset[int]:
        """Generation stops at end-of-sequence and at any special token (none can be part of an argument)."""
        ends = set(self.tokenizer.all_special_ids)
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ends.update(gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos] if gen_eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ends.add(self.tokenizer.eos_token_id)
        return frozenset(ends)

    # -- prompts ---------------------------------------------------------------------------------------------

    def chat_prompt(self, system: str, user: str, examples: Sequence[tuple[str, str]] = ()) -> str:
        """The chat template over: system turn, (user, assistant) example pairs, the user turn; ready for the reply."""
        messages = [{"role": "system", "content": system}]
        for question, reply in examples:
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
        messages.append({"role": "user", "content": user})
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # a base model without a chat template
        return "".join(f"{m['role'].capitalize()}: {m['content']}\n\n" for m in messages) + "Assistant:"

    def encode(self, text: str) -> list[int]:
        return encode_pair(self.tokenizer, text, "")[0]

    # -- forward passes --------------------------------------------------------------------------------------

    def _forward(self, ids: torch.Tensor, cache, *, keep: int = 0, positions=None, mask=None) -> torch.Tensor:
        out = self.model(
            input_ids=ids.to(self.model.device),
            past_key_values=cache,
            use_cache=True,
            position_ids=positions,
            attention_mask=mask,
            logits_to_keep=keep,
        )
        return out.logits

    @contextmanager
    def _dropping_cache_on_error(self):
        """An interrupted forward may leave some layers longer than others: forget the cache then."""
        try:
            yield
        except BaseException:
            self._prefix = PrefixCache(growing_cache(len(self._prefix.cache.layers)))
            raise

    def _prefill(self, prompt_ids: list[int]) -> torch.Tensor:
        """Next-token log-probs after `prompt_ids` (float32, shape [vocab]); leaves the cache holding the prompt."""
        if not prompt_ids:
            raise ValueError("the prompt must not be empty")
        pc, n = self._prefix, len(prompt_ids)
        lcp = common_prefix_length(pc.ids, prompt_ids)
        if lcp == n and n in pc.next_logprobs:
            pc.crop_to(n)
            self.cached_prompt_tokens += n
            return pc.next_logprobs[n]
        start = min(lcp, n - 1)
        pc.crop_to(start)
        with self._dropping_cache_on_error():
            logits = self._forward(torch.tensor([prompt_ids[start:]]), pc.cache, keep=1)
        pc.ids.extend(prompt_ids[start:])
        logprobs = torch.log_softmax(logits[0, -1].float(), dim=-1)
        pc.next_logprobs[n] = logprobs
        for old in sorted(pc.next_logprobs)[:-_KEEP_LOGPROBS]:
            del pc.next_logprobs[old]
        self.prompt_tokens += n - start
        self.cached_prompt_tokens += start
        return logprobs

    def _block_logprobs(self, prompt_len: int, conts: list[list[int]]) -> list[float]:
        """Sum of log-probs of tokens 1.. of each continuation, all continuations in one row after the prompt."""
        feeds = [c[:-1] for c in conts]
        ids = [t for f in feeds for t in f]
        q = len(ids)
        dtype = next(self.model.parameters()).dtype
        mask = torch.full((q, prompt_len + q), torch.finfo(dtype).min, dtype=dtype)
        mask[:, :prompt_len] = 0
        positions, offset = [], 0
        for f in feeds:
            block = torch.ones(len(f), len(f), dtype=torch.bool).tril()
            view = mask[offset : offset + len(f), prompt_len + offset : prompt_len + offset + len(f)]
            view.masked_fill_(block, 0)
            positions.extend(range(prompt_len, prompt_len + len(f)))
            offset += len(f)
        device = self.model.device
        with self._dropping_cache_on_error():
            logits = self._forward(
                torch.tensor([ids]),
                self._prefix.cache,
                positions=torch.tensor([positions], device=device),
                mask=mask[None, None].to(device),
            )
        self._prefix.cache.crop(-q)
        logprobs = torch.log_softmax(logits[0].float(), dim=-1)
        sums, offset = [], 0
        for c in conts:
            rows = torch.arange(offset, offset + len(c) - 1, device=logprobs.device)
            targets = torch.tensor(c[1:], device=logprobs.device)
            sums.append(float(logprobs[rows, targets].sum()))
            offset += len(c) - 1
        return sums

    # -- public scoring --------------------------------------------------------------------------------------

    @torch.inference_mode()
    def score_choices(self, prompt: str, choices: Sequence[str]) -> list[float]:
        prompt_ids = self.encode(prompt)
        conts = [encode_pair(self.tokenizer, "", c)[1] for c in choices]
        first = self._prefill(prompt_ids)
        scores = [float(first[c[0]]) if c else 0.0 for c in conts]
        longer = [i for i, c in enumerate(conts) if len(c) > 1]
        for group in _pack(longer, [len(conts[i]) for i in longer], self.max_block_tokens):
            for i, s in zip(group, self._block_logprobs(len(prompt_ids), [conts[i] for i in group])):
                scores[i] += s
        return scores

    def sequence_logprob(self, prompt: str, completion: str) -> float:
        return self.score_choices(prompt, [completion])[0]

    def sequence_logprobs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """log P(completion | prompt) for each pair; pairs sharing a prompt are scored together."""
        out: list[float] = [0.0] * len(pairs)
        by_prompt: dict[str, list[int]] = {}
        for i, (prompt, _) in enumerate(pairs):
            by_prompt.setdefault(prompt, []).append(i)
        for prompt, idx in by_prompt.items():
            for i, s in zip(idx, self.score_choices(prompt, [pairs[i][1] for i in idx])):
                out[i] = s
        return out

    # -- generation ------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(
        self,
        prompt: str,
        max_new_tokens: int,
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        n: int = 1,
        seed: int | None = None,
        *,
        ignore_eos: bool = False,
    ) -> list[Generation]:
        """Greedy (temperature <= 0) or sampled continuations; n > 1 samples decode as one batch.
        `ignore_eos` keeps going through end tokens (for benchmarks: always max_new_tokens tokens)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if max_new_tokens <= 0:
            return [Generation("", (), (), "length") for _ in range(n)]
        prompt_ids = self.encode(prompt)
        logprobs = self._prefill(prompt_ids).unsqueeze(0).expand(n, -1)
        rng = torch.Generator(device=logprobs.device).manual_seed(seed if seed is not None else secrets.randbits(62))
        cache = self._prefix.cache if n == 1 else fork_cache(self._prefix.cache, n, max_new_tokens)
        rows = [_Row() for _ in range(n)]
        fed: list[int] = []
        with self._dropping_cache_on_error():
            for _ in range(max_new_tokens):
                picks = _pick(logprobs, temperature, rng)
                chosen = logprobs.gather(1, picks.unsqueeze(1)).squeeze(1).tolist()
                for row, tok, lp in zip(rows, picks.tolist(), chosen):
                    if not row.done:
                        self._advance(row, tok, lp, stop, max_new_tokens, ignore_eos)
                if all(row.done for row in rows):
                    break
                logits = self._forward(picks.unsqueeze(1), cache, keep=1)
                logprobs = torch.log_softmax(logits[:, -1].float(), dim=-1)
                fed.append(int(picks[0]))
            if n == 1:
                self._prefix.ids.extend(fed)
        self.tokens_generated += sum(len(row.tokens) for row in rows)
        return [row.result(self.tokenizer) for row in rows]

    def _advance(self, row: "_Row", tok: int, logprob: float, stop: Sequence[str], max_new_tokens: int,
                 ignore_eos: bool) -> None:
        if tok in self._end_ids and not ignore_eos:
            row.finish = "stop"
            return
        if stop:
            text = self.tokenizer.decode(row.tokens + [tok])
            if any(s in text for s in stop):
                row.finish = "stop"
                return
        row.tokens.append(tok)
        row.logprobs.append(logprob)
        if len(row.tokens) >= max_new_tokens:
            row.finish = "length"

    # -- adapters --------------------------------------------------------------------------------------------

    def load_adapter(self, name: str, path: Path | str) -> None:
        """Inject LoRA adapter `name` from `path` (not activated). Raises AdapterError; the active one is kept."""
        try:
            self._adapters.load(name, path)
        finally:
            self._prefix.clear()

    def unload_adapter(self, name: str) -> None:
        self._adapters.unload(name)
        self._prefix.clear()

    def list_adapters(self) -> list[str]:
        return self._adapters.names()

    def activate(self, name: str | None) -> None:
        """Make adapter `name` (None: the base model) the one used by every later call."""
        if name != self._adapters.active:
            self._adapters.activate(name)
            self._prefix.clear()

    @property
    def active_adapter(self) -> str | None:
        return self._adapters.active

    def reset_cache(self) -> None:
        self._prefix.clear()


class _Row:
    __slots__ = ("tokens", "logprobs", "finish")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.finish: str | None = None

    @property
    def done(self) -> bool:
        return self.finish is not None

    def result(self, tokenizer) -> Generation:
        text = tokenizer.decode(self.tokens) if self.tokens else ""
        return Generation(text, tuple(self.tokens), tuple(self.logprobs), self.finish or "length")


def _pack(items: list[int], sizes: list[int], budget: int) -> list[list[int]]:
    """Consecutive groups of `items` whose sizes add up to at most `budget` (an oversized item goes alone)."""
    groups: list[list[int]] = []
    total = 0
    for item, size in zip(items, sizes):
        if not groups or total + size > budget:
            groups.append([])
            total = 0
        groups[-1].append(item)
        total += size
    return groups


def _pick(logprobs: torch.Tensor, temperature: float, rng: torch.Generator) -> torch.Tensor:
    """One token per row: argmax, or a draw from softmax(logprobs / temperature)."""
    if temperature <= 0:
        return logprobs.argmax(dim=-1)
    probs = torch.softmax(logprobs / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=rng).squeeze(1)
