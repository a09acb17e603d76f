"""The studio's users file (`evorag studio --auth users.toml`), written by `evorag users add`: argon2 hashes and roles.

    [users.alice]
    password_hash = "$argon2id$v=19$m=65536,t=3,p=4$..."
    role = "admin"          # annotator | reviewer | admin (the studio's role checks: app/common/roles.py)

Earlier versions kept `name = "plain-text password"` entries under `[users]`: `load_users` refuses a file with any,
naming them and the command that replaces each (`evorag users add NAME --file FILE --replace`, which keeps the other
entries as they are). The file is written atomically with mode 0600.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evorag_core.errors import ConfigError
from evorag_core.auth.passwords import hash_password, is_password_hash

__all__ = ["FILE_ROLES", "DEFAULT_ROLE", "FileUser", "load_users", "add_user", "check_name"]

FILE_ROLES = ("annotator", "reviewer", "admin")
DEFAULT_ROLE = "admin"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_KEYS = {"password_hash", "role"}


@dataclass(frozen=True)
class FileUser:
    name: str
    password_hash: str = field(repr=False)
    role: str = DEFAULT_ROLE


def check_name(name: str) -> str:
    """`name` if it is a valid user name (letters, digits, . _ @ -; up to 64; no spaces: the login form strips)."""
    if not _NAME.fullmatch(name or ""):
        raise ConfigError(f"invalid user name {name!r}: use 1-64 letters, digits, '.', '_', '@' or '-', "
                          "starting with a letter or digit")
    return name


def load_users(path: Path) -> dict[str, FileUser]:
    """The users of the file at `path`, by name; ConfigError (saying what to fix) for anything else."""
    path = Path(path)
    table = _read_table(path)
    if not table:
        raise ConfigError(f"{path}: no users; add one with `evorag users add NAME --file {path}`")
    plain = sorted(name for name, entry in table.items() if isinstance(entry, str))
    if plain:
        raise ConfigError(
            f"{path}: plain-text passwords for {', '.join(plain)}; the users file keeps argon2 hashes now: run "
            f"`evorag users add NAME --file {path} --replace` for each (it asks for the password)")
    return {name: _user(path, name, entry) for name, entry in table.items()}


def add_user(path: Path, name: str, password: str, role: str = DEFAULT_ROLE, *, replace: bool = False) -> FileUser:
    """Hash `password` and write user `name` into the file at `path` (created if missing; other entries kept)."""
    path = Path(path)
    check_name(name)
    if role not in FILE_ROLES:
        raise ConfigError(f"invalid role {role!r}; expected one of {', '.join(FILE_ROLES)}")
    if not password:
        raise ConfigError("the password is empty")
    table = _read_table(path) if path.exists() else {}
    if name in table and not replace:
        raise ConfigError(f"{path}: user {name!r} exists; pass --replace to set a new password or role")
    user = FileUser(name, hash_password(password), role)
    table[name] = {"password_hash": user.password_hash, "role": user.role}
    _write(path, table)
    return user


def _read_table(path: Path) -> dict[str, Any]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"users file not found: {path}; write one with `evorag users add NAME --file {path}`"
                          ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    unknown = set(raw) - {"users"}
    table = raw.get("users", {})
    if unknown or not isinstance(table, dict):
        raise ConfigError(f"{path}: expected only a [users] table, one [users.NAME] entry per user")
    return dict(table)


def _user(path: Path, name: str, entry: Any) -> FileUser:
    where = f"{path}: [users.{name}]"
    if not isinstance(entry, dict) or set(entry) - _KEYS or "password_hash" not in entry:
        raise ConfigError(f"{where}: expected password_hash = \"$argon2id$...\" and role = \"...\" only")
    stored, role = entry["password_hash"], entry.get("role", DEFAULT_ROLE)
    if not isinstance(stored, str) or not is_password_hash(stored):
        raise ConfigError(f"{where}: password_hash is not an argon2 hash; set it with `evorag users add {name} "
                          f"--file {path} --replace`")
    if role not in FILE_ROLES:
        raise ConfigError(f"{where}: role {role!r} is not one of {', '.join(FILE_ROLES)}")
    return FileUser(check_name(name), stored, role)


def _write(path: Path, table: dict[str, Any]) -> None:
    """TOML by hand (strings only; JSON's string escapes are valid TOML basic strings), then an atomic rename."""
    lines = ["# EVO-RAG Studio users: written by `evorag users add`; passwords are argon2 hashes.", ""]
    plain = {k: v for k, v in table.items() if isinstance(v, str)}  # old entries of other users, kept as they were
    if plain:
        lines += ["[users]", *(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in plain.items()), ""]
    for name, entry in table.items():
        if isinstance(entry, dict):
            lines += [f"[users.{json.dumps(name)}]",
                      *(f"{key} = {json.dumps(value)}" for key, value in entry.items()), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
