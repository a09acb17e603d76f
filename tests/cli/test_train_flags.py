"""`evorag train` checks its numbers before it queues a round (#44 item 7): before, `--lr -3`, `--beta nan` or
`--holdout 5` queued a round (exit 0) that the worker then failed. --lr and --beta meet the [train] RULES a
`--set train.lr=...` meets; the whole job is read as the worker reads it (training.job.RoundJob)."""
from __future__ import annotations

import pytest

from evorag_core.cli.main import main as cli_main
from evorag_core.store import open_store

REFUSED = [
    (["--lr", "-3"], "--lr: train.lr must be in (0, 0.1], got -3.0"),
    (["--lr", "inf"], "--lr: train.lr must be a finite number, got inf"),
    (["--lr", "0"], "--lr: train.lr must be in (0, 0.1], got 0.0"),
    (["--lr", "5"], "--lr: train.lr must be in (0, 0.1], got 5.0"),  # the Training tab's bound too
    (["--beta", "-1"], "--beta: train.beta must be > 0, got -1.0"),
    (["--beta", "nan"], "--beta: train.beta must be a finite number, got nan"),
    (["--holdout", "5"], "holdout must be in [0, 1), got 5.0"),
    (["--holdout", "nan"], "holdout must be in [0, 1), got nan"),
    (["--holdout", "-0.1"], "holdout must be in [0, 1), got -0.1"),
]


@pytest.fixture
def db(tmp_path):
    return f"sqlite:///{tmp_path / 'rounds.db'}"


@pytest.mark.parametrize("flags,message", REFUSED, ids=[" ".join(f) for f, _ in REFUSED])
def test_a_bad_training_number_exits_2_and_queues_nothing(flags, message, tmp_path, db, capsys):
    code = cli_main(["train", "--objective", "dpo", *flags, "--home", str(tmp_path), "--db", db])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("evorag train: error: ") and message in err and "nothing queued" in err
    with open_store(db) as store:
        assert store.list_rounds() == []


def test_good_training_numbers_queue_the_round_with_them(tmp_path, db, capsys):
    """--lr 1e-4 --beta 0.2 --holdout 0.25: queued (exit 0) with exactly those values in the round's job."""
    code = cli_main(["train", "--objective", "dpo", "--lr", "1e-4", "--beta", "0.2", "--holdout", "0.25",
                     "--home", str(tmp_path), "--db", db])
    assert code == 0, capsys.readouterr().err
    with open_store(db) as store:
        (queued,) = store.list_rounds()
    assert (queued.config["lr"], queued.config["beta"], queued.config["holdout"]) == (1e-4, 0.2, 0.25)


def test_seed_and_set_train_values_travel_with_the_round(tmp_path, db, capsys):
    """`--seed 1 --set train.batch_size=2 --set train.grad_accum=2`: the round's job carries them, and the worker's
    reading of it (over a config with other values) trains with them; the worker's own lease is not the round's.
    Before, `--set train.*` was read here and dropped: a round queued as seed 1 trained at the worker's seed 0."""
    from evorag_core.config import load_config
    from training.job import RoundJob

    code = cli_main(["train", "--objective", "dpo", "--seed", "1", "--set", "train.batch_size=2", "--set",
                     "train.grad_accum=2", "--set", "train.lease_seconds=30", "--home", str(tmp_path), "--db", db])
    assert code == 0, capsys.readouterr().err
    with open_store(db) as store:
        (queued,) = store.list_rounds()
    assert queued.config["seed"] == 1 and queued.config["train"] == {"batch_size": 2, "grad_accum": 2}
    worker_cfg = load_config(None, {"train.seed": "7", "train.batch_size": "8", "train.grad_accum": "4"})
    job = RoundJob.from_config(queued.id, queued.objective, queued.config, worker_cfg, tmp_path)
    assert (job.train.seed, job.train.batch_size, job.train.grad_accum) == (1, 2, 2)
    assert job.train.lease_seconds == worker_cfg.train.lease_seconds
