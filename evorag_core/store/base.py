"""What every part of the Store shares: the engine, short transactions, the clock, row -> JSON helpers."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Self

from sqlalchemy import Connection, Engine

from evorag_core.store.engine import safe_url, writer

__all__ = ["StoreBase", "utcnow", "check_choice"]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def check_choice(what: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}; got {value!r}")


class StoreBase:
    """Holds the engine. Each service method runs in its own short transaction:
    `_read()` for queries, `_write()` for anything that changes rows (SQLite: BEGIN IMMEDIATE)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._writer = writer(engine)

    @property
    def url(self) -> str:
        """The database URL with the password hidden."""
        return safe_url(self.engine)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._writer.begin() as conn:
            yield conn
