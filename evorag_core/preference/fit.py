"""Fitting the preference model: heads by L-BFGS on encoded pairs, the combiner on out-of-fold differences, metrics, and `train_preference_model` end to end."""
from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from evorag_core.config import Config, PreferenceConfig
from evorag_core.errors import ConfigError, TrainingError
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.preference.encoder import FeatureCache, PrefixEncoder, encode_examples
from evorag_core.preference.examples import PairLike, PreferenceExample, examples_from_pairs, split_examples
from evorag_core.preference.model import PreferenceModel, preference_loss

if TYPE_CHECKING:
    from evorag_core.store import Store


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


def _load_pairs(store_or_pairs: Store | Iterable[PairLike]) -> list[PairLike]:
    if hasattr(store_or_pairs, "list_pairs"):
        return [p for p in store_or_pairs.list_pairs(limit=None) if p.status != "discarded"]
    return list(store_or_pairs)


def train_preference_model(store_or_pairs: Store | Iterable[PairLike], cfg: Config, out_dir: Path | str, *,
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
