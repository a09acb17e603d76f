"""Adaptive weight tuning (paper appendix B.2): a UCB1 bandit over a grid of weight tables, or Bayesian optimisation
(optuna's TPE) over the 7 x 3 Start/Mid/End endpoints. Each trial's score is whatever `score(table, trial)` returns;
`evorag tune-weights` makes it "re-score the stored rollouts under this table, train a short round, mean F1 on a dev
split" (the ablation pipeline's `AblationRun.variant`). The best table is written as a `[weights]` TOML snippet that
`--config` accepts.

- `ucb1(n_arms, pull, budget)`: pull every arm once, then the arm with the highest mean + c sqrt(ln n / n_i); the
  best arm is the one with the highest mean (the hand table's arm when it ties for it). A round with the same seed
  is deterministic, so the CLI pulls an arm again with the next seed (a fresh round): the bandit's noise is the
  training noise.
- `weight_grid(table)`: 9 arms, the answer weight kappa and the six process weights each scaled by 0.5, 1 or 2.
- `bo_search(score, n_trials)`: optuna over the 21 endpoints, each in [0, 2 x its paper value] (rho: [0, 1]).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from evorag_core.config import WeightsConfig
from evorag_core.env.scheduler import PAPER_TABLE, WEIGHT_NAMES, WeightTable
from evorag_core.signal_table import WEIGHT_COLUMNS

__all__ = ["UcbResult", "ucb1", "weight_grid", "scaled", "search_space", "table_from_params", "table_params",
           "bo_search", "best_trial", "toml_snippet"]

COLUMNS = WEIGHT_COLUMNS


@dataclass(frozen=True)
class UcbResult:
    best: int  # the arm with the highest mean reward
    counts: tuple[int, ...]
    means: tuple[float, ...]
    history: tuple[tuple[int, float], ...] = field(default=())  # (arm, reward) per pull, in order


def ucb1(n_arms: int, pull: Callable[[int, int], float], budget: int, c: float = math.sqrt(2),
         prefer: int | None = None) -> UcbResult:
    """UCB1 (Auer et al. 2002) for `budget` pulls; `pull(arm, k)` returns the reward of the k-th pull (0-based) of
    `arm`. Ties go to the lower arm index, so a run is deterministic given the rewards - except the best arm: when
    `prefer` (the incumbent, e.g. the hand table) ties for the highest mean, it stays the best, so another arm is
    named best only when it scored strictly higher."""
    if n_arms < 1 or budget < n_arms:
        raise ValueError(f"UCB1 needs at least one arm and a budget >= the arms ({n_arms}), got {budget}")
    counts, sums, history = [0] * n_arms, [0.0] * n_arms, []
    for n in range(budget):
        if n < n_arms:
            arm = n
        else:
            arm = max(range(n_arms), key=lambda i: sums[i] / counts[i] + c * math.sqrt(math.log(n) / counts[i]))
        reward = float(pull(arm, counts[arm]))
        counts[arm] += 1
        sums[arm] += reward
        history.append((arm, reward))
    means = tuple(s / k for s, k in zip(sums, counts))
    best = max(range(n_arms), key=lambda i: means[i])
    if prefer is not None and means[prefer] == means[best]:
        best = prefer
    return UcbResult(best, tuple(counts), means, tuple(history))


def scaled(table: WeightTable, kappa: float, process: float) -> WeightTable:
    """`table` with the answer weight kappa scaled by `kappa` and the six process weights by `process`."""
    def col(c):
        return {w: c[w] * (kappa if w == "kappa" else process) for w in WEIGHT_NAMES}
    return WeightTable(col(table.start), col(table.mid), col(table.end))


def weight_grid(table: WeightTable = PAPER_TABLE, factors: Sequence[float] = (0.5, 1.0, 2.0)
                ) -> list[tuple[str, WeightTable]]:
    """The UCB1 arms: (name, table) for every (kappa factor, process factor) pair; the hand table is `k1-p1`."""
    return [(f"k{k:g}-p{p:g}", scaled(table, k, p)) for k in factors for p in factors]


def search_space(table: WeightTable = PAPER_TABLE) -> dict[str, tuple[float, float]]:
    """The BO bounds of the 21 endpoints (`<weight>_<column>`, as the [weights] config keys)."""
    out = {}
    for col_name, col in zip(COLUMNS, (table.start, table.mid, table.end)):
        for w in WEIGHT_NAMES:
            out[f"{w}_{col_name}"] = (0.0, max(2.0 * float(col[w]), 1.0 if w == "rho" else 0.02))
    return out


def table_from_params(params: dict[str, float]) -> WeightTable:
    return WeightTable.from_config(WeightsConfig(**{k: float(v) for k, v in params.items()}))


def bo_search(score: Callable[[WeightTable, int], float], n_trials: int, *, seed: int = 0,
              space: dict[str, tuple[float, float]] | None = None, start: WeightTable | None = PAPER_TABLE,
              storage: str | None = None, study_name: str = "tune-weights"):
    """Maximise `score(table, trial_number)` with optuna's TPE sampler over `space` (default `search_space()`);
    the first trial is `start` (the hand table) when given. With `storage` (an optuna storage URL) the study is kept
    there and a rerun continues it up to `n_trials` finished trials. Returns the optuna study."""
    import optuna

    space = space or search_space()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed),
                                storage=storage, study_name=study_name, load_if_exists=storage is not None)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if start is not None and not study.trials:
        study.enqueue_trial({k: v for k, v in table_params(start).items() if k in space})

    def objective(trial) -> float:
        params = {k: trial.suggest_float(k, lo, hi) for k, (lo, hi) in space.items()}
        base = table_params(start or PAPER_TABLE)
        return float(score(table_from_params({**base, **params}), trial.number))

    remaining = n_trials - len(done)
    if remaining > 0:
        study.optimize(objective, n_trials=remaining)
    return study


def best_trial(study):
    """The finished trial with the highest value, the earliest on a tie: trial 0 is the hand table (`bo_search`'s
    `start`), so another table is named best only when it scored strictly higher (optuna's own `best_trial` leaves
    the order of ties to the storage)."""
    import optuna

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not done:
        raise ValueError("no finished trial")
    top = max(t.value for t in done)
    return min((t for t in done if t.value == top), key=lambda t: t.number)


def table_params(table: WeightTable) -> dict[str, float]:
    """The 21 endpoints by name (`kappa_end`, ...), as `search_space` and `table_from_params` name them."""
    return {f"{w}_{c}": float(col[w]) for c, col in zip(COLUMNS, (table.start, table.mid, table.end))
            for w in WEIGHT_NAMES}


def toml_snippet(table: WeightTable, comment: str = "") -> str:
    """A `[weights]` table for `--config` (and configs/*.toml): the 21 endpoints, in the paper table's order."""
    lines = [f"# {line}" for line in comment.splitlines()] + ["[weights]"]
    lines += [f"{w}_{c} = {float(col[w])!r}" for w in WEIGHT_NAMES
              for c, col in zip(COLUMNS, (table.start, table.mid, table.end))]
    return "\n".join(lines) + "\n"
