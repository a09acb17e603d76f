"""A limit on failed logins, per user name and per client address, over a sliding window.

Every attempt counts as a failure from the moment it is let through (`attempt`), so parallel guesses cannot slip in
before the first ones are judged; `succeeded` then takes it back and forgets the user's earlier failures. Once a name
(or an address) has `per_user` (`per_address`) failures within `window_s` seconds, further attempts are refused
without checking the password until the oldest of those failures is `window_s` old: `attempt` returns the seconds to
wait. Names count whether or not they exist. The clock is injectable (a monotonic one by default).
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

__all__ = ["LoginLimits", "LoginLimiter"]


@dataclass(frozen=True)
class LoginLimits:
    per_user: int = 5  # failed logins for one name within the window
    per_address: int = 20  # failed logins from one client address within the window
    window_s: float = 300.0

    def __post_init__(self) -> None:
        if self.per_user < 1 or self.per_address < 1 or not self.window_s > 0:
            raise ValueError("login limits must be at least 1 and the window positive")


class LoginLimiter:
    def __init__(self, limits: LoginLimits = LoginLimits(), clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.clock = clock
        self._failures: dict[tuple[str, str], deque[float]] = {}  # ("user"|"addr", key) -> failure times, oldest first
        self._lock = threading.Lock()
        self._swept = clock()

    def attempt(self, user: str, address: str) -> float:
        """0.0 if this login may be checked now (it is counted as a failure until `succeeded`), else the seconds
        to wait (rounded up; nothing is recorded)."""
        with self._lock:
            now = self.clock()
            self._sweep(now)
            keys = (("user", user), ("addr", address))
            limits = (self.limits.per_user, self.limits.per_address)
            wait = max(self._wait(key, limit, now) for key, limit in zip(keys, limits))
            if wait > 0:
                return float(math.ceil(wait))
            for key in keys:
                self._failures.setdefault(key, deque()).append(now)
            return 0.0

    def succeeded(self, user: str, address: str) -> None:
        """The attempt let through by `attempt` was a correct login: forget the user's failures and take this
        attempt back from the address's count."""
        with self._lock:
            self._failures.pop(("user", user), None)
            times = self._failures.get(("addr", address))
            if times:
                times.pop()

    def failures(self, user: str | None = None, address: str | None = None) -> int:
        """Failures within the window for `user` or `address` (for tests and logs)."""
        key = ("user", user) if user is not None else ("addr", address or "")
        with self._lock:
            now = self.clock()
            return sum(1 for t in self._failures.get(key, ()) if now - t < self.limits.window_s)

    def _wait(self, key: tuple[str, str], limit: int, now: float) -> float:
        times = self._failures.get(key)
        if not times:
            return 0.0
        while times and now - times[0] >= self.limits.window_s:
            times.popleft()
        if len(times) < limit:
            return 0.0
        return times[-limit] + self.limits.window_s - now  # when the failures in the window drop below the limit

    def _sweep(self, now: float) -> None:
        """Drop keys whose failures have all aged out (at most once per window): memory stays bounded by the
        names and addresses seen within about two windows."""
        if now - self._swept < self.limits.window_s:
            return
        self._swept = now
        for key in [k for k, times in self._failures.items() if not times or now - times[-1] >= self.limits.window_s]:
            del self._failures[key]
