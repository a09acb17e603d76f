"""Child processes that do not outlive their parent, their share of the cores, and a free local port for one to
listen on.

A process pool's workers (the rollout executors, the evaluation pool) and the studio's training worker are separate
processes; if the process that started them is killed without cleaning up (SIGKILL, or SIGTERM to a command that
has no handler), they would go on loading models and burning the cores of a machine nobody is watching. On Linux
`die_with_parent()` asks the kernel to send the calling process SIGTERM when its parent dies (PR_SET_PDEATHSIG); a
pool process also watches its driver's sentinel pipe (every platform).

`pool_context()` is how those pools start their processes: from a fork server that imported the model stack once
(torch, transformers, peft, sentence-transformers, faiss: ~8-10 s of CPU per process), so a pool process starts in
a fraction of a second instead of importing it again; a second pool in the same process reuses the server. The
server stays until the process that started it exits (holding those modules: 525 MB resident, 147 MB its own, the
rest shared copy-on-write with its children). Where there is no fork server (Windows) the pools spawn.

`core_share(workers)`: the torch threads each of a pool's processes gets, its share of the cores.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import socket
import sys
import threading
from multiprocessing.context import BaseContext

__all__ = ["POOL_PRELOAD", "core_share", "die_with_parent", "free_port", "pool_context", "pool_child_init"]

# What every pool process imports before it loads a model; the fork server imports them once.
# Third-party only: the server's sys.path is not the driver's (a pool process gets the driver's before it unpickles).
POOL_PRELOAD: tuple[str, ...] = ("torch", "transformers.modeling_utils", "peft", "sentence_transformers", "faiss")

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """Have this process receive SIGTERM when its parent exits. `parent_pid`: the pid the parent had when it started
    us; if the parent is already gone (we were re-parented), exit now. A pool process (`parent_pid` is its
    `multiprocessing.parent_process()`) also watches the driver's sentinel, a pipe the driver holds: its kernel parent
    may be the fork server, which outlives a killed driver as long as its children live."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except OSError:
            pass
    if parent_pid is None:
        return
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid == parent_pid:
        threading.Thread(target=_terminate_after, args=(parent,), name="die-with-parent", daemon=True).start()
    elif os.getppid() != parent_pid:  # died before the prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _terminate_after(parent: multiprocessing.process.BaseProcess) -> None:
    parent.join()  # returns when the driver's end of the sentinel pipe closes: it exited or was killed
    os.kill(os.getpid(), signal.SIGTERM)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick), for a server this process starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def pool_context() -> BaseContext:
    """The start method of the project's process pools: the fork server with `POOL_PRELOAD` imported (never a
    plain fork: torch's and faiss's threads may have started in the driver), or spawn where there is none. The fork
    server starts with the driver's environment of that moment: pass `dict(os.environ)` to `pool_child_init`."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(POOL_PRELOAD))  # read when the server starts (first pool of this process)
    return ctx


def pool_child_init(parent_pid: int, environ: dict[str, str]) -> None:
    """First thing in a pool process: die with the driver (`die_with_parent`) and take the driver's environment as
    it is now, as a spawned process would (a fork server started earlier holds an older copy)."""
    die_with_parent(parent_pid)
    if environ != os.environ:
        os.environ.clear()
        os.environ.update(environ)


def core_share(workers: int) -> int:
    """Torch threads for each of `workers` processes sharing this machine's cores: cores // workers, at least 1.
    Torch's default (every core) in each of them oversubscribes the cores, and OpenMP's threads then spin-wait for
    descheduled team members: on 2 cores, two 2-thread evaluation workers took 14 s a question against 4.2 s, and
    `evorag rollout --workers 2` 425 s against 104 s (the evaluation pool and the rollout executors hold to it)."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))
