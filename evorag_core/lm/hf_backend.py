"""`TransformersBackend`: the policy LM in transformers, with a prefix KV cache and a hand-written decode loop.

- Prefix reuse: the backend keeps the KV caches of the last few token sequences it ran (`kv_cache.PrefixPool`). A
  new prompt is compared token by token with them; only the tokens after the longest common prefix are run (an
  episode's prompt grows by appending, so a step costs its new tokens, not the whole prompt).
- `score_choices` runs all continuations in ONE extra forward on top of the cached prompt: they are laid out one
  after the other in a single row with a block attention mask (each continuation sees the prompt and itself) and
  their own position ids, so no copy of the prompt cache is made.
- `generate(n>1)` runs the prompt once and copies its cache into n rows; all samples decode together.
- Changing the active LoRA adapter drops the cache (its keys/values belong to the old weights).
- `interruptible(event)`: generations inside stop before their next token once `event` is set
  (`GenerationInterrupted`; the cache of the interrupted call is dropped), so the studio's Stop ends a decode at once.
- Decode steps of an fp32 model on the CPU read fp16 copies of the weights (`half_decode.py`,
  `policy.half_decode_rows`): a batch-1 step streams every weight once, and half the bytes make it ~3x faster here.
  Prompt forwards (prefill) of more than `half_decode_rows` tokens run the block linears through bf16 copies when
  `policy.prefill_dtype` resolves to "bfloat16" (the default "auto" does on CPUs with AVX512-BF16 or AMX;
  1.3-1.5x faster here), and attend over bf16 copies of their queries/keys/values (`gqa_attention.py`; 1.4x
  faster again for 300 tokens over 900 cached on an AMX Xeon); the KV cache and the logits stay fp32.
  Continuations scored on top of a prompt, and every forward with gradients, stay fp32.
- On the CPU, masked forwards of several tokens (continuations scored in one row, padded batches) attend with the
  grouped keys as they are (`gqa_attention.py`) instead of transformers' copy of the cached keys to every head
  (1.07-1.18x for 2-16 tokens over a ~900-token prompt).
All computation runs under `torch.inference_mode()`; log-probs are float32.
"""
from __future__ import annotations

import secrets
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator, Sequence

import torch

from evorag_core.config import PolicyConfig, home_dir
from evorag_core.errors import ConfigError, GenerationInterrupted
from evorag_core.lm.base import grouped_sequence_logprobs, Generation, encode_pair
from evorag_core.lm.half_decode import bf16_prefill, enable_half_decode, half_decode, resolve_prefill_dtype
from evorag_core.lm.cascade import shared_prefix_attention, supports_cascade
from evorag_core.lm.gqa_attention import bf16_prompt_attention, use_grouped_sdpa
from evorag_core.lm.kv_cache import (PrefixCache, PrefixPool, SharedPrefixLayer, cache_kwargs, common_prefix_length, fork_cache,
                       growing_cache, shared_prefix_cache)
from evorag_core.lm.loading import load_model
from evorag_core.adapters.weights import AdapterSet

__all__ = ["TransformersBackend"]

_KEEP_LOGPROBS = 4  # next-token distributions remembered at recent prompt ends
_PREFIX_SLOTS = 3  # prefix caches kept at once (e.g. agent prompt, judge prompt, one more)


