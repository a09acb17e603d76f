"""A key/value cache that writes into preallocated buffers, and a prefix cache built on it.

transformers' `DynamicLayer` concatenates the whole cache at every step (`torch.cat`), so a decode step over a
600-token prompt copies the full cache of every layer. `GrowingLayer` keeps a buffer with spare room and writes only
the new positions; `crop` just moves the length back. `PrefixCache` remembers which token ids the cache holds so that
a prompt that extends (or shares a prefix with) the previous one only pays for its new tokens. `PrefixPool` keeps
a few of them, so that interleaved prompt families (the agent's prompt and the judge's, say) do not evict each other.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import Cache, DynamicLayer

__all__ = ["GrowingLayer", "SharedPrefixLayer", "growing_cache", "fork_cache", "shared_prefix_cache", "PrefixCache",
           "PrefixPool", "common_prefix_length", "cache_kwargs"]

_MIN_ROOM = 256


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cache_kwargs(model, cache) -> dict:
    """`{name: cache}` for a model's forward: transformers 5.24 renamed `past_key_values` to `cache` (the old name
    warns and goes in 5.40); older releases (>= 4.56 is supported) only know `past_key_values`. Looked up once per
    model class."""
    return {_cache_keyword(type(model)): cache}


class GrowingLayer(DynamicLayer):
    """One layer's keys/values in a `[batch, heads, capacity, head_dim]` buffer; `keys`/`values` are views of the
    filled part, so the attention code sees exactly what a `DynamicLayer` would hold."""

    def __init__(self) -> None:
        super().__init__()
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def reserve(self, total: int, like_k: torch.Tensor, like_v: torch.Tensor) -> None:
        """Make room for `total` positions (keeps the filled part)."""
        if self._kbuf is not None and self._kbuf.shape[2] >= total and self._kbuf.shape[0] == like_k.shape[0]:
            return
        cap = max(total, 2 * (self._kbuf.shape[2] if self._kbuf is not None else 0), _MIN_ROOM)
        b, h, _, dk = like_k.shape
        kbuf = like_k.new_empty((b, h, cap, dk))
        vbuf = like_v.new_empty((b, h, cap, like_v.shape[-1]))
        if self.length:
            kbuf[:, :, : self.length].copy_(self._kbuf[:, :, : self.length])
            vbuf[:, :, : self.length].copy_(self._vbuf[:, :, : self.length])
        self._kbuf, self._vbuf = kbuf, vbuf

    def _refresh_views(self) -> None:
        self.keys = self._kbuf[:, :, : self.length]
        self.values = self._vbuf[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        self.reserve(end, key_states, value_states)
        self._kbuf[:, :, self.length : end].copy_(key_states)
        self._vbuf[:, :, self.length : end].copy_(value_states)
        self.length = end
        self._refresh_views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last `-tokens_to_remove` positions (transformers' convention: a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of positions to remove")
        if tokens_to_remove == 0 or self._kbuf is None:
            return
        self.length = max(0, self.length + tokens_to_remove)
        self._refresh_views()

    def reset(self) -> None:
        self.length = 0
        if self._kbuf is not None:
            self._refresh_views()

    def _select_rows(self, index: torch.Tensor) -> None:
        if self._kbuf is None:
            return
        self._kbuf = self._kbuf[index].contiguous()
        self._vbuf = self._vbuf[index].contiguous()
        self._refresh_views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self._kbuf is not None:
            self._select_rows(torch.arange(self._kbuf.shape[0], device=self._kbuf.device).repeat_interleave(repeats))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._select_rows(indices)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._select_rows(beam_idx)


def growing_cache(num_layers: int) -> Cache:
    return Cache(layers=[GrowingLayer() for _ in range(num_layers)])


def fork_cache(cache: Cache, rows: int, room: int) -> Cache:
    """A new cache of `rows` copies of the (one-row) `cache`, with space for `room` more positions per row."""
    out = growing_cache(len(cache.layers))
    for src, dst in zip(cache.layers, out.layers):
        if src.keys is None or src.get_seq_length() == 0:
            continue
        k = src.keys.expand(rows, -1, -1, -1)
        v = src.values.expand(rows, -1, -1, -1)
        dst.lazy_initialization(k, v)
        dst.reserve(k.shape[2] + room, k, v)
        dst.update(k, v)
    return out


class SharedPrefixLayer(GrowingLayer):
    """A layer whose rows share one prefix: `prefix_keys`/`prefix_values` ([1, heads, P, d], views of a one-row
    cache, never copied) plus each row's own later positions in the growing buffer, which is all `update` returns.
    Only cascade attention (policy/cascade.py) knows to attend to both; lengths and masks count both."""

    def __init__(self, prefix_keys: torch.Tensor | None, prefix_values: torch.Tensor | None) -> None:
        super().__init__()
        self.prefix_keys, self.prefix_values = prefix_keys, prefix_values
        self.prefix_length = 0 if prefix_keys is None else int(prefix_keys.shape[2])

    def get_seq_length(self) -> int:
        return self.prefix_length + self.length

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0 and -tokens_to_remove > self.length:
            raise ValueError("a shared-prefix cache cannot be cropped into its shared prefix")
        super().crop(tokens_to_remove)


def shared_prefix_cache(cache: Cache, rows: int, room: int) -> Cache:
    """A cache of `rows` rows over the (one-row) `cache`'s current contents, shared rather than copied, with space
    for `room` own positions per row. `cache` must not change while this one is in use."""
    layers = []
    for src in cache.layers:
        filled = src.keys is not None and src.get_seq_length() > 0
        layer = SharedPrefixLayer(src.keys if filled else None, src.values if filled else None)
        if filled:
            like_k = src.keys.new_empty((rows, src.keys.shape[1], 0, src.keys.shape[3]))
            like_v = src.values.new_empty((rows, src.values.shape[1], 0, src.values.shape[3]))
            layer.lazy_initialization(like_k, like_v)
            layer.reserve(room, like_k, like_v)
            layer._refresh_views()
        layers.append(layer)
    return Cache(layers=layers)


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class PrefixCache:
    """A one-row cache plus the token ids it holds, and the next-token log-probs at remembered lengths."""

    cache: Cache
    ids: list[int] = field(default_factory=list)
    next_logprobs: dict[int, torch.Tensor] = field(default_factory=dict)

    def crop_to(self, length: int) -> None:
        if length < len(self.ids):
            self.cache.crop(length - len(self.ids))
            del self.ids[length:]
            self.next_logprobs = {k: v for k, v in self.next_logprobs.items() if k <= length}

    def clear(self) -> None:
        self.crop_to(0)
        self.next_logprobs.clear()


class PrefixPool:
    """Up to `slots` prefix caches, most recently used first. A prompt goes to the cache sharing the longest prefix
    with it when that prefix is at least half of the shorter of the two (or the whole cached sequence); otherwise it
    gets a fresh cache, or the least recently used one once all slots are taken."""

    def __init__(self, num_layers: int, slots: int = 3) -> None:
        if slots < 1:
            raise ValueError("a prefix pool needs at least one slot")
        self.num_layers, self.slots = num_layers, slots
        self.entries: list[PrefixCache] = []

    def select(self, ids: list[int]) -> PrefixCache:
        scored = [(common_prefix_length(e.ids, ids), e) for e in self.entries]
        lcp, best = max(scored, key=lambda pair: pair[0], default=(0, None))
        if best is not None and (lcp >= len(best.ids) or 2 * lcp >= min(len(ids), len(best.ids))):
            chosen = best
        elif len(self.entries) < self.slots:
            chosen = PrefixCache(growing_cache(self.num_layers))
        else:
            chosen = self.entries[-1]
        self.entries = [chosen] + [e for e in self.entries if e is not chosen]
        return chosen

    def discard(self, entry: PrefixCache) -> None:
        self.entries = [e for e in self.entries if e is not entry]

    def clear(self) -> None:
        self.entries.clear()
