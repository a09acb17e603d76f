"""Shared fixtures: paths to the benchmark samples, a per-session home folder."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO.parent / "shared" / "benchmarks"
DEMO = REPO / "data" / "demo" / "demo.jsonl"


@pytest.fixture(scope="session")
def benchmarks() -> Path:
    if not BENCHMARKS.is_dir():
        pytest.skip(f"benchmark samples not found at {BENCHMARKS}")
    return BENCHMARKS


@pytest.fixture(scope="session")
def demo_path() -> Path:
    return DEMO


@pytest.fixture(scope="session")
def session_home(tmp_path_factory) -> Path:
    """One home folder per test session: indexes and the dequantized model are built once and reused."""
    return tmp_path_factory.mktemp("evorag_home")
