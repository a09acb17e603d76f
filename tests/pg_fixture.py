"""A throwaway PostgreSQL cluster for the store tests; its tests are skipped (with the reason) when none starts.

`pg_server` (session): initdb + pg_ctl on a free 127.0.0.1 port in a temporary folder (as the `postgres` user
when running as root: the server refuses to run as root), trust auth, fsync off; stopped and removed at the end.
`pg_url` (per test): a fresh database on that server, dropped afterwards.
Set EVORAG_REQUIRE_PG=1 to turn "cannot start PostgreSQL" into a failure instead of a skip (CI).
"""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from evorag_core.procs import free_port

__all__ = ["pg_server", "pg_url"]

_USER = "evorag"


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("EVORAG_REQUIRE_PG") == "1":
        pytest.fail(f"PostgreSQL required (EVORAG_REQUIRE_PG=1) but {reason}")
    pytest.skip(reason)


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True)
    return next((c for c in candidates if (c / "initdb").exists() and (c / "pg_ctl").exists()), None)


def _runner(base: Path) -> list[str]:
    """Prefix that runs a server command as a non-root user when we are root."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        _unavailable("running as root and there is no 'postgres' user to run the server as")
    runuser = shutil.which("runuser")
    if runuser is None:
        _unavailable("running as root and `runuser` is missing")
    shutil.chown(base, user="postgres")
    return [runuser, "-u", "postgres", "--"]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URL of the server's `postgres` database (superuser `evorag`, no password)."""
    try:
        import psycopg  # noqa: F401  (the driver the store uses for postgresql:// URLs)
    except ImportError:
        _unavailable("psycopg is not installed (pip install 'psycopg[binary]')")
    bin_dir = _bin_dir()
    if bin_dir is None:
        _unavailable("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin")
    base = Path(tempfile.mkdtemp(prefix="evorag-pg-"))
    data, log = base / "data", base / "server.log"
    try:
        prefix = _runner(base)
        init = _run([*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", _USER, "--auth=trust",
                     "-E", "UTF8", "--no-sync"])
        if init.returncode != 0:
            _unavailable(f"initdb failed: {init.stderr.strip()[-500:]}")
        port = free_port()
        options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        start = _run([*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
                      "-w", "-t", "60", "start"])
        if start.returncode != 0:
            tail = log.read_text()[-500:] if log.exists() else start.stderr
            _unavailable(f"pg_ctl start failed: {tail.strip()}")
        try:
            yield f"postgresql+psycopg://{_USER}@127.0.0.1:{port}/postgres"
        finally:
            _run([*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database for one test."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = pg_server.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
