"""Fixtures the studio's browser tests share: one headless Chromium per test module."""
from __future__ import annotations

import pytest

from tests.studio_process import chromium


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b
