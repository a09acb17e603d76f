"""A limit on failed logins over a sliding window: per (name, client address), per address, and per name.

- (name, address): `per_user` failures for one name from one address refuse that name from that address. A stranger
  guessing `boss`'s password so locks out only their own address, not the real boss logging in from elsewhere.
- address: `per_address` failures from one address (any names) refuse every login from it.
- name: `per_name` failures for one name from all addresses together (a guesser with many addresses) refuse the name
  from every address except the known-good ones: those it logged in from successfully within `known_s` seconds. So the
  right password from a known-good address still passes while the name is under attack.

Every attempt counts as a failure from the moment it is let through (`attempt`), so parallel guesses cannot slip in
before the first ones are judged; `succeeded` then takes it back, forgets the (name, address) failures and marks the
address known-good for the name. Once a limit is reached, further attempts are refused without checking the password
until the oldest of those failures is `window_s` old: `attempt` returns the seconds to wait, `admit` a `Refusal`
that also says which limit refused (for the login page's message). Names count whether or not they exist. The
clock is injectable (a monotonic one by default).
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

__all__ = ["LoginLimits", "LoginLimiter", "Refusal"]

Key = tuple[str, ...]  # ("pair", name, address) | ("addr", address) | ("name", name)
_BREADTH = {"pair": 0, "name": 1, "addr": 2}


@dataclass(frozen=True)
class LoginLimits:
    per_user: int = 5  # failed logins for one name from one address within the window
    per_address: int = 20  # failed logins from one client address (any names) within the window
    per_name: int = 50  # failed logins for one name from all addresses within the window (known-good ones pass)
    window_s: float = 300.0
    known_s: float = 30 * 86400.0  # an address a name logged in from stays known-good this long

    def __post_init__(self) -> None:
        if min(self.per_user, self.per_address, self.per_name) < 1 or not (self.window_s > 0 and self.known_s > 0):
            raise ValueError("login limits must be at least 1 and the window and known_s positive")


@dataclass(frozen=True)
class Refusal:
    wait_s: float  # seconds until a login is checked again (rounded up)
    scope: str  # the limit with the longest wait: "pair" (this name from this address), "addr" (this address, any
    #             name) or "name" (this name, from the addresses it has not logged in from)


class LoginLimiter:
    def __init__(self, limits: LoginLimits = LoginLimits(), clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.clock = clock
        self._failures: dict[Key, deque[float]] = {}  # key -> failure times, oldest first
        self._known: dict[tuple[str, str], float] = {}  # (name, address) -> time of its last successful login
        self._lock = threading.Lock()
        self._swept = clock()

    def attempt(self, user: str, address: str) -> float:
        """0.0 if this login may be checked now (it is counted as a failure until `succeeded`), else the seconds
        to wait (rounded up; nothing is recorded)."""
        refusal = self.admit(user, address)
        return 0.0 if refusal is None else refusal.wait_s

    def admit(self, user: str, address: str) -> Refusal | None:
        """None if this login may be checked now (it is counted as a failure until `succeeded`), else the Refusal:
        the seconds to wait and the limit that refused it (nothing is recorded)."""
        with self._lock:
            now = self.clock()
            self._sweep(now)
            limits = {("pair", user, address): self.limits.per_user, ("addr", address): self.limits.per_address,
                      ("name", user): self.limits.per_name}
            waits = [(self._wait(key, limit, now), key[0]) for key, limit in limits.items()
                     if key[0] != "name" or not self._is_known(user, address, now)]
            wait, scope = max(waits, key=lambda w: (w[0], _BREADTH[w[1]]))  # a tie: the broader limit
            if wait > 0:
                return Refusal(float(math.ceil(wait)), scope)
            for key in limits:
                self._failures.setdefault(key, deque()).append(now)
            return None

    def succeeded(self, user: str, address: str) -> None:
        """The attempt let through by `attempt` was a correct login: forget the (name, address) failures, take this
        attempt back from the address's and the name's counts, and remember the address as known-good for the name.
        """
        with self._lock:
            self._failures.pop(("pair", user, address), None)
            for key in (("addr", address), ("name", user)):
                times = self._failures.get(key)
                if times:
                    times.pop()
            self._known[(user, address)] = self.clock()

    def failures(self, user: str | None = None, address: str | None = None) -> int:
        """Failures within the window for (`user`, `address`), or `user` from any address, or `address` for any name
        (for tests and logs)."""
        if user is not None and address is not None:
            key: Key = ("pair", user, address)
        else:
            key = ("name", user) if user is not None else ("addr", address or "")
        with self._lock:
            now = self.clock()
            return sum(1 for t in self._failures.get(key, ()) if now - t < self.limits.window_s)

    def _is_known(self, user: str, address: str, now: float) -> bool:
        last = self._known.get((user, address))
        return last is not None and now - last < self.limits.known_s

    def _wait(self, key: Key, limit: int, now: float) -> float:
        times = self._failures.get(key)
        if not times:
            return 0.0
        while times and now - times[0] >= self.limits.window_s:
            times.popleft()
        if len(times) < limit:
            return 0.0
        return times[-limit] + self.limits.window_s - now  # when the failures in the window drop below the limit

    def _sweep(self, now: float) -> None:
        """Drop keys whose failures have all aged out, and known-good addresses older than `known_s` (at most once
        per window): memory stays bounded by the names and addresses seen within about two windows, plus the
        successful logins of `known_s`."""
        if now - self._swept < self.limits.window_s:
            return
        self._swept = now
        for key in [k for k, times in self._failures.items() if not times or now - times[-1] >= self.limits.window_s]:
            del self._failures[key]
        for pair in [p for p, last in self._known.items() if now - last >= self.limits.known_s]:
            del self._known[pair]
