"""Child processes that do not outlive their parent, and a free local port for one to listen on.

A process pool's workers (the rollout executors, the evaluation pool) and the studio's training worker are separate
processes; if the process that started them is killed without cleaning up (SIGKILL, or SIGTERM to a command that
has no handler), they would go on loading models and burning the cores of a machine nobody is watching. On Linux
`die_with_parent()` asks the kernel to send the calling process SIGTERM when its parent dies (PR_SET_PDEATHSIG);
elsewhere it does nothing.
"""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys

__all__ = ["die_with_parent", "free_port"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """Have this process receive SIGTERM when its parent exits (Linux; a no-op elsewhere). `parent_pid`: the pid the
    parent had when it started us; if the parent is already gone (we were re-parented), exit now."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        return
    if parent_pid is not None and os.getppid() != parent_pid:  # died before the prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick), for a server this process starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
