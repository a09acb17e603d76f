"""Fixtures the studio's browser tests share: one headless Chromium per test module."""
from __future__ import annotations

import pytest

from tests.studio_process import chromium


@pytest.fixture(scope="module")
def browser():
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
