"""Fitting the answer ranker (`reader.ranker`): a conditional logit over each question's candidates, and a logistic
yes/no model over the label margins, both L2-regularised, by L-BFGS in torch.

`RankerExample`: one question's candidate features and which candidates are correct (EM with a gold answer).
Questions with no correct candidate carry no signal for a softmax over candidates and are left out of the fit
(they still count in any evaluation). Features are standardised for the fit (so one L2 strength suits all) and the
weights mapped back to raw units; a per-feature mean shift is the same for every candidate of a question, so it
cancels in the softmax and is dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from evorag_core.reader.ranker import FEATURES, RankerWeights, YesNoModel

__all__ = ["RankerExample", "YesNoExample", "fit_ranker", "fit_yes_no"]


@dataclass(frozen=True)
class RankerExample:
    features: tuple[Mapping[str, float], ...]
    correct: tuple[bool, ...]


@dataclass(frozen=True)
class YesNoExample:
    raw: float
    content_free: float
    yes: bool


def _matrix(features: Sequence[Mapping[str, float]]) -> torch.Tensor:
    return torch.tensor([[f.get(n, 0.0) for n in FEATURES] for f in features], dtype=torch.float64)


def fit_ranker(examples: Sequence[RankerExample], l2: float = 10.0, yes_no: YesNoModel | None = None,
               meta: Mapping[str, object] | None = None, max_iter: int = 200) -> RankerWeights:
    """Weights maximising sum over questions of log sum_{correct c} softmax(w . x)_c - l2/2 |w_std|^2."""
    usable = [e for e in examples if any(e.correct) and len(e.correct) > 1]
    if not usable:
        raise ValueError("no question has a correct candidate among two or more: nothing to fit")
    mats = [_matrix(e.features) for e in usable]
    masks = [torch.tensor(e.correct, dtype=torch.bool) for e in usable]
    allx = torch.cat(mats)
    mean, std = allx.mean(0), allx.std(0)
    std = torch.where(std > 1e-9, std, torch.ones_like(std))
    mats = [(m - mean) / std for m in mats]
    w = torch.zeros(len(FEATURES), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.zeros((), dtype=torch.float64)
        for m, mask in zip(mats, masks):
            logp = torch.log_softmax(m @ w, dim=0)
            loss = loss - torch.logsumexp(logp[mask], dim=0)
        loss = loss / len(mats) + 0.5 * l2 * (w * w).sum() / len(mats)
        loss.backward()
        return loss

    opt.step(closure)
    raw = (w.detach() / std).tolist()
    weights = {n: v for n, v in zip(FEATURES, raw) if abs(v) > 1e-12}
    return RankerWeights(weights, yes_no or YesNoModel(), dict(meta or {}, questions_fitted=len(usable), l2=l2))


def fit_yes_no(examples: Sequence[YesNoExample], l2: float = 1.0, max_iter: int = 100) -> YesNoModel:
    """Logistic regression of yes on (raw margin, content-free margin) with an intercept (intercept not penalised)."""
    if not examples or len({e.yes for e in examples}) < 2:
        raise ValueError("yes/no fit needs both yes and no examples")
    x = torch.tensor([[e.raw, e.content_free] for e in examples], dtype=torch.float64)
    y = torch.tensor([float(e.yes) for e in examples], dtype=torch.float64)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logit = x @ w[:2] + w[2]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="sum")
        loss = (loss + 0.5 * l2 * (w[:2] * w[:2]).sum()) / len(examples)
        loss.backward()
        return loss

    opt.step(closure)
    a, b, c = w.detach().tolist()
    return YesNoModel(a, b, c)
