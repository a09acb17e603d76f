"""`evorag users add --store` (#44 item 8): the store's users, for `evorag studio --auth store`, added and listed
from the command line (argon2id, like the users file's); and no Alembic INFO lines on a command's stderr."""
from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys

from sqlalchemy import text

from evorag_core.cli.main import main as cli_main
from evorag_core.store import open_store

from tests.paths import REPO


def test_users_add_store_stores_an_argon2id_user_that_store_auth_logs_in(tmp_path, monkeypatch, capsys):
    """carol (reviewer) added to the store from stdin -> listed, hashed with argon2id, and the studio's
    `--auth store` check takes her password; a second add is refused without --replace (exit 2) and sets a new
    password with it; the role viewer is refused for a users file; --db without --store is refused."""
    from app.common.services import Services
    from app.shell.main import make_auth
    from evorag_core.config import load_config

    db = f"sqlite:///{tmp_path / 'studio.db'}"
    monkeypatch.setattr("sys.stdin", io.StringIO("carol's password\n"))
    assert cli_main(["users", "add", "carol", "--store", "--db", db, "--role", "reviewer", "--password-stdin"]) == 0
    assert "carol (reviewer) stored in sqlite:///" in capsys.readouterr().out
    assert cli_main(["users", "list", "--store", "--db", db, "--json"]) == 0
    assert capsys.readouterr().out.strip().endswith('[{"name": "carol", "role": "reviewer"}]')
    with open_store(db) as store:
        with store.engine.connect() as conn:
            stored = conn.execute(text("SELECT password_hash FROM users WHERE name = 'carol'")).scalar_one()
    assert stored.startswith("$argon2id$")

    monkeypatch.setattr("sys.stdin", io.StringIO("another password\n"))
    assert cli_main(["users", "add", "carol", "--store", "--db", db, "--password-stdin"]) == 2
    assert "a user named 'carol' already exists" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO("carol's new password\n"))
    assert cli_main(["users", "add", "carol", "--store", "--db", db, "--password-stdin", "--replace"]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("a viewer password\n"))
    assert cli_main(["users", "add", "vic", "--role", "viewer", "--file", str(tmp_path / "u.toml"),
                     "--password-stdin"]) == 2
    assert "store users only" in capsys.readouterr().err
    assert cli_main(["users", "list", "--db", db]) == 2
    assert "pass --store" in capsys.readouterr().err

    svc = Services(load_config(), tmp_path, data_path=tmp_path / "unused.jsonl", db_url=db)
    try:
        check = make_auth(svc, "store")
        assert asyncio.run(check("carol", "carol's new password"))
        assert not asyncio.run(check("carol", "carol's password"))
        assert [(u.name, u.role) for u in svc.store().list_users()] == [("carol", "admin")]  # --replace: new role too
    finally:
        svc.close()


def test_a_command_prints_no_alembic_info_lines(tmp_path):
    """A fresh store migrates from nothing (7 revisions: ~20 Alembic INFO lines before); stderr stays empty of
    them, and `-v` still shows them."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    db = f"sqlite:///{tmp_path / 'fresh.db'}"
    cmd = [sys.executable, "-m", "evorag_core.cli.main", "users", "add", "dan", "--store", "--db", db,
           "--password-stdin"]
    done = subprocess.run(cmd, input="dan's password\n", capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "alembic" not in done.stderr and " INFO " not in done.stderr, done.stderr
    assert "dan (admin) stored in" in done.stdout
    verbose = subprocess.run([sys.executable, "-m", "evorag_core.cli.main", "-v", "users", "list", "--store",
                              "--db", f"sqlite:///{tmp_path / 'other.db'}"], capture_output=True, text=True, env=env,
                             timeout=120, cwd=tmp_path)
    assert verbose.returncode == 0 and "Running upgrade" in verbose.stderr
