"""`evorag users add NAME [--role R] [--file users.toml | --store] [--password-stdin] [--replace] | list [...]`: the
studio's users, in a users file (`evorag studio --auth FILE`) or in the store (`evorag studio --auth store`; the
store is --db, else $EVORAG_DB_URL, else <home>/evorag.db, as for the studio).

The password is asked twice on the terminal (getpass), or read as one line from stdin with `--password-stdin`
(`printf '%s\\n' "$PW" | evorag users add alice --password-stdin`); only its argon2id hash is written. Roles:
annotator | reviewer | admin (default admin), and viewer (store users only): what the studio shows each user and
lets them do (app/common/roles.py).
"""
from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from evorag_core.auth.users_file import DEFAULT_ROLE, FILE_ROLES, add_user, check_name, load_users
from evorag_core.errors import ConfigError
from evorag_core.cli.common import print_json

__all__ = ["add_parser", "main", "MIN_PASSWORD_LENGTH", "ROLES"]

MIN_PASSWORD_LENGTH = 8
ROLES = (*FILE_ROLES, "viewer")  # the store's USER_ROLES; a users file takes FILE_ROLES
_DEFAULT_FILE = Path("users.toml")


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="add studio users (argon2-hashed) to a users file or the store (`--auth FILE|store`)")
    actions = p.add_subparsers(dest="users_action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add a user (or, with --replace, set a new password or role)")
    add.add_argument("name", help="user name: letters, digits, '.', '_', '@', '-'")
    add.add_argument("--role", choices=ROLES, default=DEFAULT_ROLE,
                     help=f"default {DEFAULT_ROLE}; viewer: store users only")
    add.add_argument("--password-stdin", action="store_true", help="read the password as one line from stdin")
    add.add_argument("--replace", action="store_true", help="overwrite an existing user of that name")
    listing = actions.add_parser("list", help="names and roles in the users file or the store")
    for q in (add, listing):
        where = q.add_mutually_exclusive_group()
        where.add_argument("--file", type=Path, default=None, help="users file (default ./users.toml)")
        where.add_argument("--store", action="store_true",
                           help="the store's users (for `evorag studio --auth store`) instead of a users file")
        q.add_argument("--db", default=None, metavar="URL",
                       help="with --store: database URL (default $EVORAG_DB_URL or <home>/evorag.db)")
        q.add_argument("--home", type=Path, default=None,
                       help="with --store: home folder (default $EVORAG_HOME or ./.evorag)")
        q.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def main(args: argparse.Namespace) -> int:
    if not args.store and (args.db or args.home):
        raise ConfigError("--db and --home name the store: pass --store with them")
    if args.users_action == "list":
        users = _list_store(args) if args.store else [(u.name, u.role) for u in load_users(_file(args)).values()]
        if args.json:
            print_json([{"name": name, "role": role} for name, role in users])
        else:
            for name, role in users:
                print(f"{name:<24} {role}")
        return 0
    check_name(args.name)
    if not args.store and args.role not in FILE_ROLES:
        raise ConfigError(f"role {args.role} is for store users only (--store); a users file takes "
                          f"{', '.join(FILE_ROLES)}")
    password = _read_password(args.name, args.password_stdin)
    out = _add_store(args, password) if args.store else _add_file(args, password)
    if args.json:
        print_json(out)
    return 0


def _file(args: argparse.Namespace) -> Path:
    return args.file or _DEFAULT_FILE


def _add_file(args: argparse.Namespace, password: str) -> dict[str, Any]:
    path = _file(args)
    user = add_user(path, args.name, password, args.role, replace=args.replace)
    if not args.json:
        print(f"{user.name} ({user.role}) written to {path}; serve with: evorag studio --auth {path}")
    return {"name": user.name, "role": user.role, "file": str(path.resolve())}


def _open_store(args: argparse.Namespace):
    from evorag_core.cli.common import home_from_args
    from evorag_core.cli.worker import db_url_from_args
    from evorag_core.store import open_store

    return open_store(db_url_from_args(args, home_from_args(args)))


def _add_store(args: argparse.Namespace, password: str) -> dict[str, Any]:
    with _open_store(args) as store:
        user = store.add_user(args.name, password, args.role, replace=args.replace)
        url = store.url
    if not args.json:
        print(f"{user.name} ({user.role}) stored in {url}; serve with: evorag studio --auth store")
    return {"name": user.name, "role": user.role, "db": url}


def _list_store(args: argparse.Namespace) -> list[tuple[str, str]]:
    with _open_store(args) as store:
        return [(u.name, u.role) for u in store.list_users()]


def _read_password(name: str, from_stdin: bool) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        if not sys.stdin.isatty():
            raise ConfigError("no terminal to ask for the password on: pass --password-stdin and pipe it in")
        password = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != password:
            raise ConfigError("the two passwords differ; nothing written")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise ConfigError(f"the password needs at least {MIN_PASSWORD_LENGTH} characters; nothing written")
    return password
