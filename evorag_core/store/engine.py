"""Engines for any SQLAlchemy URL, with the SQLite settings a multi-writer embedded database needs.

SQLite: WAL journal, `busy_timeout` (30 s by default), foreign keys on, and SQLAlchemy in charge of BEGIN
(the sqlite3 driver's legacy transaction control is switched off), so DDL is transactional and a writing
transaction can start with `BEGIN IMMEDIATE` - it takes the write lock up front and waits for it under the
busy timeout instead of failing half-way through a read-modify-write. `writer(engine)` gives the engine
whose transactions do that; plain transactions use `BEGIN DEFERRED`. On PostgreSQL both are ordinary
READ COMMITTED transactions; a bare `postgresql://` URL gets the psycopg (3) driver.
"""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url

from evorag_core.errors import StoreError

__all__ = ["DEFAULT_BUSY_TIMEOUT_S", "make_engine", "writer", "safe_url"]

DEFAULT_BUSY_TIMEOUT_S = 30.0
_WRITE_OPTION = "evorag_write"


def make_engine(url: str | URL, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> Engine:
    """An engine for `url`; a SQLite file's parent folder is created if missing."""
    url = make_url(url)
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() != "sqlite":
        try:
            return create_engine(url, pool_pre_ping=True)
        except ImportError as exc:
            raise StoreError(
                f"no database driver for {url.drivername} ({exc}); for PostgreSQL: pip install 'psycopg[binary]'"
            ) from exc
    if url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": busy_timeout_s})
    busy_ms = int(busy_timeout_s * 1000)

    def on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (see on_begin)
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            cursor.execute("PRAGMA foreign_keys = ON")
            _journal_wal(cursor, busy_timeout_s)
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", _on_begin)
    return engine


def _journal_wal(cursor: sqlite3.Cursor, timeout_s: float) -> None:
    """`PRAGMA journal_mode = WAL`, retried until `timeout_s`. Switching a fresh database to WAL needs it to itself,
    and SQLite answers "database is locked" at once, without the busy handler, while another connection holds a lock
    there: two processes opening one fresh database together (the first migrating it) failed so in 6 rounds of 20."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)  # another connection holds the file: wait for its transaction to end
        delay = min(2 * delay, 0.25)


def _on_begin(conn: Connection) -> None:
    mode = "IMMEDIATE" if conn.get_execution_options().get(_WRITE_OPTION) else "DEFERRED"
    conn.exec_driver_sql(f"BEGIN {mode}")


def writer(engine: Engine) -> Engine:
    """The same engine (same pool) whose transactions take SQLite's write lock at BEGIN."""
    return engine.execution_options(**{_WRITE_OPTION: True})


def safe_url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)
