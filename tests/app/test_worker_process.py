"""The studio's supervised worker (app/common/worker_process.py) with real processes and a real SQLite store: a worker that
dies is restarted after a backoff the page header shows; a worker SIGKILLed mid-round has its round reaped by the
studio at once and finished by the restarted worker, no pair lost or consumed twice."""
from __future__ import annotations

import os
import re
import signal
import sys

import pytest

from app.common.services import Services
from app.common.worker_process import WorkerProcess, restart_delay
from app.tabs.training.handlers import header_status
from evorag_core.config import apply_overrides
from tests.paths import DEMO, REPO
from tests.training.test_worker import HOLD, cli_args, tiny, wait_for, world  # noqa: F401  (fixtures)


def test_restart_delay_doubles_up_to_the_cap():
    """backoff 1 s, cap 5 s: restarts 0, 1, 2, 3 wait 1, 2, 4, 5 s."""
    assert [restart_delay(n, 1.0, 5.0) for n in range(4)] == [1.0, 2.0, 4.0, 5.0]


def test_a_worker_that_keeps_dying_is_restarted_with_a_growing_backoff_shown_in_the_header(tmp_path):
    """A worker command that exits with code 3 at once, backoff 0.2 s doubling to at most 0.8 s: it is restarted
    again and again, each death reported to on_exit with its pid and code, and while it waits the header says
    "worker: exited with code 3; restarting in N s (restart K)". Stopped, it is restarted no more."""
    exits: list[tuple[int, int]] = []
    worker = WorkerProcess([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ), tmp_path / "w.log",
                           backoff_s=0.2, max_backoff_s=0.8, on_exit=lambda pid, code: exits.append((pid, code)))
    worker.start()
    try:
        seen = wait_for(lambda: re.fullmatch(r"worker: exited with code 3; restarting in \d+ s \(restart ([3-9])\)",
                                             worker.describe()), 60, "the third restart pending")
        assert int(seen.group(1)) >= 3 and worker.restarts >= 2
        assert len(exits) >= 3 and {code for _, code in exits} == {3} and len({pid for pid, _ in exits}) == len(exits)
    finally:
        worker.stop()
    restarts = worker.restarts
    assert not worker.alive and worker.restarts == restarts


@pytest.mark.slow
def test_a_worker_sigkilled_mid_round_is_restarted_and_the_round_finished_once(world, tiny):  # noqa: F811
    """The worker is SIGKILLed while round 1 trains with its 8 pairs claimed (lease 600 s, so only the studio can
    hand the round back): the studio reaps the round at once ("queued to retry (attempt 2/2)", pairs released),
    restarts the worker after its backoff - the header says "restarted 1 time, last exit code -9" - and that
    worker finishes the round: attempt 2, succeeded, all 8 pairs consumed exactly once, one adapter."""
    home, url, store, cfg = world
    svc = Services(apply_overrides(cfg, {"studio.worker_restart_s": 0.5}), home, data_path=DEMO, db_url=url)
    rid = store.enqueue_round("dpo", {"pairs": 8, "epochs": 4}, max_attempts=2)
    argv = [sys.executable, "-m", "evorag_core.cli.main", "worker", *cli_args(home, url, tiny), "--lease", "600",
            "--poll", "0.3"]
    # HOLD: the first attempt stays mid-round after its first step, however fast the machine trains
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO), **HOLD)
    svc.worker = WorkerProcess(argv, env, home / "worker.log", backoff_s=svc.cfg.studio.worker_restart_s,
                               on_exit=svc.worker_exited)
    tail = lambda: (home / "worker.log").read_text(errors="replace")[-3000:]  # noqa: E731
    try:
        svc.worker.start()
        wait_for(lambda: (store.get_round(rid).progress or {}).get("step", 0) >= 1, 240, "training progress")
        assert store.count_pairs("status") == {"claimed": 8}
        first = svc.worker.proc
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        wait_for(lambda: svc.worker.restarts == 1 and svc.worker.alive, 60, "the restart")
        assert f"worker: running (pid {svc.worker.proc.pid}; restarted 1 time, last exit code -9)" in header_status(svc)
        done = wait_for(lambda: (r := store.get_round(rid)).status in ("succeeded", "failed") and r, 300,
                        "the round finished")
        assert done.status == "succeeded" and done.attempts == 2, f"{done.error}\n{tail()}"
        assert store.count_pairs("status") == {"consumed": 8}
        assert sorted(done.metrics["pair_ids"]) == sorted(p.id for p in store.list_pairs(status="consumed"))
        assert [a.name for a in store.list_adapters()] == [f"r{rid}-dpo"]
    finally:
        svc.close()
