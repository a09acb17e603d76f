"""Test hook: a deterministic window for the tests that stop a running operation. Off unless the environment names it.

A test that presses Stop while an operation runs cannot count on the operation lasting long enough: a loaded machine
stretches the page's round trips as much as the operation, and the operation may end before the Stop arrives (the
DynaKrag browser test failed so). So the studio's stoppable operations pass a named *hold point* as they start:

    EVORAG_TEST_HOLD="dynakrag:finish,arena:base" evorag studio ...

Each point named there holds the first operation that reaches it (once per process) until that operation's stop event
is set, i.e. until the page's Stop; the operation then goes on with the event set, as a Stop in its middle finds it
(a generation stops before its next token). A held operation looks running on the page for as long as the test
needs. Points: `dynakrag:<operation>` (the controller's pick, or `finish`: compression and answer),
`arena:base` / `arena:adapter` (a reply, once it holds the model), `r2ag:steer` (the LM steering's decode, once
it holds the model), `pairs:answers` (the Pairs tab's answer pairs, an episode's read, once it holds the model).
Unset, `hold` costs one environment lookup.

The worker has one point, `round:step`: a training round's *first attempt* holds after reporting its first step,
while its heartbeat keeps the lease, until a cancel is requested (`hold_until`, polling the store). A test that kills
or stops a worker mid-round so finds it mid-round on any machine (a fast one trains the tiny model's 48 steps in
half a second); the round's next attempt, in a restarted worker with the same environment, does not hold.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

__all__ = ["ENV", "HOLD_LIMIT_S", "hold", "hold_until"]

ENV = "EVORAG_TEST_HOLD"
HOLD_LIMIT_S = 900.0  # a hold nobody stops ends after this, so a forgotten one cannot hang a studio for good

_held: set[str] = set()  # the points that have held in this process (each holds once)
_held_lock = threading.Lock()


def _take(point: str) -> bool:
    """Mark `point` as held in this process; False when it is not armed (not named, or already held)."""
    named = os.environ.get(ENV)
    if not named or point not in named.split(","):
        return False
    with _held_lock:
        if point in _held:
            return False
        _held.add(point)
    return True


def hold(point: str, stop: threading.Event, limit_s: float = HOLD_LIMIT_S) -> bool:
    """Wait until `stop` is set (at most `limit_s`) when `point` is named in $EVORAG_TEST_HOLD and has not held in
    this process before; True when it held."""
    if not _take(point):
        return False
    stop.wait(limit_s)
    return True


def hold_until(point: str, released: Callable[[], bool], poll_s: float = 0.2, limit_s: float = HOLD_LIMIT_S) -> bool:
    """`hold` for a release another process decides: wait until `released()` is true, asked every `poll_s` (at
    most `limit_s`); True when it held."""
    if not _take(point):
        return False
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not released():
        time.sleep(poll_s)
    return True
