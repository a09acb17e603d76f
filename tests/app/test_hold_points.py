"""`evorag_core.test_hooks.hold`: a named point holds its first arrival until the operation's stop event is set,
once per process; a point not named, or no environment variable at all, passes at once."""
from __future__ import annotations

import threading

from evorag_core.test_hooks import ENV, hold, hold_until


def test_unset_or_unnamed_points_pass_at_once(monkeypatch):
    stop = threading.Event()  # never set: a hold here would wait for the whole limit
    monkeypatch.delenv(ENV, raising=False)
    assert hold("dynakrag:finish", stop, limit_s=60) is False
    monkeypatch.setenv(ENV, "arena:base")
    assert hold("dynakrag:finish", stop, limit_s=60) is False
    assert hold("arena", stop, limit_s=60) is False  # names match whole


def test_a_named_point_holds_until_stop_and_only_once(hold_at):
    """Another thread passes the point and stays held; setting the stop event releases it; a second arrival passes."""
    hold_at("arena:adapter", "dynakrag:finish")
    stop = threading.Event()
    reached, left = threading.Event(), threading.Event()

    def operation():
        reached.set()
        if hold("dynakrag:finish", stop, limit_s=600):
            left.set()

    worker = threading.Thread(target=operation)
    worker.start()
    assert reached.wait(60)
    assert not left.wait(0.2)  # held: stop is not set (a loaded machine can only make this wait pass longer)
    stop.set()
    worker.join(60)
    assert left.is_set()
    assert hold("dynakrag:finish", threading.Event(), limit_s=60) is False  # spent


def test_hold_until_asks_its_release_until_it_says_yes_once(hold_at):
    """The worker's form (the release is decided in another process, so it is polled): held until `released()` is
    true, then spent."""
    hold_at("round:step")
    asked: list[int] = []

    def released() -> bool:
        asked.append(1)
        return len(asked) >= 3

    assert hold_until("round:step", released, poll_s=0.01, limit_s=600) is True and len(asked) == 3
    assert hold_until("round:step", lambda: False, poll_s=0.01, limit_s=600) is False  # spent
