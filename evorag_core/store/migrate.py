"""Alembic, driven from code: the schema is brought to the newest revision when a store opens.

The migration scripts live in `evorag_core/store/migrations/` (hand-written, shipped as package data). The upgrade
runs in one transaction that first serialises concurrent openers (SQLite: `BEGIN IMMEDIATE`; PostgreSQL:
a transaction-level advisory lock), so several processes may open a fresh database at once. A database
whose revision this code does not know (written by a newer version) is refused with `StoreError`.
"""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from evorag_core.errors import StoreError
from evorag_core.store.engine import safe_url, writer

__all__ = ["MIGRATIONS_DIR", "alembic_config", "head_revisions", "current_revisions", "upgrade"]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_PG_LOCK_KEY = 0x65766F72  # "evor": any constant shared by every evorag process


def alembic_config(script_location: Path | str = MIGRATIONS_DIR, connection: Connection | None = None) -> Config:
    """An in-memory alembic Config (no alembic.ini); env.py migrates `connection`."""
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location))
    cfg.set_main_option("path_separator", "os")
    cfg.attributes["connection"] = connection
    return cfg


def head_revisions(script_location: Path | str = MIGRATIONS_DIR) -> tuple[str, ...]:
    return tuple(ScriptDirectory.from_config(alembic_config(script_location)).get_heads())


def current_revisions(conn: Connection) -> tuple[str, ...]:
    return tuple(MigrationContext.configure(conn).get_current_heads())


def upgrade(engine: Engine, *, script_location: Path | str = MIGRATIONS_DIR, revision: str = "head") -> tuple[str, ...]:
    """Migrate the database to `revision`; returns the revisions it is at afterwards."""
    try:
        with writer(engine).begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
            cfg = alembic_config(script_location, conn)
            script = ScriptDirectory.from_config(cfg)
            _refuse_unknown(engine, script, current_revisions(conn))
            command.upgrade(cfg, revision)
            return current_revisions(conn)
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open or migrate the database {safe_url(engine)}: {exc}") from exc


def _refuse_unknown(engine: Engine, script: ScriptDirectory, current: tuple[str, ...]) -> None:
    known = {s.revision for s in script.walk_revisions()}
    unknown = [rev for rev in current if rev not in known]
    if unknown:
        raise StoreError(
            f"the database {safe_url(engine)} is at schema revision {', '.join(unknown)}, which this version of "
            f"evorag does not know (its newest is {', '.join(script.get_heads())}); it was probably written by a "
            "newer evorag - upgrade evorag or use another database"
        )
