"""Fixtures the store tests share: one throwaway PostgreSQL server per session (skipped where none can start), and a
store per test on SQLite and on PostgreSQL."""
from __future__ import annotations

from pathlib import Path

import pytest

from evorag_core.store import open_store
from tests.pg_fixture import pg_server, pg_url  # noqa: F401  (fixtures, registered once for tests/store/)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'evorag.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(url: str):
    with open_store(url) as s:
        yield s
