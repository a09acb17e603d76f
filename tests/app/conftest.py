"""Fixtures the studio's browser tests share: one headless Chromium per test process (each test opens its own
pages or contexts; a launch with Playwright's driver costs ~1.5 s of CPU, once per module before)."""
from __future__ import annotations

import pytest

from tests.studio_process import CHROMIUM, chromium


_STARTED: list = []  # the session's browser, once a test asked for it


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` to run the browser tests")
    with chromium() as b:
        _STARTED.append(b)
        yield b


@pytest.fixture(scope="module", autouse=True)
def _pages_closed_with_their_module():
    """Whatever a module's tests left open (a failed test's page, a context) closes with the module, as it did when
    each module had its own browser: no page of a stopped studio goes on polling beside the next module's tests."""
    yield
    for b in _STARTED:
        for context in b.contexts:
            context.close()


@pytest.fixture()
def hold_at(monkeypatch):
    """`hold_at("dynakrag:finish", ...)`: arms the studio's test hold points in this process
    (`evorag_core.test_hooks`), each to hold once, for this test only."""
    from evorag_core import test_hooks

    def arm(*points: str) -> None:
        monkeypatch.setenv(test_hooks.ENV, ",".join(points))
        monkeypatch.setattr(test_hooks, "_held", set())

    return arm
