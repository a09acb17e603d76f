"""Studio users (annotators and admins): name, argon2 password hash (evorag_core/auth/passwords.py), role.

Rows written before argon2 hold scrypt hashes: they still verify, and a successful login replaces the hash with an
argon2 one."""
from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from evorag_core.errors import StoreError
from evorag_core.store.base import StoreBase, check_choice, utcnow
from evorag_core.auth.passwords import check_password, check_unknown_user, hash_password, needs_rehash
from evorag_core.store.records import USER_ROLES, User
from evorag_core.store.schema import users

__all__ = ["UserOps"]


class UserOps(StoreBase):
    def add_user(self, name: str, password: str, role: str = "annotator", *, replace: bool = False) -> User:
        """Store user `name` with an argon2 hash of `password`; an existing name is a StoreError unless `replace`
        (then its password and role are set anew)."""
        check_choice("role", role, USER_ROLES)
        if not name or not password:
            raise ValueError("a user needs a non-empty name and password")
        row = {"name": name, "password_hash": hash_password(password), "role": role, "created_at": utcnow()}
        try:
            with self._write() as conn:
                found = conn.execute(select(users.c.id, users.c.created_at).where(users.c.name == name)).first()
                if found is None:
                    user_id = conn.execute(users.insert().values(**row)).inserted_primary_key[0]
                    return User(id=int(user_id), name=name, role=role, created_at=row["created_at"])
                if not replace:
                    raise StoreError(f"a user named {name!r} already exists")
                conn.execute(users.update().where(users.c.id == found.id)
                             .values(password_hash=row["password_hash"], role=role))
                return User(id=found.id, name=name, role=role, created_at=found.created_at)
        except IntegrityError as exc:  # added by another process since the select
            raise StoreError(f"a user named {name!r} already exists") from exc

    def verify_user(self, name: str, password: str) -> User | None:
        """The user if `password` is theirs, else None (unknown name or wrong password; both take as long)."""
        with self._read() as conn:
            row = conn.execute(select(users).where(users.c.name == name)).mappings().first()
        if row is None:
            check_unknown_user(password)
            return None
        stored = row["password_hash"]
        if not check_password(password, stored):
            return None
        if needs_rehash(stored):  # a scrypt hash of an earlier version (or older argon2 parameters)
            with self._write() as conn:
                conn.execute(users.update().where(users.c.id == row["id"], users.c.password_hash == stored)
                             .values(password_hash=hash_password(password)))
        return User(id=row["id"], name=row["name"], role=row["role"], created_at=row["created_at"])

    def list_users(self) -> list[User]:
        query = select(users.c.id, users.c.name, users.c.role, users.c.created_at).order_by(users.c.name)
        with self._read() as conn:
            return [User(**row) for row in conn.execute(query).mappings()]
