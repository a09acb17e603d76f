"""The supervisor in a launched studio (#44 item 4, end to end): `evorag studio` as a subprocess with its own worker
(the tiny model), a DPO round queued in its store; the studio's worker process is SIGKILLed while the round trains.
The studio restarts it and the round finishes on attempt 2: succeeded, every pair consumed once, one adapter.
tests/app/test_worker_process.py holds the same story on the WorkerProcess and Services objects alone."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from evorag_core.store import NewPair, open_store
from tests.studio_process import serve_studio
from tests.training.test_worker import HOLD, PROMPT, SETTINGS, tiny, wait_for  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow]


def _workers(db_path: Path) -> list[int]:
    """Pids of the `evorag worker` processes serving this database (the studio's children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"worker" in argv and any(str(db_path).encode() in a for a in argv):
            found.append(int(entry.name))
    return found


def test_the_studio_restarts_its_killed_worker_and_the_round_finishes_once(tmp_path, tiny):  # noqa: F811
    db_path = tmp_path / "studio.db"
    url = f"sqlite:///{db_path}"
    store = open_store(url)
    store.add_pairs([NewPair(PROMPT.format(f"who founded town {i}"), f"SEARCH: town {i} founder", f"ANSWER: {i}")
                     for i in range(8)])
    args = ["--model", str(tiny), "--no-warm", "--set", "studio.worker_restart_s=0.5",
            "--set", "train.lease_seconds=600"]
    args += [a for k, v in SETTINGS.items() for a in ("--set", f"{k}={v}")]
    # HOLD (passed on to the studio's worker): attempt 1 stays mid-round after its first step, however fast the machine
    with serve_studio(tmp_path / "home", url, tmp_path / "studio.log", *args, env=HOLD):
        [first] = wait_for(lambda: _workers(db_path), 120, "the studio's worker")
        rid = store.enqueue_round("dpo", {"pairs": 8, "epochs": 1}, max_attempts=2)
        wait_for(lambda: (store.get_round(rid).progress or {}).get("step", 0) >= 1, 300, "training progress")
        assert store.count_pairs("status") == {"claimed": 8}
        os.kill(first, signal.SIGKILL)
        second = wait_for(lambda: [p for p in _workers(db_path) if p != first], 120, "a restarted worker")
        assert second and first not in _workers(db_path)
        done = wait_for(lambda: (r := store.get_round(rid)).status in ("succeeded", "failed") and r, 1800,
                        "the round finished")
        assert done.status == "succeeded" and done.attempts == 2, done.error
        assert store.count_pairs("status") == {"consumed": 8}
        assert [a.name for a in store.list_adapters()] == [f"r{rid}-dpo"]
    store.close()
