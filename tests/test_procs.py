"""`die_with_parent` (evorag_core/procs.py): a busy pool worker set up with it goes away when the process that started
the pool is killed without cleaning up (SIGKILL), as the rollout executors' and the evaluation pool's workers are
(without it, the worker runs its task to the end: checked by `DIE=0`); on a spawned pool and on the project's own
(`pool_context`: a fork server, the worker's kernel parent, between the driver and the worker)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.paths import REPO

PARENT = """
import multiprocessing, os, sys, time
from evorag_core.procs import die_with_parent, pool_child_init, pool_context


def busy(marker):
    open(marker, "w").close()
    time.sleep(600)


if __name__ == "__main__":
    die = os.environ.get("DIE", "1") == "1"
    if os.environ["CTX"] == "spawn":
        ctx, setup, args = multiprocessing.get_context("spawn"), die_with_parent, (os.getpid(),)
    else:
        ctx, setup, args = pool_context(), pool_child_init, (os.getpid(), dict(os.environ))
        ctx.set_forkserver_preload([])  # the fork server is what is tested here, not the model stack it imports
    pool = ctx.Pool(1, initializer=setup if die else None, initargs=args if die else ())
    worker = pool.apply(os.getpid)
    marker = sys.argv[1]
    pool.apply_async(busy, (marker,))  # busy: an idle worker would leave anyway, on its task pipe's EOF
    while not os.path.exists(marker):  # the task has started
        time.sleep(0.02)
    print(worker, flush=True)
    while True:
        time.sleep(1)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose (its parent, init, reaps it)
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ", 1)[1][0] != "Z"


def _kill_parent(tmp_path, die: bool, ctx: str) -> int:
    """Start the parent, SIGKILL it once its worker is busy; the worker's pid."""
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    marker = tmp_path / f"busy-{int(die)}"
    parent = subprocess.Popen([sys.executable, str(script), str(marker)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO), "DIE": "1" if die else "0", "CTX": ctx})
    try:
        worker = int(parent.stdout.readline())
        assert _alive(worker)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    return worker


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds  # a bound for failure only: the kernel signals at once
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("ctx", ["spawn", "pool_context"])
def test_a_busy_pool_worker_dies_with_its_killed_parent(tmp_path, ctx):
    worker = _kill_parent(tmp_path, die=True, ctx=ctx)
    assert _gone_within(worker, 60), "the worker outlived its killed parent"
    orphan = _kill_parent(tmp_path, die=False, ctx=ctx)  # the control: without it the orphan keeps working
    try:
        assert not _gone_within(orphan, 2)
    finally:
        os.kill(orphan, signal.SIGKILL)