class TransformersBackend:
    """See the module docstring. `TransformersBackend(cfg, home)` loads `cfg.model` (PolicyConfig); `from_model`
    wraps a model that is already loaded."""

    def __init__(self, cfg: PolicyConfig | None = None, home: Path | None = None) -> None:
        cfg = cfg if cfg is not None else PolicyConfig()
        try:
            bf16 = resolve_prefill_dtype(cfg.prefill_dtype) == "bfloat16"
        except ValueError as exc:
            raise ConfigError(f"policy.prefill_dtype: {exc}") from None
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        start = time.perf_counter()
        model, tokenizer, folder = load_model(
            cfg.model, home if home is not None else home_dir(), device=cfg.device, dtype=cfg.dtype
        )
        self._setup(model, tokenizer, cfg.model if cfg.model != "embedded" else f"embedded:{folder.name}")
        self.shared_prefix = self.shared_prefix and cfg.shared_prefix_siblings
        if cfg.half_decode_rows > 0 or bf16:
            converted = enable_half_decode(model, max(cfg.half_decode_rows, 1), prefill_bf16=bf16)
            self.half_decode_linears = converted if cfg.half_decode_rows > 0 else 0
            self.bf16_prefill_linears = sum(1 for m in model.modules() if getattr(m, "prefill_copy", False))
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
        self.half_decode_linears = 0  # linears decoding with fp16 weight copies (see half_decode.py)
        self.bf16_prefill_linears = 0  # linears prefilling with bf16 weight copies (policy.prefill_dtype)
        self.cache_epoch = 0  # +1 at every reset_cache (adapter loads and switches included)
        # siblings share the prompt's cache through cascade attention (policy/cascade.py): CPU, supported models
        self.shared_prefix = self.device == "cpu" and supports_cascade(model)
        # masked forwards of several tokens attend with grouped keys instead of copying them (gqa_attention.py)
        self.grouped_sdpa = use_grouped_sdpa(model)
        self._num_layers = model.config.get_text_config().num_hidden_layers
        self._pool = PrefixPool(self._num_layers, slots=_PREFIX_SLOTS)
        self._prefix = PrefixCache(growing_cache(self._num_layers))  # the pool's entry of the current call
        self._adapters = AdapterSet(model)
        self._end_ids = self._collect_end_ids()
        self._interrupt: threading.Event | None = None  # set by `interruptible`

    @contextmanager
    def interruptible(self, event: threading.Event) -> Iterator[None]:
        """Generations started inside stop before their next token once `event` is set (GenerationInterrupted)."""
        previous, self._interrupt = self._interrupt, event
        try:
            yield
        finally:
            self._interrupt = previous

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
            **cache_kwargs(self.model, cache),
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
            self._pool.discard(self._prefix)
            self._prefix = PrefixCache(growing_cache(self._num_layers))
            raise

    @contextmanager
    def _prompt_precision(self) -> Iterator[None]:
        """The context prompt forwards run in: with `policy.prefill_dtype = "bfloat16"`, bf16 weight copies for the
        block linears and, where attention is GROUPED_SDPA, bf16 attention (gqa_attention.py)."""
        if not self.bf16_prefill_linears:
            yield
            return
        with bf16_prefill(self.model), (bf16_prompt_attention() if self.grouped_sdpa else nullcontext()):
            yield

    def _prefill(self, prompt_ids: list[int]) -> torch.Tensor:
        """Next-token log-probs after `prompt_ids` (float32, shape [vocab]); leaves the cache holding the prompt."""
        if not prompt_ids:
            raise ValueError("the prompt must not be empty")
        self._prefix = pc = self._pool.select(prompt_ids)
        n = len(prompt_ids)
        lcp = common_prefix_length(pc.ids, prompt_ids)
        if lcp == n and n in pc.next_logprobs:
            pc.crop_to(n)
            self.cached_prompt_tokens += n
            return pc.next_logprobs[n]
        start = min(lcp, n - 1)
        pc.crop_to(start)
        with self._dropping_cache_on_error(), self._prompt_precision():
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
        return grouped_sequence_logprobs(self.score_choices, pairs)

    # -- generation ------------------------------------------------------------------------------------------

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
        return self.generate_batch([prompt] * n, max_new_tokens, stop, temperature, seed, ignore_eos=ignore_eos)

    @torch.inference_mode()
    def generate_batch(
        self,
        prompts: Sequence[str],
        max_new_tokens: int | Sequence[int],
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        seed: int | None = None,
        *,
        ignore_eos: bool = False,
    ) -> list[Generation]:
        """One continuation per prompt, decoded as one batch (a per-prompt token limit is allowed). Prompts that
        share a prefix (e.g. the agent prompt + "SEARCH:" and + "ANSWER:") run that prefix once."""
        limits = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
        if len(limits) != len(prompts):
            raise ValueError("max_new_tokens must be an int or one limit per prompt")
        if not prompts or max(limits) <= 0:
            return [Generation("", (), (), "length") for _ in prompts]
        ids = [self.encode(p) for p in prompts]
        rng = torch.Generator(device=self.model.device)
        rng.manual_seed(seed if seed is not None else secrets.randbits(62))
        n = len(ids)
        if all(i == ids[0] for i in ids):
            logprobs = self._prefill(ids[0]).unsqueeze(0).expand(n, -1)
            cache = self._prefix.cache if n == 1 else self._fork(self._prefix.cache, n, max(limits))
            batch = _Batch(cache, logprobs)
        else:
            batch = self._start_suffixes(ids, max(limits))
        rows = [_Row(limit) for limit in limits]
        with (self._dropping_cache_on_error(), self._attention(batch.cache),
              half_decode(self.model) if self.half_decode_linears else nullcontext()):
            fed = self._decode(batch, rows, stop, temperature, rng, ignore_eos)
            if n == 1:
                self._prefix.ids.extend(fed)
        self.tokens_generated += sum(len(row.tokens) for row in rows)
        return [row.result(self.tokenizer) for row in rows]

    def _start_suffixes(self, ids: list[list[int]], room: int) -> "_Batch":
        """Run the common prefix once (prefix cache), copy it into one row per distinct prompt, run the distinct
        suffixes in one right-padded forward (pads masked out by a 2-D attention mask, positions per row), then give
        every prompt its row."""
        distinct = list(dict.fromkeys(map(tuple, ids)))
        row_of = torch.tensor([distinct.index(tuple(i)) for i in ids])
        common = min(min(len(i) for i in ids) - 1, *(common_prefix_length(ids[0], i) for i in ids[1:]))
        if common > 0:
            self._prefill(ids[0][:common])
            cache = self._fork(self._prefix.cache, len(distinct), room + max(len(i) for i in ids) - common)
        else:
            cache = growing_cache(self._num_layers)
        suffixes = [list(i[common:]) for i in distinct]
        width = max(len(x) for x in suffixes)
        tokens = torch.tensor([x + [x[-1]] * (width - len(x)) for x in suffixes])
        mask = torch.tensor([[1] * (common + len(x)) + [0] * (width - len(x)) for x in suffixes])
        lengths = torch.tensor([len(x) for x in suffixes])
        positions = common + torch.arange(width).unsqueeze(0).expand(len(suffixes), -1)
        device = self.model.device
        with self._prompt_precision(), self._attention(cache):
            logits = self._forward(tokens, cache, positions=positions.to(device), mask=mask.to(device))
        last = logits[torch.arange(len(suffixes)), lengths.to(logits.device) - 1]
        self.prompt_tokens += int(lengths.sum())
        batch = _Batch(cache, torch.log_softmax(last.float(), dim=-1), mask.to(device), (common + lengths).to(device))
        if len(distinct) < len(ids):
            batch.select(row_of.to(device))
        return batch

    def _fork(self, cache, rows: int, room: int):
        """`rows` rows continuing the one-row `cache`: sharing it (cascade attention) where supported, else copies."""
        return shared_prefix_cache(cache, rows, room) if self.shared_prefix else fork_cache(cache, rows, room)

    def _attention(self, cache):
        """The context forwards over `cache` run in: cascade attention for a shared-prefix cache."""
        if any(isinstance(layer, SharedPrefixLayer) for layer in cache.layers):
            return shared_prefix_attention(self.model, cache)
        return nullcontext()

    def _decode(self, batch: "_Batch", rows: list["_Row"], stop, temperature, rng, ignore_eos) -> list[int]:
        """Sample until every row is done; finished rows leave the batch. Returns row 0's fed tokens."""
        live = list(range(len(rows)))  # rows still decoding = the batch rows, in order
        logprobs, fed = batch.logprobs, []
        while True:
            if self._interrupt is not None and self._interrupt.is_set():
                raise GenerationInterrupted("the generation was stopped")
            picks = _pick(logprobs, temperature, rng)
            chosen = logprobs.gather(1, picks.unsqueeze(1)).squeeze(1).tolist()
            for r, tok, lp in zip(live, picks.tolist(), chosen):
                self._advance(rows[r], tok, lp, stop, ignore_eos)
            keep = [i for i, r in enumerate(live) if not rows[r].done]
            if not keep:
                return fed
            if len(keep) < len(live):  # later steps cost less
                index = torch.tensor(keep, device=picks.device)
                batch.select(index)
                picks = picks[index]
                live = [live[i] for i in keep]
            logits = self._forward(picks.unsqueeze(1), batch.cache, keep=1, **batch.step_inputs())
            logprobs = torch.log_softmax(logits[:, -1].float(), dim=-1)
            fed.append(int(picks[0]))

    def _advance(self, row: "_Row", tok: int, logprob: float, stop: Sequence[str], ignore_eos: bool) -> None:
        if len(row.tokens) >= row.limit:
            row.finish = "length"
            return
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
        if len(row.tokens) >= row.limit:
            row.finish = "length"

    # -- adapters --------------------------------------------------------------------------------------------

    def load_adapter(self, name: str, path: Path | str) -> None:
        """Inject LoRA adapter `name` from `path` (not activated). Raises AdapterError; the active one is kept."""
        try:
            self._adapters.load(name, path)
        finally:
            self.reset_cache()

    def unload_adapter(self, name: str) -> None:
        self._adapters.unload(name)
        self.reset_cache()

    def list_adapters(self) -> list[str]:
        return self._adapters.names()

    def activate(self, name: str | None) -> None:
        """Make adapter `name` (None: the base model) the one used by every later call."""
        if name != self._adapters.active:
            self._adapters.activate(name)
            self.reset_cache()

    @property
    def active_adapter(self) -> str | None:
        return self._adapters.active

    @torch.inference_mode()
    def warm(self, prompt: str) -> None:
        """Run `prompt` into the prefix pool now, so that a later call on it (or on an extension of it) starts from
        its cache. Nothing observable changes but speed (the studio uses this between clicks)."""
        self._prefill(self.encode(prompt))

    def reset_cache(self) -> None:
        """Forget every cached prefix (the next call runs its whole prompt); bumps `cache_epoch`."""
        self.cache_epoch += 1
        self._pool.clear()
        self._prefix = PrefixCache(growing_cache(self._num_layers))


