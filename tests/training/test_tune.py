"""Adaptive weight tuning's parts on synthetic problems: UCB1 finds the best arm of a Bernoulli bandit, optuna's
search finds the known optimum of a smooth objective over the weight table, and the TOML snippet loads back through
the config loader to the same table."""
from __future__ import annotations

import random

import pytest

from evorag_core.config import load_config
from evorag_core.env.scheduler import PAPER_TABLE, WeightTable
from training.ablation.tune import (best_trial, bo_search, scaled, search_space, table_from_params, table_params,
                                   toml_snippet, ucb1, weight_grid)


def test_ucb1_picks_the_best_arm_of_a_bernoulli_bandit():
    """Arms pay 1 with p = 0.2, 0.5, 0.8, 0.45: after 400 pulls UCB1 names arm 2 best and has pulled it most
    (its regret is logarithmic: the others get O(log n) pulls each)."""
    p = (0.2, 0.5, 0.8, 0.45)
    rng = random.Random(0)
    result = ucb1(len(p), lambda arm, k: float(rng.random() < p[arm]), budget=400)
    assert result.best == 2
    assert result.counts[2] == max(result.counts) and result.counts[2] > 200
    assert sum(result.counts) == 400 and len(result.history) == 400
    assert result.means[2] == pytest.approx(0.8, abs=0.08)


def test_ucb1_pulls_every_arm_first_and_refuses_a_short_budget():
    seen = []
    ucb1(3, lambda arm, k: seen.append((arm, k)) or 0.0, budget=3)
    assert seen == [(0, 0), (1, 0), (2, 0)]
    with pytest.raises(ValueError):
        ucb1(3, lambda arm, k: 0.0, budget=2)


def test_ucb1_keeps_the_incumbent_on_a_tie_and_drops_it_for_a_strictly_better_arm():
    """Rounds that barely move the policy give every table the same dev F1: the hand table (`prefer`) then stays the
    best, not the lowest-index arm; an arm that scores strictly higher still replaces it."""
    flat = ucb1(4, lambda arm, k: 0.35, budget=8, prefer=2)
    assert flat.best == 2 and set(flat.means) == {0.35}
    assert ucb1(4, lambda arm, k: 0.35, budget=8).best == 0  # without an incumbent: the lower index
    better = ucb1(4, lambda arm, k: 0.36 if arm == 3 else 0.35, budget=8, prefer=2)
    assert better.best == 3


def test_bo_keeps_the_hand_table_on_a_flat_objective(tmp_path):
    """Every trial scores the same (rounds too short to move the dev F1): the best trial is the first, the hand
    table, kept in a sqlite study as the CLI keeps it; a later trial that scores higher replaces it."""
    study = bo_search(lambda table, n: 0.35, 4, seed=0, storage=f"sqlite:///{tmp_path / 'flat.db'}")
    top = best_trial(study)
    assert top.number == 0 and table_from_params({**table_params(PAPER_TABLE), **top.params}) == PAPER_TABLE
    study = bo_search(lambda table, n: 0.35 + (n == 2) * 0.01, 4, seed=0, storage=f"sqlite:///{tmp_path / 'up.db'}")
    assert best_trial(study).number == 2


def test_weight_grid_holds_the_hand_table():
    """9 arms; k1-p1 is the paper table; k2-p0.5 doubles kappa and halves beta."""
    grid = dict(weight_grid(PAPER_TABLE))
    assert len(grid) == 9 and grid["k1-p1"] == scaled(PAPER_TABLE, 1, 1)
    assert grid["k1-p1"].end["kappa"] == 1.0
    assert grid["k2-p0.5"].end["kappa"] == 2.0 and grid["k2-p0.5"].start["beta"] == 1.0


def test_bo_finds_the_known_optimum_of_a_synthetic_objective():
    """Two free endpoints (the other 19 fixed at the paper's values): score = -(kappa_end - 1.5)^2 -
    (beta_start - 0.5)^2, maximum 0 at kappa_end = 1.5, beta_start = 0.5. 60 TPE trials get within 0.15 of it."""
    space = {"kappa_end": (0.0, 2.0), "beta_start": (0.0, 4.0)}

    def score(table: WeightTable, n: int) -> float:
        assert table.mid == PAPER_TABLE.mid  # the endpoints left out of the space keep the start table's values
        return -(table.end["kappa"] - 1.5) ** 2 - (table.start["beta"] - 0.5) ** 2

    study = bo_search(score, 60, seed=0, space=space)
    assert study.trials[0].params == {"kappa_end": 1.0, "beta_start": 2.0}  # the hand table goes first
    assert abs(study.best_params["kappa_end"] - 1.5) < 0.15 and abs(study.best_params["beta_start"] - 0.5) < 0.15
    assert study.best_value > -0.03


def test_bo_space_covers_the_21_endpoints():
    space = search_space()
    assert len(space) == 21 and space["kappa_end"] == (0.0, 2.0) and space["rho_mid"] == (0.0, 1.0)


def test_toml_snippet_loads_back_to_the_same_weights(tmp_path):
    """A tuned table written as a snippet is a --config file: load_config gives the same 21 weights."""
    tuned = scaled(PAPER_TABLE, 1.7, 0.3)
    path = tmp_path / "best.toml"
    path.write_text(toml_snippet(tuned, "tuned by a test\nsecond line"))
    cfg = load_config(path)
    assert WeightTable.from_config(cfg.weights) == tuned
    assert cfg.reward == load_config().reward  # nothing else changes
