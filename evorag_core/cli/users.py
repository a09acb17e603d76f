"""`evorag users add NAME [--role R] [--file users.toml] [--password-stdin] [--replace] | list [--file F]`: the users
file that `evorag studio --auth FILE` logs people in with.

The password is asked twice on the terminal (getpass), or read as one line from stdin with `--password-stdin`
(`printf '%s\\n' "$PW" | evorag users add alice --password-stdin`); only its argon2 hash is written. Roles:
annotator | reviewer | admin (default admin): what the studio shows each user and lets them do (app/roles.py).
"""
from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from evorag_core.auth.users_file import DEFAULT_ROLE, FILE_ROLES, add_user, check_name, load_users
from evorag_core.errors import ConfigError
from evorag_core.cli.common import print_json

__all__ = ["add_parser", "main", "MIN_PASSWORD_LENGTH"]

MIN_PASSWORD_LENGTH = 8


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="add studio users (argon2-hashed) to a users file for `evorag studio --auth FILE`")
    actions = p.add_subparsers(dest="users_action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add a user (or, with --replace, set a new password or role)")
    add.add_argument("name", help="user name: letters, digits, '.', '_', '@', '-'")
    add.add_argument("--role", choices=FILE_ROLES, default=DEFAULT_ROLE, help=f"default {DEFAULT_ROLE}")
    add.add_argument("--password-stdin", action="store_true", help="read the password as one line from stdin")
    add.add_argument("--replace", action="store_true", help="overwrite an existing user of that name")
    listing = actions.add_parser("list", help="names and roles in the users file")
    for q in (add, listing):
        q.add_argument("--file", type=Path, default=Path("users.toml"), help="users file (default ./users.toml)")
        q.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    return p


def main(args: argparse.Namespace) -> int:
    if args.users_action == "list":
        users = load_users(args.file)
        if args.json:
            print_json([{"name": u.name, "role": u.role} for u in users.values()])
        else:
            for u in users.values():
                print(f"{u.name:<24} {u.role}")
        return 0
    check_name(args.name)
    password = _read_password(args.name, args.password_stdin)
    user = add_user(args.file, args.name, password, args.role, replace=args.replace)
    if args.json:
        print_json({"name": user.name, "role": user.role, "file": str(args.file.resolve())})
    else:
        print(f"{user.name} ({user.role}) written to {args.file}; serve with: evorag studio --auth {args.file}")
    return 0


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
