"""Several workers, one database (issue 28): 4 real worker processes (`python -m training.worker --once`) on one
PostgreSQL store (tests/pg_fixture.py) with 4 queued tiny DPO rounds. The claim is `SELECT ... FOR UPDATE SKIP
LOCKED` on the oldest queued round (evorag_core/store/rounds.py), so concurrent workers take different rounds and
none waits on another's lock; a round's pairs are claimed the same way.

Expected: every round succeeds on its first attempt, each under a different worker (4 distinct lease owners: no
round ran twice, no worker ran two), each of the 8 queued pairs is consumed by exactly one round (2 per round), and
the rounds ran concurrently (their started/finished times overlap; measured on 2026-11-27: all 4 at once).
The test waits on the rounds' status in the store, never on a fixed sleep.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.pg_fixture import pg_server, pg_url  # noqa: F401  (fixtures)
from evorag_core.store import NewPair, open_store

PROMPT = "<|im_start|>system\nYou answer.<|im_end|>\n<|im_start|>user\nQuestion: {}<|im_end|>\n<|im_start|>assistant\n"
SETTINGS = {"policy.device": "cpu", "policy.threads": 1, "train.max_length": 96, "train.lr": 1e-3,
            "train.batch_size": 1, "train.epochs": 1, "train.dtype": "float32"}
WORKERS = 4
TIMEOUT_S = 900


def _start_worker(home: Path, url: str, tiny: Path) -> tuple[subprocess.Popen, Path]:
    log = home / f"worker-{time.monotonic_ns()}.log"
    args = ["--home", str(home), "--db", url, "--model", str(tiny), "--once", "--lease", "60"]
    for key, value in SETTINGS.items():
        args += ["--set", f"{key}={value}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO),
               OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "training.worker", *args], cwd=REPO, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    return proc, log


def _overlap(rows) -> int:
    """The most rounds running at one instant (from started_at / finished_at)."""
    events = sorted([(r.started_at, 1) for r in rows] + [(r.finished_at, -1) for r in rows])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


@pytest.mark.slow
@pytest.mark.postgres
def test_four_workers_on_one_postgres_run_four_rounds_each_once(tmp_path, tiny, pg_url):  # noqa: F811
    store = open_store(pg_url)
    try:
        store.add_pairs([NewPair(PROMPT.format(f"who founded town {i}"), f"SEARCH: town {i} founder", f"ANSWER: {i}")
                         for i in range(2 * WORKERS)])
        ids = [store.enqueue_round("dpo", {"pairs": 2, "reference": "base"}) for _ in range(WORKERS)]
        workers = [_start_worker(tmp_path, pg_url, tiny) for _ in range(WORKERS)]
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                rows = [store.get_round(i) for i in ids]
                if all(r.status in ("succeeded", "failed", "cancelled") for r in rows):
                    break
                exited = [(p.returncode, log) for p, log in workers if p.poll() is not None and p.returncode != 0]
                if exited:
                    pytest.fail(f"a worker exited with {exited[0][0]}:\n{exited[0][1].read_text()[-3000:]}")
                if time.monotonic() > deadline:
                    pytest.fail(f"rounds not finished after {TIMEOUT_S} s: {[(r.id, r.status) for r in rows]}")
                time.sleep(0.5)  # a poll interval of the store, not a wait for something to happen
            codes = [p.wait(120) for p, _ in workers]
        finally:
            for p, _ in workers:
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
        logs = "\n".join(log.read_text()[-1500:] for _, log in workers)
        assert [r.status for r in rows] == ["succeeded"] * WORKERS, ([(r.id, r.status, r.error) for r in rows], logs)
        assert codes == [0] * WORKERS, logs
        assert [r.attempts for r in rows] == [1] * WORKERS  # each round claimed once
        assert len({r.lease_owner for r in rows}) == WORKERS  # by 4 different workers
        pair_ids = [p for r in rows for p in r.metrics["pair_ids"]]
        assert len(pair_ids) == 2 * WORKERS and len(set(pair_ids)) == 2 * WORKERS  # no pair trained twice
        assert store.count_pairs("status") == {"consumed": 2 * WORKERS}
        overlap = _overlap(rows)
        print(f"{WORKERS} rounds, at most {overlap} running at once")
        assert overlap >= 2  # the claims did not serialise the rounds (measured: all 4 at once)
    finally:
        store.close()
