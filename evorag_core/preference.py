"""The multi-head preference model (SPEC §4): a frozen encoder of the trajectory prefix and one linear head per signal.

Encoder. x = (agent prompt at the state, candidate): the candidate is its reply line and, for a SEARCH, the passages
it retrieves rendered as the next prompt would show them ("Found:" + numbered passages, `(again [n] title)` for ones
already shown; `candidate_text`). A sibling's return is decided mostly by what its search finds (`ret` is +-1 per
search; in the 2026-11-24 HotpotQA rollouts `ret` was the largest signal difference of 475 of 634 pairs), which the
query text alone does not show. The observation is a deterministic function of (state, action), so the same x is
computed at inference (`RankedPolicy` previews each SEARCH candidate's results in the environment). With
`PreferenceConfig.observation` off, or for pairs stored before rollouts recorded observations, x is the reply line
alone. Its feature is a hidden state of the policy LM itself (frozen, base weights, LoRA adapters switched off),
pooled over the candidate's tokens (the "completion" below: reply and observation): the prompt is run once per state
(its KV cache is shared by the state's candidates) and each completion is run on top of it, so every completion
token attends to the whole state. Poolings (`PreferenceConfig.layer/pooling`): "mean" over the completion tokens,
"last" (the completion's last token), or "probe": the question is asked again after the candidate (`probe_text`: 'Does
this answer the question "<question>"?') and the hidden states of those probe tokens are averaged. A causal LM's
completion tokens only see the question from far back in the prompt; the probe's tokens see the question and the
candidate's reply and passages together, so their states can carry whether what the candidate retrieved (or answered)
bears on the question, which the answer signal depends on and a mean over ~150 passage tokens dilutes. The probe runs
in the same forward as the completion, after it, so mean/last features are unchanged. The prompt's own positions are
identical for the two sides of a pair and would cancel in f(x+) - f(x-), so they are never pooled. A prompt longer
than 6,000 tokens keeps its last 6,000. Switching the backend's adapter off and on drops the policy's prefix cache, so
with an adapter active each encoded state costs the policy one extra prompt pass. bench/preference.py compares layers
{6, ..., 30} x {mean, last, probe} by grouped cross-validation on the training questions: on 1,850 pooled-corpus
HotpotQA pairs of 192 questions (2026-11-25) probe pooling beat mean pooling at every layer (CV overall accuracy
0.70-0.73 vs 0.66-0.70; last 0.66-0.68); layer 16 with probe is the best and the default. At layer 16 it raised the
ret and ans heads (CV 0.75 -> 0.77, 0.65 -> 0.68) and lowered dup, step and act (0.78 -> 0.70, 0.84 -> 0.79,
0.81 -> 0.77): the probe reads relevance better and the candidate's own surface less.
Features are cached on disk (`FeatureCache`, safetensors) under a key of (model, layer, pooling, prompt,
completion): the encoder is frozen, so retraining never re-runs the LM.

Heads and loss. Features are standardized with the training set's mean/std, optionally passed through a shared
trainable tanh layer (`hidden` > 0), and scored by H linear heads f^(k) (no bias: it cancels in differences);
fitted by full-batch L-BFGS with an L2 penalty `l2` on the weights (`max_iter` iterations).
Each stored rollout pair carries the per-signal returns G^(k) of both branches (rollout.py). Head k's preferred side
is the branch with the larger G^(k); the head is trained only on the pairs where |dG^(k)| >= head_margin (a signal
that is equal on both branches says nothing about which prefix is better on that aspect). With s_k = sign(dG^(k))
and M_k the pairs of head k:
    L = -(1/H) sum_k mean_{i in M_k} log sigma(s_k,i * (f^(k)(x_chosen,i) - f^(k)(x_rejected,i)))
(SPEC §4's -(1/7) sum_k log sigma(f^(k)(x+) - f^(k)(x-)), with x+ chosen per head, averaged over each head's pairs;
a head with no pairs contributes 0). With a frozen encoder and no shared layer the heads are independent logistic
regressions, so a single-signal model's head equals the full model's (the ablation then differs only in what the
overall ranking can use).

Overall preference. score(x) = sum_k c_k f^(k)(x): a logistic regression of the training pairs' overall direction
(the chosen branch has the larger total return) on the head-score differences, by L-BFGS with the same L2. The heads
are fitted on those very pairs, so their in-sample scores are over-confident and a combiner fitted on them trusts
the heads that overfit most (measured: train overall accuracy 0.67, held-out 0.56). So the combiner is stacked:
fitted on out-of-fold head scores (`combine_folds` grouped folds of the training questions; each fold's scores come
from heads fitted without it), then applied to the heads fitted on all training pairs. With `combine_nonnegative`
(default) c >= 0 (c = softplus(u)): every head scores "better on its own signal" and the total return is a
positive-weighted sum of the per-signal returns, so a negative weight can only be noise. It ranks candidate actions
at inference (`rank_candidates`, `RankedPolicy`: best-of-K).

Saved as `model.safetensors` (weights, feature mean/std, combiner) + `config.json` (PreferenceConfig, heads, encoder
model id, feature size, metrics).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from evorag_core.config import Config, PreferenceConfig
from evorag_core.errors import ConfigError, ModelLoadError, TrainingError
from evorag_core.env.signals import SIGNAL_NAMES

__all__ = [
    "PreferenceExample",
    "candidate_text",
    "probe_text",
    "examples_from_pairs",
    "split_examples",
    "PrefixEncoder",
    "FeatureCache",
    "encode_examples",
    "preference_loss",
    "PreferenceModel",
    "HeadMetrics",
    "PreferenceMetrics",
    "fit_preference_model",
    "evaluate",
    "metrics_for",
    "train_preference_model",
    "rank_candidates",
    "RankedPolicy",
    "ranked_policy_from_path",
]

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


@dataclass(frozen=True)
class PreferenceExample:
    """One pair: `chosen` has the larger total return; `deltas[k]` = G^(k)(chosen) - G^(k)(rejected)."""

    prompt: str
    chosen: str
    rejected: str
    margin: float
    deltas: Mapping[str, float]
    group: str  # split key: the question id (pairs of one question never straddle the split)


def _as_pair(item: Any) -> Any:
    """Store `Pair`s and `NewPair`s as they are; an export record (a mapping, pair_io's format) as a `NewPair`."""
    if isinstance(item, Mapping):
        from evorag_core.pairs.io import new_pair_from_record

        return new_pair_from_record(item)
    return item


def candidate_text(completion: str, observation: str | None) -> str:
    """The candidate part of x: the reply line, then what it retrieved (if anything; see the module docstring)."""
    return f"{completion}\n{observation}" if observation else completion


def examples_from_pairs(pairs: Iterable[Any], min_margin: float,
                        observation: bool = True) -> tuple[list[PreferenceExample], int]:
    """Examples from store `Pair`s / `NewPair`s or export records that carry per-signal returns (metadata
    `signals_chosen` / `signals_rejected`) and have margin >= `min_margin`. Returns (examples, skipped); human
    pairs without per-signal returns are skipped (nothing to train the heads on). With `observation`, each side
    is `candidate_text(reply, the branch's recorded observation)`."""
    out: list[PreferenceExample] = []
    skipped = 0
    for item in pairs:
        pair = _as_pair(item)
        meta = pair.metadata or {}
        sc, sr = meta.get("signals_chosen"), meta.get("signals_rejected")
        if not sc or not sr or pair.margin is None or pair.margin < min_margin:
            skipped += 1
            continue
        deltas = {k: float(sc.get(k, 0.0)) - float(sr.get(k, 0.0)) for k in SIGNAL_NAMES}
        group = str(meta.get("question_id") or pair.prompt)
        chosen, rejected = pair.chosen, pair.rejected
        if observation:
            chosen = candidate_text(chosen, (meta.get("chosen_branch") or {}).get("observation"))
            rejected = candidate_text(rejected, (meta.get("rejected_branch") or {}).get("observation"))
        out.append(PreferenceExample(pair.prompt, chosen, rejected, float(pair.margin), deltas, group))
    return out, skipped


def split_examples(examples: Sequence[PreferenceExample], holdout: float,
                   seed: int) -> tuple[list[PreferenceExample], list[PreferenceExample]]:
    """(train, eval) with about `holdout` of the groups (questions) held out; deterministic in `seed`."""
    if not 0.0 < holdout < 1.0:
        raise ConfigError(f"preference.holdout must be in (0, 1), got {holdout}")
    groups = sorted({e.group for e in examples})
    random.Random(seed).shuffle(groups)
    n_eval = min(max(1, round(holdout * len(groups))), len(groups) - 1) if len(groups) > 1 else 0
    held = set(groups[:n_eval])
    return [e for e in examples if e.group not in held], [e for e in examples if e.group in held]


# -- the frozen encoder ------------------------------------------------------------------------------------------


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


def preference_loss(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor, direction: torch.Tensor,
                    mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """L = (1/H) sum_k mean_{i: mask[i,k]} -log sigma(direction[i,k] * (chosen[i,k] - rejected[i,k])).

    All inputs are [n, H]; `direction` is +1 where head k prefers the chosen side, -1 where it prefers the rejected
    one. Returns (L, per-head mean losses [H]; 0 for a head without pairs)."""
    z = direction * (chosen_scores - rejected_scores)
    nll = nn.functional.softplus(-z) * mask
    counts = mask.sum(0)
    per_head = nll.sum(0) / counts.clamp(min=1)
    return per_head.sum() / chosen_scores.shape[1], per_head


class PreferenceModel(nn.Module):
    """Standardize -> [shared tanh layer] -> H linear heads; `combine` weighs the heads into one overall score."""

    def __init__(self, dim: int, heads: Sequence[str] = SIGNAL_NAMES, hidden: int = 0,
                 cfg: PreferenceConfig | None = None, model_id: str = "") -> None:
        super().__init__()
        self.heads_names = tuple(heads)
        self.cfg = cfg if cfg is not None else PreferenceConfig(hidden=hidden)
        self.model_id = model_id
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.shared = nn.Linear(dim, hidden) if hidden > 0 else None
        self.heads = nn.Linear(hidden if hidden > 0 else dim, len(self.heads_names), bias=False)
        nn.init.zeros_(self.heads.weight)
        self.combine = nn.Parameter(torch.full((len(self.heads_names),), 1.0 / len(self.heads_names)))
        self.encoder: PrefixEncoder | None = None
        self.metrics: dict[str, Any] = {}

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Head scores [n, H] of features [n, dim]."""
        x = (features - self.mean) / self.std
        if self.shared is not None:
            x = torch.tanh(self.shared(x))
        return self.heads(x)

    def overall(self, features: torch.Tensor) -> torch.Tensor:
        return self(features) @ self.combine

    # -- persistence ---------------------------------------------------------------------------------------------
    def save(self, folder: Path | str) -> Path:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"))
        meta = {"format": "evorag-preference-v1", "heads": list(self.heads_names), "dim": self.dim,
                "model_id": self.model_id, "config": asdict(self.cfg), "metrics": self.metrics}
        (folder / "config.json").write_text(json.dumps(meta, indent=1))
        return folder

    @classmethod
    def load(cls, folder: Path | str, encoder: PrefixEncoder | None = None) -> "PreferenceModel":
        from safetensors.torch import load_file

        folder = Path(folder)
        try:
            meta = json.loads((folder / "config.json").read_text())
            state = load_file(str(folder / "model.safetensors"))
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{folder} holds no readable preference model (config.json, model.safetensors): "
                                 f"{exc}") from exc
        if meta.get("format") != "evorag-preference-v1":
            raise ModelLoadError(f"{folder}/config.json is not an evorag preference model")
        cfg = PreferenceConfig(**{"observation": False, **meta["config"]})  # saved before observations: reply only
        model = cls(int(meta["dim"]), meta["heads"], cfg.hidden, cfg, meta.get("model_id", ""))
        model.load_state_dict(state)
        model.metrics = meta.get("metrics", {})
        if encoder is not None:
            model.attach(encoder)
        return model.eval()

    def attach(self, encoder: PrefixEncoder) -> "PreferenceModel":
        """Use `encoder` for raw (prompt, completion) inputs; it must be the model and layer/pooling trained on."""
        if self.model_id and encoder.model_id != self.model_id:
            raise ConfigError(f"this preference model was trained on features of {self.model_id!r}; "
                              f"the encoder is {encoder.model_id!r}")
        if encoder.specs[0] != (self.cfg.layer, self.cfg.pooling):
            encoder = PrefixEncoder(encoder.model, encoder.tokenizer, encoder.model_id,
                                    ((self.cfg.layer, self.cfg.pooling),), backend=encoder.backend)
        self.encoder = encoder
        return self


# -- training and evaluation -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadMetrics:
    train_pairs: int
    eval_pairs: int
    accuracy: float | None  # held-out pairwise accuracy on the head's own direction
    loss: float | None  # held-out mean -log sigma


@dataclass(frozen=True)
class PreferenceMetrics:
    train_pairs: int
    eval_pairs: int
    heads: Mapping[str, HeadMetrics]
    overall_accuracy: float | None  # held-out: the combined score prefers the chosen (higher-return) side
    overall_loss: float | None
    train_overall_accuracy: float | None
    combine: Mapping[str, float]
    seconds: float = 0.0
    skipped_pairs: int = 0
    extras: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _targets(examples: Sequence[PreferenceExample], heads: Sequence[str], head_margin: float):
    deltas = torch.tensor([[e.deltas.get(h, e.margin if h == "total" else 0.0) for h in heads] for e in examples],
                          dtype=torch.float32).reshape(len(examples), len(heads))
    return torch.sign(deltas), deltas.abs() >= head_margin


def fit_preference_model(chosen: np.ndarray, rejected: np.ndarray, train: Sequence[PreferenceExample],
                         cfg: PreferenceConfig, heads: Sequence[str] = SIGNAL_NAMES,
                         model_id: str = "") -> PreferenceModel:
    """Fit the heads (and the shared layer, if any) on features [n, dim], then the combiner on out-of-fold head
    scores (module docstring); deterministic in cfg.seed."""
    if len(train) == 0:
        raise TrainingError("no training pairs for the preference model")
    xc, xr = torch.as_tensor(chosen, dtype=torch.float32), torch.as_tensor(rejected, dtype=torch.float32)
    model = _fit_heads(xc, xr, train, cfg, heads, model_id)
    diff = _out_of_fold_diffs(xc, xr, train, cfg, heads)
    if diff is None:
        with torch.no_grad():
            diff = model(xc) - model(xr)
    _fit_combiner(model, diff, cfg)
    return model.eval()


def _fit_heads(xc: torch.Tensor, xr: torch.Tensor, train: Sequence[PreferenceExample], cfg: PreferenceConfig,
               heads: Sequence[str], model_id: str) -> PreferenceModel:
    """Full-batch L-BFGS on the head-wise loss + cfg.l2 * |weights|^2 (at most cfg.max_iter iterations)."""
    torch.manual_seed(cfg.seed)
    model = PreferenceModel(xc.shape[1], heads, cfg.hidden, cfg, model_id)
    both = torch.cat([xc, xr])
    model.mean.copy_(both.mean(0))
    model.std.copy_(both.std(0).clamp(min=1e-4) if len(both) > 1 else torch.ones(xc.shape[1]))
    direction, mask = _targets(train, heads, cfg.head_margin)
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]

    def objective() -> torch.Tensor:
        loss, _ = preference_loss(model(xc), model(xr), direction, mask.float())
        return loss + cfg.l2 * sum((w ** 2).sum() for w in weights)

    _lbfgs([p for n, p in model.named_parameters() if n != "combine"], objective, cfg.max_iter)
    return model


def _out_of_fold_diffs(xc: torch.Tensor, xr: torch.Tensor, train: Sequence[PreferenceExample],
                       cfg: PreferenceConfig, heads: Sequence[str]) -> torch.Tensor | None:
    """Head-score differences [n, H] where each pair's come from heads fitted without its question's fold; None
    when cfg.combine_folds < 2 or there are fewer question groups than folds."""
    groups = sorted({e.group for e in train})
    folds = cfg.combine_folds
    if folds < 2 or len(groups) < folds:
        return None
    random.Random(cfg.seed).shuffle(groups)
    fold_of = {g: i % folds for i, g in enumerate(groups)}
    diff = torch.zeros(len(train), len(heads))
    for f in range(folds):
        held = [i for i, e in enumerate(train) if fold_of[e.group] == f]
        kept = [i for i, e in enumerate(train) if fold_of[e.group] != f]
        model = _fit_heads(xc[kept], xr[kept], [train[i] for i in kept], cfg, heads, "")
        with torch.no_grad():
            diff[held] = model(xc[held]) - model(xr[held])
    return diff


def _lbfgs(params: list[torch.Tensor], objective, max_iter: int) -> None:
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=max_iter, history_size=20, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-7, tolerance_change=1e-10)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    opt.step(closure)


def _fit_combiner(model: PreferenceModel, diff: torch.Tensor, cfg: PreferenceConfig) -> None:
    """c minimizing mean -log sigma(c . diff) + l2 |c|^2 over the training pairs, `diff` = head-score differences
    (chosen - rejected) scaled to unit mean magnitude first, so that l2 means the same for every head; c >= 0 via
    c = softplus(u) when cfg.combine_nonnegative."""
    scale = diff.abs().mean(0).clamp(min=1e-6)
    z = diff / scale
    u = torch.zeros(diff.shape[1], requires_grad=True)

    def weights() -> torch.Tensor:
        return nn.functional.softplus(u) if cfg.combine_nonnegative else u

    _lbfgs([u], lambda: nn.functional.softplus(-z @ weights()).mean() + cfg.l2 * (weights() ** 2).sum(), 100)
    with torch.no_grad():  # a head whose scores never differ (no training pairs: zero weights) gets no weight
        model.combine.copy_(torch.where(diff.abs().amax(0) > 0, weights().detach() / scale, 0.0))


def _accuracy(z: torch.Tensor) -> float:
    return float(((z > 0).float() + 0.5 * (z == 0).float()).mean())


def evaluate(model: PreferenceModel, chosen: np.ndarray, rejected: np.ndarray,
             examples: Sequence[PreferenceExample]) -> tuple[dict[str, tuple[int, float | None, float | None]],
                                                              float | None, float | None]:
    """Per head: (pairs, accuracy, loss) on its own direction; overall (accuracy, loss) of the combined score.
    A tie (equal scores) counts half."""
    if len(examples) == 0:
        return {h: (0, None, None) for h in model.heads_names}, None, None
    xc, xr = torch.as_tensor(chosen, dtype=torch.float32), torch.as_tensor(rejected, dtype=torch.float32)
    direction, mask = _targets(examples, model.heads_names, model.cfg.head_margin)
    with torch.no_grad():
        fc, fr = model(xc), model(xr)
        z = direction * (fc - fr)
        out = {}
        for k, name in enumerate(model.heads_names):
            sel = mask[:, k]
            n = int(sel.sum())
            out[name] = (n, _accuracy(z[sel, k]) if n else None,
                         float(nn.functional.softplus(-z[sel, k]).mean()) if n else None)
        overall = (fc - fr) @ model.combine
    return out, _accuracy(overall), float(nn.functional.softplus(-overall).mean())


def metrics_for(model: PreferenceModel, train_feats, eval_feats, train, evals, seconds=0.0, skipped=0,
                extras=None) -> PreferenceMetrics:
    heads_eval, acc, loss = evaluate(model, *eval_feats, evals)
    _, train_mask = _targets(train, model.heads_names, model.cfg.head_margin)
    _, train_acc, _ = evaluate(model, *train_feats, train)
    heads = {name: HeadMetrics(int(train_mask[:, k].sum()), *heads_eval[name])
             for k, name in enumerate(model.heads_names)}
    combine = {name: float(c) for name, c in zip(model.heads_names, model.combine.detach())}
    return PreferenceMetrics(len(train), len(evals), heads, acc, loss, train_acc, combine, seconds, skipped,
                             dict(extras or {}))


def _load_pairs(store_or_pairs: Any) -> list[Any]:
    if hasattr(store_or_pairs, "list_pairs"):
        return [p for p in store_or_pairs.list_pairs(limit=None) if p.status != "discarded"]
    return list(store_or_pairs)


def train_preference_model(store_or_pairs: Any, cfg: Config, out_dir: Path | str, *,
                           encoder: PrefixEncoder | None = None, home: Path | str | None = None) -> PreferenceMetrics:
    """Fit the preference model on the stored rollout pairs (every status but discarded) or on given pairs (store
    `Pair`s or export records) with margin >= cfg.rollout.preference_margin, evaluate it on the held-out questions,
    save it to `out_dir` and return its metrics. The encoder defaults to the policy LM of `cfg.policy`; features
    are cached in `<home>/cache/preference_features.safetensors`."""
    from evorag_core.config import home_dir

    start = time.perf_counter()
    pcfg = cfg.preference
    examples, skipped = examples_from_pairs(_load_pairs(store_or_pairs), cfg.rollout.preference_margin,
                                            pcfg.observation)
    if len(examples) < 2:
        raise TrainingError(f"{len(examples)} usable pairs (margin >= {cfg.rollout.preference_margin} with per-signal "
                            f"returns; {skipped} skipped); the preference model needs at least 2")
    train, evals = split_examples(examples, pcfg.holdout, pcfg.seed)
    if encoder is None:
        from evorag_core.lm.hf_backend import TransformersBackend

        backend = TransformersBackend(cfg.policy, Path(home) if home else None)
        encoder = PrefixEncoder.from_backend(backend, ((pcfg.layer, pcfg.pooling),))
    home = Path(home) if home is not None else home_dir()
    cache = FeatureCache(home / "cache" / "preference_features.safetensors")
    spec = encoder.specs.index((pcfg.layer, pcfg.pooling)) if (pcfg.layer, pcfg.pooling) in encoder.specs else None
    if spec is None:
        raise ConfigError(f"the encoder computes {encoder.specs}, not layer {pcfg.layer} / {pcfg.pooling}")
    tc, tr = (a[:, spec] for a in encode_examples(encoder, train, cache))
    ec, er = (a[:, spec] for a in encode_examples(encoder, evals, cache))
    model = fit_preference_model(tc, tr, train, pcfg, model_id=encoder.model_id)
    metrics = metrics_for(model, (tc, tr), (ec, er), train, evals, time.perf_counter() - start, skipped)
    model.metrics = metrics.to_dict()
    model.save(out_dir)
    return metrics


# -- ranking at inference ----------------------------------------------------------------------------------------


def rank_candidates(model: PreferenceModel, decisions: Sequence[Any],
                    observations: Sequence[str | None] | None = None) -> list[float]:
    """The overall preference score of each candidate decision (anything with `.prompt` and `.completion`);
    higher is better. `observations[i]`: what decision i's SEARCH retrieves (`candidate_text`); required when the
    model was trained with observations. The model needs an encoder (`PreferenceModel.load(path, encoder)` or
    `.attach`)."""
    if model.encoder is None:
        raise ConfigError("the preference model has no encoder attached; load it with an encoder or call attach()")
    if model.cfg.observation and observations is None:
        raise ConfigError("this preference model reads what each SEARCH candidate retrieves: pass observations "
                          "(RankedPolicy previews them in the episode's environment)")
    texts = [candidate_text(d.completion, observations[i] if model.cfg.observation else None)
             for i, d in enumerate(decisions)]
    scores: list[float] = [math.nan] * len(decisions)
    by_prompt: dict[str, list[int]] = {}
    for i, d in enumerate(decisions):
        by_prompt.setdefault(d.prompt, []).append(i)
    for prompt, idx in by_prompt.items():
        feats = model.encoder.encode(prompt, [texts[i] for i in idx])[:, 0]
        with torch.no_grad():
            values = model.overall(torch.as_tensor(feats)).tolist()
        for i, v in zip(idx, values):
            scores[i] = float(v)
    return scores


class RankedPolicy:
    """Best-of-K with the preference model, as an `EpisodePolicy` (methods/base.py): at each state the greedy
    decision and `k` sampled siblings (merged when identical) are scored by `rank_candidates`; the best-scoring one
    is taken. `adapter` (a name loaded in the LM's backend) is activated at `begin`, like the agent method does; the
    encoder always reads the base weights. A model trained with observations needs the episode's environment
    (`attach_env`, called by `run_episode`) to preview what each SEARCH candidate retrieves."""

    def __init__(self, lm_policy, reward_model: PreferenceModel, k: int = 4, *, temperature: float | None = None,
                 seed: int = 0, include_greedy: bool = True, adapter: str | None = None) -> None:
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}")
        self.lm, self.model, self.k = lm_policy, reward_model, k
        self.temperature, self.seed, self.include_greedy, self.adapter = temperature, seed, include_greedy, adapter
        self.name = "agent-rm"
        self.label = f"agent best-of-{k} by preference model" + (f" + adapter {adapter}" if adapter else "")
        self._calls = 0
        self._env = None
        if reward_model.encoder is None:
            backend = getattr(lm_policy, "backend", None)
            if backend is None:
                raise ConfigError("attach an encoder to the preference model, or pass an LMPolicy with a backend")
            reward_model.attach(PrefixEncoder.from_backend(backend, ((reward_model.cfg.layer,
                                                                      reward_model.cfg.pooling),)))

    def begin(self, question) -> None:
        self._calls = 0
        backend = getattr(self.lm, "backend", None)
        if backend is not None and hasattr(backend, "activate"):
            backend.activate(self.adapter)

    def attach_env(self, env) -> None:
        self._env = env

    def _observations(self, view, decisions: Sequence[Any]) -> list[str | None] | None:
        if not self.model.cfg.observation:
            return None
        if self._env is None:
            raise ConfigError("this preference model reads what each SEARCH candidate retrieves; the policy needs "
                              "the episode's environment (attach_env, as run_episode does)")
        from evorag_core.env.actions import Search
        from evorag_core.policy.prompts import render_search_result

        chars = self.lm.cfg.passage_chars
        return [render_search_result(view, self._env.preview_search(d.action.query), chars)
                if isinstance(d.action, Search) else None for d in decisions]

    def act(self, view) -> tuple[Any, dict[str, Any]]:
        self._calls += 1
        found = list(self.lm.candidates(view, k=self.k, temperature=self.temperature,
                                        seed=self.seed * 100_003 + self._calls))
        if self.include_greedy:
            found.insert(0, self.lm.act(view))
        first: dict[str, Any] = {}
        for d in found:
            first.setdefault(d.completion, d)
        unique = list(first.values())
        observations = self._observations(view, unique)
        scores = rank_candidates(self.model, unique, observations)
        best = max(range(len(unique)), key=scores.__getitem__)
        choice = unique[best]
        info: dict[str, Any] = {"completion": choice.completion, "logprob": float(choice.logprob),
                                "rm_score": scores[best], "rm_candidates": len(unique),
                                "rm_observed": sum(1 for o in observations or () if o)}
        for name in ("action_logprob", "argument_logprob"):
            if hasattr(choice, name):
                info[name] = float(getattr(choice, name))
        if getattr(choice, "fallback", None):
            info["fallback"] = choice.fallback
        return choice.action, info


def ranked_policy_from_path(lm_policy, path: Path | str, k: int = 4, adapter: str | None = None) -> RankedPolicy:
    """For the agent's `--rank-with-rm PATH` option: load the saved model and wrap the LM policy."""
    return RankedPolicy(lm_policy, PreferenceModel.load(path), k, adapter=adapter)
