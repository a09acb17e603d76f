"""Logins without a server: argon2 password hashes (and legacy scrypt ones), the users file and `evorag users add`,
the failed-login limiter on an injected clock, and the refusal to serve a non-loopback address without a login."""
from __future__ import annotations

import base64
import hashlib
import io
import stat

import pytest
from sqlalchemy import text

from evorag_core.auth.limiter import LoginLimiter, LoginLimits
from evorag_core.auth.passwords import check_password, hash_password, needs_rehash
from evorag_core.auth.users_file import add_user, load_users
from evorag_core.cli.main import main as cli_main
from evorag_core.errors import ConfigError
from evorag_core.store import open_store


def scrypt_hash(password: str, salt: bytes = b"0123456789abcdef") -> str:
    """The form the store wrote before argon2: scrypt$n$r$p$salt$hash, n=2^14, r=8, p=1, 32 bytes."""
    digest = hashlib.scrypt(password.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    return f"scrypt$16384$8$1${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


# -- password hashes -------------------------------------------------------------------------------------------

def test_argon2_hashes_verify_and_legacy_scrypt_hashes_still_do():
    stored = hash_password("correct horse")
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$") and "correct horse" not in stored
    assert hash_password("correct horse") != stored  # a fresh salt each time
    assert check_password("correct horse", stored) and not check_password("correct hors", stored)
    assert not needs_rehash(stored)
    legacy = scrypt_hash("correct horse")
    assert check_password("correct horse", legacy) and not check_password("wrong", legacy)
    assert needs_rehash(legacy)
    for malformed in ("", "correct horse", "$argon2id$v=19$garbage", "scrypt$1$2$3", "scrypt$x$8$1$AA==$AA=="):
        assert not check_password("correct horse", malformed)
    with pytest.raises(ValueError, match="empty"):
        hash_password("")


def test_store_users_get_argon2_and_a_legacy_scrypt_row_is_rehashed_at_login(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        ada = store.add_user("ada", "correct horse", role="admin")
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT password_hash FROM users")).scalar_one().startswith("$argon2id$")
        assert store.verify_user("ada", "correct horse") == ada
        assert store.verify_user("ada", "wrong") is None and store.verify_user("nobody", "correct horse") is None

        bob = store.add_user("bob", "placeholder", role="annotator")
        with store.engine.begin() as conn:  # a row as an earlier version wrote it
            conn.execute(text("UPDATE users SET password_hash = :h WHERE name = 'bob'"),
                         {"h": scrypt_hash("bobs password")})
        assert store.verify_user("bob", "wrong") is None
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT password_hash FROM users WHERE name = 'bob'")).scalar_one() \
                .startswith("scrypt$")  # a failed login changes nothing
        assert store.verify_user("bob", "bobs password") == bob
        with store.engine.connect() as conn:
            rehashed = conn.execute(text("SELECT password_hash FROM users WHERE name = 'bob'")).scalar_one()
        assert rehashed.startswith("$argon2id$") and store.verify_user("bob", "bobs password") == bob


# -- the users file and `evorag users add` ----------------------------------------------------------------------

def test_users_file_holds_hashes_and_roles_and_refuses_plain_text(tmp_path):
    path = tmp_path / "users.toml"
    add_user(path, "alice", "alice's password")
    add_user(path, "rev", "reviewer pw 1", role="reviewer")
    raw = path.read_text()
    assert "alice's password" not in raw and raw.count("$argon2id$") == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    users = load_users(path)
    assert [(u.name, u.role) for u in users.values()] == [("alice", "admin"), ("rev", "reviewer")]
    assert check_password("alice's password", users["alice"].password_hash)
    assert "alice's password" not in repr(users["alice"])

    with pytest.raises(ConfigError, match="exists; pass --replace"):
        add_user(path, "alice", "another one")
    add_user(path, "alice", "a new password", role="annotator", replace=True)
    users = load_users(path)
    assert users["alice"].role == "annotator" and check_password("a new password", users["alice"].password_hash)
    with pytest.raises(ConfigError, match="role"):
        add_user(path, "carol", "carol's password", role="root")
    with pytest.raises(ConfigError, match="invalid user name"):
        add_user(path, " carol", "carol's password")

    old = tmp_path / "old.toml"  # the format before hashes
    old.write_text('[users]\nalice = "s3cret"\nbob = "hunter22"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"plain-text passwords for alice, bob; .*evorag users add NAME"):
        load_users(old)
    add_user(old, "alice", "alice's password", replace=True)  # the migration the message names, one user at a time
    with pytest.raises(ConfigError, match="plain-text passwords for bob;"):
        load_users(old)
    add_user(old, "bob", "bob's password", replace=True)
    assert set(load_users(old)) == {"alice", "bob"} and "hunter22" not in old.read_text()

    for body, match in (("[users.x]\npassword_hash = \"$argon2id$...\"\nrol = \"admin\"\n", "only"),
                        ("[users.x]\npassword_hash = \"plain\"\n", "not an argon2 hash"),
                        ("[users]\n", "no users"), ("[user]\n", "only a \\[users\\] table"), ("[users\n", "TOML")):
        bad = tmp_path / "bad.toml"
        bad.write_text(body, encoding="utf-8")
        with pytest.raises(ConfigError, match=match):
            load_users(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_users(tmp_path / "missing.toml")


def test_users_add_cli_reads_the_password_from_stdin_and_the_file_logs_in(tmp_path, monkeypatch, capsys):
    """`evorag users add alice --password-stdin --file F` then the studio's password check for F (the coroutine
    Gradio awaits) accepts alice's password and refuses a wrong one and an unknown name."""
    import asyncio

    from app.shell.main import make_auth

    class Svc:  # make_auth with a file touches nothing else of Services but this attribute
        auth_users = None

    path = tmp_path / "users.toml"
    monkeypatch.setattr("sys.stdin", io.StringIO("pw for alice 1\n"))
    assert cli_main(["users", "add", "alice", "--password-stdin", "--file", str(path)]) == 0
    assert f"alice (admin) written to {path}" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert cli_main(["users", "add", "bob", "--password-stdin", "--file", str(path)]) == 2
    assert "at least 8 characters" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO("pw for ann 1\n"))
    assert cli_main(["users", "add", "ann", "--role", "annotator", "--password-stdin", "--file", str(path)]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal and no --password-stdin: nothing to prompt on
    assert cli_main(["users", "add", "carl", "--file", str(path)]) == 2
    assert "pass --password-stdin" in capsys.readouterr().err

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    typed = iter(["pw for carl 1", "pw for carl 2"])  # the prompt, twice, with a typo the second time
    monkeypatch.setattr("sys.stdin", Tty())
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(typed))
    assert cli_main(["users", "add", "carl", "--file", str(path)]) == 2
    assert "the two passwords differ; nothing written" in capsys.readouterr().err
    assert cli_main(["users", "list", "--file", str(path), "--json"]) == 0
    assert capsys.readouterr().out.strip().endswith('[{"name": "alice", "role": "admin"}, '
                                                    '{"name": "ann", "role": "annotator"}]')

    svc = Svc()
    check = make_auth(svc, str(path))
    assert asyncio.run(check("alice", "pw for alice 1"))
    assert not asyncio.run(check("alice", "pw for alice 2")) and not asyncio.run(check("eve", "pw for alice 1"))
    assert svc.auth_users == {"alice": "admin", "ann": "annotator"}


def test_store_auth_needs_a_user_and_checks_the_stores_hashes(tmp_path):
    import asyncio

    from app.common.services import Services
    from app.shell.main import make_auth
    from evorag_core.config import load_config

    svc = Services(load_config(), tmp_path, data_path=tmp_path / "unused.jsonl", db_url=f"sqlite:///{tmp_path / 'db'}")
    try:
        assert make_auth(svc, None) is None
        with pytest.raises(ConfigError, match="no users yet; add one with `evorag users add NAME --store`"):
            make_auth(svc, "store")  # #46: the message names the command that adds one (tests/cli/test_users_store)
        svc.store().add_user("carol", "pw-carol")
        check = make_auth(svc, "store")
        assert asyncio.run(check("carol", "pw-carol")) and not asyncio.run(check("carol", "wrong"))
    finally:
        svc.close()


# -- the failed-login limiter -------------------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_limiter_refuses_a_name_from_one_address_after_n_failures_until_the_oldest_ages_out():
    """per_user 3 (one name from one address), window 60 s. alice from 10.0.0.1 fails at t = 0, 10, 20 -> the 4th
    attempt at t = 30 must wait until the failure at t = 0 is 60 s old: 60 - 30 = 30 s. alice from 10.0.0.2 and bob
    from 10.0.0.1 are let through. At t = 60 one is allowed (and counts): failures at 10, 20, 60 -> at t = 61 the
    wait is 10 + 60 - 61 = 9 s; alice from any address has 4 failures in the window then (10, 20, 30 from 10.0.0.2,
    60). A success forgets the (name, address) failures."""
    clock = Clock()
    lim = LoginLimiter(LoginLimits(per_user=3, per_address=100, window_s=60), clock=clock)
    for t in (0, 10, 20):
        clock.now = 1000.0 + t
        assert lim.attempt("alice", "10.0.0.1") == 0.0
    clock.now = 1030.0
    assert lim.attempt("alice", "10.0.0.1") == 30.0
    assert lim.attempt("alice", "10.0.0.2") == 0.0  # per name and address: another address is not locked out
    assert lim.attempt("bob", "10.0.0.1") == 0.0
    clock.now = 1060.0
    assert lim.attempt("alice", "10.0.0.1") == 0.0
    clock.now = 1061.0
    assert lim.attempt("alice", "10.0.0.1") == 9.0
    assert lim.failures("alice", "10.0.0.1") == 3 and lim.failures(user="alice") == 4
    lim.succeeded("bob", "10.0.0.1")
    assert lim.failures("bob", "10.0.0.1") == 0
    clock.now = 1080.0  # failures at 20 and 60 remain (10 aged out): below 3
    assert lim.attempt("alice", "10.0.0.1") == 0.0
    lim.succeeded("alice", "10.0.0.1")
    assert lim.failures("alice", "10.0.0.1") == 0 and lim.attempt("alice", "10.0.0.1") == 0.0


def test_a_strangers_guesses_do_not_lock_the_right_password_out_from_another_address():
    """#44 item 6, default limits (5 per name and address, 20 per address, 50 per name, 300 s). Before: five wrong
    guesses for boss from anywhere refused boss's real password for ~300 s. Now the stranger's address waits 300 s
    (to the second: all five failures at t = 0), and boss from another address is let through at once."""
    clock = Clock()
    lim = LoginLimiter(clock=clock)
    for _ in range(5):
        assert lim.attempt("boss", "203.0.113.9") == 0.0
    assert lim.attempt("boss", "203.0.113.9") == 300.0
    assert lim.attempt("boss", "192.0.2.1") == 0.0
    lim.succeeded("boss", "192.0.2.1")
    assert lim.failures(user="boss") == 5 and lim.failures("boss", "192.0.2.1") == 0


def test_a_name_guessed_from_many_addresses_is_refused_except_from_its_known_good_addresses():
    """per_user 2, per_address 100, per_name 6, window 60 s, known_s 100 s. boss logs in from 192.0.2.1 at t = 0
    (known-good from then on). Three addresses guess twice each at t = 1..6: 6 failures for boss, the name-wide limit,
    no pair over its own. A fourth address at t = 10 waits until boss's oldest failure (t = 1) is 60 s old:
    1 + 60 - 10 = 51 s; boss from 192.0.2.1 is let through (and logs in: known-good again at t = 10). At t = 120 that
    is 110 s ago (> known_s): after six new guesses at t = 120..125, 192.0.2.1 waits like anyone, 120 + 60 - 126 =
    54 s."""
    clock = Clock()
    lim = LoginLimiter(LoginLimits(per_user=2, per_address=100, per_name=6, window_s=60, known_s=100), clock=clock)

    def guess(addresses, t0):
        for i, address in enumerate(a for a in addresses for _ in range(2)):
            clock.now = 1000.0 + t0 + i
            assert lim.attempt("boss", address) == 0.0

    assert lim.attempt("boss", "192.0.2.1") == 0.0
    lim.succeeded("boss", "192.0.2.1")
    guess(("198.51.100.1", "198.51.100.2", "198.51.100.3"), 1)
    clock.now = 1010.0
    assert lim.attempt("boss", "198.51.100.4") == 51.0
    assert lim.attempt("boss", "198.51.100.1") == 51.0  # its own pair is over too (failures at t = 1, 2)
    assert lim.attempt("boss", "192.0.2.1") == 0.0
    lim.succeeded("boss", "192.0.2.1")
    assert lim.attempt("carol", "198.51.100.4") == 0.0  # another name is not affected
    guess(("198.51.100.5", "198.51.100.6", "198.51.100.7"), 120)
    clock.now = 1126.0
    assert lim.attempt("boss", "192.0.2.1") == 54.0


def test_limiter_refuses_an_address_after_n_failures_across_names():
    """per_address 4: four different names from 10.0.0.9 at t = 0..3 -> a fifth name at t = 5 waits 60 - 5 = 55 s
    (the wait is rounded up: at t = 5.5, 54.5 -> 55); another address is allowed. A success takes its own attempt
    back from the address's count: 3 failures + 1 success leave room for one more."""
    clock = Clock()
    lim = LoginLimiter(LoginLimits(per_user=100, per_address=4, window_s=60), clock=clock)
    for i in range(4):
        clock.now = 1000.0 + i
        assert lim.attempt(f"user{i}", "10.0.0.9") == 0.0
    clock.now = 1005.0
    assert lim.attempt("user9", "10.0.0.9") == 55.0
    clock.now = 1005.5
    assert lim.attempt("user9", "10.0.0.9") == 55.0
    assert lim.attempt("user9", "10.0.0.10") == 0.0
    assert lim.failures(address="10.0.0.9") == 4

    other = LoginLimiter(LoginLimits(per_user=100, per_address=4, window_s=60), clock=clock)
    for i in range(3):
        assert other.attempt(f"u{i}", "10.0.0.7") == 0.0
    assert other.attempt("ok", "10.0.0.7") == 0.0
    other.succeeded("ok", "10.0.0.7")
    assert other.attempt("u9", "10.0.0.7") == 0.0 and other.attempt("u8", "10.0.0.7") > 0
    with pytest.raises(ValueError):
        LoginLimits(per_user=0)


def test_a_refusal_names_the_limit_and_the_login_page_words_it():
    """#46: the 429 said "too many failed logins for this user or address: wait N s", and the page showed nothing.
    `admit` says which limit refused: per_user 2, per_address 3, per_name 4, window 600 s, all at t = 0.
    carol x2 from A -> carol from A refused by the pair (600 s). dave from A: the address's 3rd failure -> anyone from
    A refused by the address. eve x2 from B and x2 from C: 4 failures of the name -> eve from D refused by the name.
    A tie between pair and address (carol from A, both 600 s) names the broader limit, the address."""
    from app.shell.login_page import duration, lockout_message

    lim = LoginLimiter(LoginLimits(per_user=2, per_address=3, per_name=4, window_s=600), clock=Clock())
    assert lim.admit("carol", "A") is None and lim.admit("carol", "A") is None
    refusal = lim.admit("carol", "A")
    assert (refusal.scope, refusal.wait_s) == ("pair", 600.0)
    assert lockout_message(refusal, "carol") == ("The name \u201ccarol\u201d is locked out from this address after too "
                                                 "many failed logins, for 10 min more. Until then every login is "
                                                 "refused, even with the right password.")
    assert lim.admit("dave", "A") is None
    assert lim.admit("frank", "A").scope == "addr" and lim.admit("carol", "A").scope == "addr"
    assert lockout_message(lim.admit("frank", "A"), "frank").startswith("This address is locked out, for every name,")
    for address in ("B", "B", "C", "C"):
        assert lim.admit("eve", address) is None
    assert lim.admit("eve", "D").scope == "name"
    assert [duration(s) for s in (45, 60, 290, 3600, 3900)] == ["45 s", "1 min", "4 min 50 s", "1 h", "1 h 5 min"]


def test_limiter_forgets_names_and_addresses_once_their_failures_age_out():
    clock = Clock()
    lim = LoginLimiter(LoginLimits(per_user=2, per_address=2, window_s=10), clock=clock)
    for i in range(50):
        lim.attempt(f"name{i}", f"10.1.0.{i}")
    clock.now += 25  # two windows later the next attempt sweeps every stale key
    lim.attempt("fresh", "10.2.0.1")
    assert len(lim._failures) == 3  # fresh's (name, address), its address and its name


# -- exposure ---------------------------------------------------------------------------------------------------

def test_a_non_loopback_host_needs_auth_or_an_explicit_insecure_flag(capsys):
    from app.shell.main import check_exposure, is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "studio.example.org", ""))
    check_exposure("127.0.0.1", None, False)
    check_exposure("0.0.0.0", "users.toml", False)
    check_exposure("0.0.0.0", None, True)
    with pytest.raises(ConfigError, match="refusing to serve the studio on 0.0.0.0 without a login"):
        check_exposure("0.0.0.0", None, False)
    # the command: exit 2 with the message, before anything is loaded or bound
    assert cli_main(["studio", "--host", "0.0.0.0", "--port", "1", "--no-worker", "--no-warm"]) == 2
    err = capsys.readouterr().err
    assert "evorag studio: error: refusing to serve the studio on 0.0.0.0" in err and "--insecure-no-auth" in err


def test_the_old_plain_text_users_file_stops_the_studio_with_the_fix(tmp_path, capsys):
    old = tmp_path / "users.toml"
    old.write_text('[users]\nalice = "s3cret"\n', encoding="utf-8")
    code = cli_main(["studio", "--host", "127.0.0.1", "--port", "1", "--auth", str(old), "--no-worker", "--no-warm",
                     "--home", str(tmp_path), "--db", f"sqlite:///{tmp_path / 'db.sqlite'}"])
    assert code == 2 and "plain-text passwords for alice" in capsys.readouterr().err


def test_trusted_proxies_are_ip_addresses_or_networks(capsys):
    """`--trusted-proxy` (studio.trusted_proxies) takes IPs and networks; a host name is refused before anything
    starts (exit 2), as a --set of a bad value is."""
    from evorag_core.config import load_config

    cfg = load_config(overrides={"studio.trusted_proxies": ("10.0.0.5", "10.1.0.0/16", "::1")})
    assert cfg.studio.trusted_proxies == ("10.0.0.5", "10.1.0.0/16", "::1")
    assert load_config().studio.trusted_proxies == ()
    assert cli_main(["studio", "--trusted-proxy", "proxy.example.org", "--port", "1", "--no-worker",
                     "--no-warm"]) == 2
    assert "studio.trusted_proxies must be a list of IP addresses or networks" in capsys.readouterr().err
