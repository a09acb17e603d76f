"""R²AG's Top-Survivor rewards for one expansion (SPEC §7; seed 002 Eq. 5, Appendix B.2), as pure functions.

    R = α·R_MH + β·R_JH + γ·R_AP + ω·R_f            (α = 0.2, β = 0.3, γ = 0.2, ℓ = 1.25, ω·R_f ≤ 0.02)
    R_MH = R_MH^b + ℓ·R_MH^p      new gold documents hit by base / predicted queries (not retrieved before)
    R_JH = 1{every gold document retrieved up to this step and the stop signal emitted}
    R_AP = R_AP^b + R_AP^p        R_AP^* = (1/|g|) Σ_{u ≤ t_*} P@u · 1{r_u ∈ g} over the first t_* queries of a kind
    R_f  = 0.01 per well-formed base/predicted segment after a think block (capped so that ω·R_f ≤ 0.02)
    R = 0 when the reply has no think block, when it stops before every gold document is retrieved (this step's
    retrievals included), or when it was cut by the token limit (the paper's overlong rule).

Inputs: per query of a kind, in the reply's order, the pids it retrieved (top-k; top-1 in the paper); `prior` = the
pids retrieved before this step; `gold` = g. A query "hits" when any of its pids is gold. Decisions where the paper
leaves room: R_MH counts distinct new gold documents (SPEC's "new gold docs hit": two queries landing on the same
new gold passage count once), and a document reached by both kinds counts once, as a base hit — the predicted
queries earn ℓ only for gold the base queries did not reach (otherwise copying a base query into <predicted-Q>
would earn 1 + ℓ for one document); R_AP follows the formula literally (a hit need not be new). With |g| = 0 (no
gold known) every gold-based term is 0.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

__all__ = ["RewardWeights", "R2agReward", "multi_hit", "joint_hit", "average_precision", "format_reward",
           "expansion_reward"]

Retrieved = Sequence[Sequence[str]]  # per query (in reply order): the pids it retrieved


@dataclass(frozen=True)
class RewardWeights:
    alpha: float = 0.2
    beta: float = 0.3
    gamma: float = 0.2
    ell: float = 1.25
    omega: float = 1.0
    format_per_query: float = 0.01
    format_max: float = 0.02  # cap of omega * R_f
    top_t_base: int = 4
    top_t_predicted: int = 2

    @classmethod
    def from_config(cls, cfg) -> "RewardWeights":
        """From an `R2agConfig` (or anything with the same attribute names)."""
        return cls(**{k: getattr(cfg, k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class R2agReward:
    multi_hit: float  # R_MH (ℓ applied)
    joint_hit: float  # R_JH
    average_precision: float  # R_AP (base + predicted)
    format: float  # R_f (uncapped count x per-query value, before ω; the cap applies to ω·R_f)
    total: float  # R after the zero-reward rules
    zeroed: str = ""  # why the total is 0 by rule: "no_think" | "early_stop" | "truncated" | ""

    def to_dict(self) -> dict:
        return asdict(self)


def _new_gold(retrieved: Retrieved, prior: frozenset[str], gold: frozenset[str]) -> set[str]:
    return {pid for pids in retrieved for pid in pids if pid in gold and pid not in prior}


def multi_hit(base: Retrieved, predicted: Retrieved, prior: frozenset[str], gold: frozenset[str],
              ell: float = 1.25) -> float:
    """R_MH = |new gold hit by base| + ℓ·|new gold hit by predicted and not by base|."""
    by_base = _new_gold(base, prior, gold)
    return len(by_base) + ell * len(_new_gold(predicted, prior, gold) - by_base)


def joint_hit(retrieved_so_far: frozenset[str], gold: frozenset[str], stop: bool) -> float:
    """R_JH = 1 when every gold pid is in `retrieved_so_far` (this step included) and stop was emitted."""
    return float(bool(gold) and stop and gold <= retrieved_so_far)


def average_precision(retrieved: Retrieved, gold: frozenset[str], t: int) -> float:
    """(1/|g|) Σ_{u=1..min(t, n)} P@u · 1{query u hits}, P@u = hits among the first u queries / u."""
    if not gold:
        return 0.0
    hits = total = 0.0
    for u, pids in enumerate(retrieved[:t], start=1):
        hit = any(pid in gold for pid in pids)
        hits += hit
        if hit:
            total += hits / u
    return total / len(gold)


def format_reward(has_think: bool, well_formed: int, per_query: float = 0.01) -> float:
    """R_f = per_query x well-formed base/predicted segments after a think block; 0 without one."""
    return per_query * well_formed if has_think else 0.0


def expansion_reward(
    base: Retrieved,
    predicted: Retrieved,
    prior: frozenset[str],
    gold: frozenset[str],
    *,
    stop: bool,
    has_think: bool,
    well_formed: int,
    truncated: bool = False,
    weights: RewardWeights = RewardWeights(),
) -> R2agReward:
    """All terms and R for one expansion (see the module docstring)."""
    gold = frozenset(gold)
    so_far = frozenset(prior) | {pid for pids in [*base, *predicted] for pid in pids}
    mh = multi_hit(base, predicted, frozenset(prior), gold, weights.ell)
    jh = joint_hit(so_far, gold, stop)
    ap = average_precision(base, gold, weights.top_t_base) + average_precision(predicted, gold, weights.top_t_predicted)
    rf = format_reward(has_think, well_formed, weights.format_per_query)
    zeroed = ""
    if not has_think:
        zeroed = "no_think"
    elif stop and not gold <= so_far:
        zeroed = "early_stop"
    elif truncated:
        zeroed = "truncated"
    total = 0.0
    if not zeroed:
        total = (weights.alpha * mh + weights.beta * jh + weights.gamma * ap
                 + min(weights.omega * rf, weights.format_max))
    return R2agReward(mh, jh, ap, rf, total, zeroed)
