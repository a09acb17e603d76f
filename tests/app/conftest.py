"""Fixtures the studio's browser tests share: one headless Chromium per test module (each test opens its own pages
or contexts). Not one per test process: while Playwright's sync API is started, its event loop counts as running in
the thread, and a later module's `asyncio.run` fails."""
from __future__ import annotations

import pytest

from tests.studio_process import CHROMIUM, chromium


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` to run the browser tests")
    with chromium() as b:
        yield b


@pytest.fixture()
def hold_at(monkeypatch):
    """`hold_at("dynakrag:finish", ...)`: arms the studio's test hold points in this process
    (`evorag_core.test_hooks`), each to hold once, for this test only."""
    from evorag_core import test_hooks

    def arm(*points: str) -> None:
        monkeypatch.setenv(test_hooks.ENV, ",".join(points))
        monkeypatch.setattr(test_hooks, "_held", set())

    return arm