class _Row:
    __slots__ = ("limit", "tokens", "logprobs", "finish")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.finish: str | None = None

    @property
    def done(self) -> bool:
        return self.finish is not None

    def result(self, tokenizer) -> Generation:
        text = tokenizer.decode(self.tokens) if self.tokens else ""
        return Generation(text, tuple(self.tokens), tuple(self.logprobs), self.finish or "length")


class _Batch:
    """The decoding rows' cache and next-token log-probs; for prompts of different lengths also the 2-D attention
    mask (pads = 0) and each row's next position."""

    def __init__(self, cache, logprobs: torch.Tensor, mask: torch.Tensor | None = None,
                 positions: torch.Tensor | None = None) -> None:
        self.cache, self.logprobs, self.mask, self.positions = cache, logprobs, mask, positions

    def select(self, index: torch.Tensor) -> None:
        """Keep (or repeat) the rows in `index`."""
        self.cache.batch_select_indices(index)
        self.logprobs = self.logprobs[index]
        if self.mask is not None:
            self.mask, self.positions = self.mask[index], self.positions[index]

    def step_inputs(self) -> dict:
        """Mask and position ids for the next one-token step (and advance them)."""
        if self.mask is None:
            return {}
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=1)
        positions = self.positions.unsqueeze(1)
        self.positions = self.positions + 1
        return {"mask": self.mask, "positions": positions}


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
    """One token per row: argmax, or a draw from softmax(logprobs / temperature).

    The draw inverts the cumulative distribution at one uniform number per row. `torch.multinomial` draws one
    exponential variate per vocabulary entry instead: 4.8 ms per step for 4 rows of SmolLM2's 49,152 tokens on the
    2-core machine, against ~0.3 ms here. The cumulative sum is float64, so each token's interval is its (float32)
    probability to ~1e-16; a zero-probability token has an empty interval and is never drawn."""
    if temperature <= 0:
        return logprobs.argmax(dim=-1)
    cdf = torch.softmax(logprobs / temperature, dim=-1).double().cumsum(dim=-1)
    u = torch.rand((cdf.shape[0], 1), generator=rng, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)
