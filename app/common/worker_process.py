"""The studio's background `evorag worker`, supervised: started with the studio, restarted when it dies, stopped
with the studio.

A thread waits on the process. When the worker exits while the studio runs (SIGKILL, out of memory, a crash),
`on_exit(pid, code)` is called first (the studio reaps the rounds that worker held, so they run again at once instead
of after their lease), then the worker is started again after a backoff: `backoff_s`, doubled on each exit that
follows a short run, at most `max_backoff_s`; a worker that ran `STABLE_S` or longer starts the count again. The
header shows it: "worker: exited with code -9; restarting in 2 s (restart 2)", then "worker: running (pid 4242;
restarted 2 times, last exit code -9)".

Every restart is started from the supervising thread, which lives until the studio stops the worker: on Linux the
child gets SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG), so the thread stops the worker itself
(SIGTERM, a grace period to fail its round, then SIGKILL) before it ends.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from evorag_core.procs import die_with_parent

__all__ = ["WorkerProcess", "restart_delay", "WORKER_NICE", "STABLE_S"]

log = logging.getLogger(__name__)

WORKER_NICE = 10  # the worker trains at a lower CPU priority than the studio, so that the page stays responsive
STABLE_S = 60.0  # a worker that ran this long before it exited restarts after the first backoff again
STOP_GRACE_S = 30.0  # SIGTERM -> SIGKILL: time for the worker to fail its running round and exit


def restart_delay(restarts: int, backoff_s: float, max_backoff_s: float) -> float:
    """Seconds before restart number `restarts` + 1 of a worker that keeps dying: 1, 2, 4 ... s for backoff_s = 1."""
    return min(backoff_s * 2.0 ** restarts, max_backoff_s)


def _worker_child_setup() -> None:  # runs in the child between fork and exec (Linux only)
    os.nice(WORKER_NICE)
    die_with_parent()


class WorkerProcess:
    """`evorag worker` as a supervised subprocess (see the module docstring). Thread-safe `describe()` for the page."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, *, backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0, on_exit: Callable[[int, int], None] | None = None):
        self.argv, self.env, self.log_path = argv, env, log_path
        self.backoff_s, self.max_backoff_s, self.on_exit = backoff_s, max_backoff_s, on_exit
        self.proc: subprocess.Popen | None = None
        self.restarts = 0  # restarts so far (shown in the header)
        self.last_code: int | None = None  # exit code of the last worker that died
        self._streak = 0  # exits in a row after short runs: the backoff's exponent
        self._started_at = 0.0
        self._restart_at: float | None = None  # time.monotonic() of the next restart while backing off
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._supervise, name="evorag-worker-supervisor", daemon=True)

    def start(self) -> None:
        """Start the worker (in this thread, so that `proc` is set on return) and its supervising thread."""
        self._spawn()
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def describe(self) -> str:
        with self._lock:
            proc, restart_at = self.proc, self._restart_at
        if proc is None:
            return "worker: not started"
        code = proc.poll()
        if code is None:
            history = (f"; restarted {self.restarts} time{'s' if self.restarts != 1 else ''}, last exit code "
                       f"{self.last_code}" if self.restarts else "")
            return f"worker: running (pid {proc.pid}{history})"
        if restart_at is not None and not self._stop.is_set():
            wait = max(restart_at - time.monotonic(), 0.0)
            return f"worker: exited with code {code}; restarting in {wait:.0f} s (restart {self.restarts + 1})"
        return f"worker: exited with code {code}"

    def stop(self, timeout: float = STOP_GRACE_S) -> None:
        """Stop supervising and stop the worker: SIGTERM, up to `timeout` s for it to fail its round, then SIGKILL."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout + 15.0)
        else:
            self._terminate(timeout)

    # -- the supervising thread ---------------------------------------------------------------------------------
    def _spawn(self, *, restart: bool = False) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            proc = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_worker_child_setup if sys.platform.startswith("linux") else None,
            )
        with self._lock:  # one step: `describe` never sees the new count beside the dead process
            self.proc, self._restart_at = proc, None
            self.restarts += int(restart)
        self._started_at = time.monotonic()
        log.info("started worker pid %s: %s (log %s)", proc.pid, " ".join(self.argv), self.log_path)

    def _supervise(self) -> None:
        try:
            while not self._stop.is_set():
                proc = self.proc  # set by start() before this thread runs
                if self._stop.wait(0.2) or proc is None or proc.poll() is None:
                    continue
                self._exited(proc)
                if self._stop.wait(max((self._restart_at or 0.0) - time.monotonic(), 0.0)):
                    break
                self._spawn(restart=True)
        finally:
            self._terminate(STOP_GRACE_S)

    def _exited(self, proc: subprocess.Popen) -> None:
        """The worker died on its own: tell `on_exit`, then schedule the restart."""
        code = proc.returncode
        self.last_code = code
        log.warning("worker pid %s exited with code %s; restarting it", proc.pid, code)
        if self.on_exit is not None:
            try:
                self.on_exit(proc.pid, code)
            except Exception as exc:  # the restart matters more; the lease reaps the rounds later anyway
                log.warning("after worker pid %s exited: %s", proc.pid, exc)
        ran = time.monotonic() - self._started_at
        self._streak = 0 if ran >= STABLE_S else self._streak
        delay = restart_delay(self._streak, self.backoff_s, self.max_backoff_s)
        self._streak += 1
        with self._lock:
            self._restart_at = time.monotonic() + delay

    def _terminate(self, timeout: float) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.info("worker pid %s stopped (code %s)", proc.pid, proc.returncode)
