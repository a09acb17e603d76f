"""The frozen prefix encoder: the policy LM's hidden states pooled over a candidate (mean, last or the question probe), with an on-disk feature cache."""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from evorag_core.errors import ConfigError
from evorag_core.preference.examples import PreferenceExample


POOLINGS = ("mean", "last", "probe")
# "probe" pooling: the question is asked again after the candidate and the hidden states of that suffix are averaged
# (module docstring, "Encoder"). The template is part of the feature-cache key, so editing it re-encodes.
PROBE_TEMPLATE = '\nDoes this answer the question "{question}"?'
_PROBE_GENERIC = "\nDoes this answer the question?"


def probe_text(prompt: str) -> str:
    """The probe suffix for a state's prompt: PROBE_TEMPLATE with the prompt's last `Question: ...` line (the agent
    prompt has exactly one; few-shot demonstrations come before it), or a generic probe for a prompt without one."""
    line = prompt.rsplit("Question: ", 1)
    if len(line) < 2:
        return _PROBE_GENERIC
    question = line[1].split("\n", 1)[0].strip()
    return PROBE_TEMPLATE.format(question=question) if question else _PROBE_GENERIC


# -- data --------------------------------------------------------------------------------------------------------


class PrefixEncoder:
    """Pooled hidden states of (prompt, completion) from a causal LM; see the module docstring.

    `specs` lists (layer, pooling) features computed in the same pass (the bench compares several); `encode`
    returns an array [n_completions, len(specs), hidden]."""

    def __init__(self, model, tokenizer, model_id: str, specs: Sequence[tuple[int, str]] = ((20, "mean"),),
                 backend=None, max_prompt_tokens: int = 6000) -> None:
        n_layers = model.config.get_text_config().num_hidden_layers
        for layer, pooling in specs:
            if not 0 <= layer <= n_layers:
                raise ConfigError(f"preference.layer must be in 0..{n_layers} for {model_id}, got {layer}")
            if pooling not in POOLINGS:
                raise ConfigError(f"preference.pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        self.model, self.tokenizer, self.model_id = model, tokenizer, model_id
        self.specs = tuple((int(layer), str(pooling)) for layer, pooling in specs)
        self.backend = backend  # when given, its LoRA adapter is switched off while encoding
        self.max_prompt_tokens = max_prompt_tokens
        self.dim = int(model.config.get_text_config().hidden_size)

    @classmethod
    def from_backend(cls, backend, specs: Sequence[tuple[int, str]] = ((20, "mean"),)) -> "PrefixEncoder":
        return cls(backend.model, backend.tokenizer, backend.model_id, specs, backend=backend)

    @contextmanager
    def _base_weights(self) -> Iterator[None]:
        active = getattr(self.backend, "active_adapter", None)
        if active is not None:
            self.backend.activate(None)
        try:
            yield
        finally:
            if active is not None:
                self.backend.activate(active)

    @torch.inference_mode()
    def encode(self, prompt: str, completions: Sequence[str]) -> np.ndarray:
        from transformers.cache_utils import DynamicCache

        from evorag_core.lm.base import encode_pair
        from evorag_core.lm.kv_cache import cache_kwargs

        out = np.zeros((len(completions), len(self.specs), self.dim), dtype=np.float32)
        if not completions:
            return out
        prompt_ids = encode_pair(self.tokenizer, prompt, "")[0][-self.max_prompt_tokens :]
        # the probe follows the completion in the same forward; causal attention keeps the completion's own
        # positions (mean / last pooling) exactly what they are without it
        probe = (encode_pair(self.tokenizer, "", probe_text(prompt))[1]
                 if any(pooling == "probe" for _, pooling in self.specs) else [])
        body = getattr(self.model, "model", self.model)
        device = next(self.model.parameters()).device
        with self._base_weights():
            cache = DynamicCache(config=self.model.config)
            body(input_ids=torch.tensor([prompt_ids], device=device), **cache_kwargs(body, cache), use_cache=True)
            for i, completion in enumerate(completions):
                ids = encode_pair(self.tokenizer, "", completion)[1] or [self.tokenizer.eos_token_id]
                hidden = body(input_ids=torch.tensor([ids + probe], device=device), **cache_kwargs(body, cache),
                              use_cache=True, output_hidden_states=True).hidden_states
                cache.crop(-(len(ids) + len(probe)))
                n = len(ids)
                for j, (layer, pooling) in enumerate(self.specs):
                    h = hidden[layer][0].float()
                    pooled = h[:n].mean(0) if pooling == "mean" else h[n - 1] if pooling == "last" else h[n:].mean(0)
                    out[i, j] = pooled.cpu().numpy()
        return out


class FeatureCache:
    """Feature vectors by key, kept in one safetensors file (loaded whole, saved atomically)."""

    def __init__(self, path: Path | str | None) -> None:
        self.path = Path(path) if path is not None else None
        self.items: dict[str, np.ndarray] = {}
        self.dirty = False
        if self.path is not None and self.path.is_file():
            from safetensors.numpy import load_file

            self.items = dict(load_file(str(self.path)))

    @staticmethod
    def key(model_id: str, layer: int, pooling: str, prompt: str, completion: str) -> str:
        if pooling == "probe":
            pooling = f"probe:{PROBE_TEMPLATE}"
        return hashlib.sha1("\0".join((model_id, str(layer), pooling, prompt, completion)).encode()).hexdigest()

    def get(self, key: str) -> np.ndarray | None:
        return self.items.get(key)

    def put(self, key: str, value: np.ndarray) -> None:
        self.items[key] = np.ascontiguousarray(value, dtype=np.float32)
        self.dirty = True

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        from safetensors.numpy import save_file

        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        save_file(self.items, str(tmp))
        os.replace(tmp, self.path)
        self.dirty = False


def encode_examples(encoder: PrefixEncoder, examples: Sequence[PreferenceExample],
                    cache: FeatureCache | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Features of the chosen and rejected sides, each [n, len(encoder.specs), dim]; one prompt pass per state."""
    cache = cache if cache is not None else FeatureCache(None)
    texts: dict[str, dict[str, None]] = {}
    for e in examples:
        texts.setdefault(e.prompt, {}).update({e.chosen: None, e.rejected: None})
    feats: dict[tuple[str, str], np.ndarray] = {}
    for prompt, completions in texts.items():
        todo = []
        for c in completions:
            got = [cache.get(FeatureCache.key(encoder.model_id, l, p, prompt, c)) for l, p in encoder.specs]
            if all(g is not None for g in got):
                feats[(prompt, c)] = np.stack(got)
            else:
                todo.append(c)
        if todo:
            for c, vec in zip(todo, encoder.encode(prompt, todo)):
                feats[(prompt, c)] = vec
                for (l, p), v in zip(encoder.specs, vec):
                    cache.put(FeatureCache.key(encoder.model_id, l, p, prompt, c), v)
    cache.save()
    chosen = np.stack([feats[(e.prompt, e.chosen)] for e in examples]) if examples else np.zeros((0, 1, 1))
    rejected = np.stack([feats[(e.prompt, e.rejected)] for e in examples]) if examples else np.zeros((0, 1, 1))
    return chosen, rejected


# -- model and loss ----------------------------------------------------------------------------------------------
