"""Logging in to a launched studio over HTTP (Gradio's POST /login on 127.0.0.1, no language model): a users file
written by `evorag users add` lets its user in and refuses a wrong password; failed logins are refused with 429
(the detail: who is locked out, for how long; Retry-After) once a name from an address, then an address, is over its
limit, before any password is checked; X-Forwarded-For counts only from a configured trusted proxy. Before hashing
and the limit, the users file held `name = "password"` and 30 wrong logins took 0.19 s.
"""
from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.paths import DEMO
from app.common.services import Services
from app.shell.main import launch
from evorag_core.auth.limiter import LoginLimiter, LoginLimits
from evorag_core.auth.users_file import add_user
from evorag_core.config import load_config
from evorag_core.procs import free_port

LIMITS = LoginLimits(per_user=3, per_address=6, window_s=600)
PROXY = "127.0.0.2"  # the studio's one trusted proxy (all of 127.0.0.0/8 reaches a server bound to 127.0.0.1)


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(base url, limiter) of a studio served in this process with a two-user file, LIMITS and PROXY trusted."""
    work = tmp_path_factory.mktemp("studio_login")
    users = work / "users.toml"
    add_user(users, "alice", "alice's password")
    add_user(users, "bob", "bob's password", role="annotator")
    cfg = load_config(overrides={"studio.trusted_proxies": (PROXY,)})
    svc = Services(cfg, session_home, data_path=DEMO, db_url=f"sqlite:///{work / 'studio.db'}")
    port = free_port()
    limiter = LoginLimiter(LIMITS)
    demo = launch(svc, host="127.0.0.1", port=port, auth=str(users), block=False, quiet=True, limiter=limiter)
    yield f"http://127.0.0.1:{port}", limiter
    demo.close()
    svc.close()


def login(base: str, user: str, password: str, *, multipart: bool = True) -> tuple[int, dict, dict]:
    """(status, JSON body, headers) of POST /login; multipart like the page's login form, or url-encoded."""
    if multipart:
        boundary = "evorag-test-boundary"
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                 for k, v in (("username", user), ("password", password))]
        body = ("".join(parts) + f"--{boundary}--\r\n").encode()
        ctype = f"multipart/form-data; boundary={boundary}"
    else:
        body = urllib.parse.urlencode({"username": user, "password": password}).encode()
        ctype = "application/x-www-form-urlencoded"
    req = urllib.request.Request(base + "/login", data=body, method="POST", headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}"), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}"), dict(err.headers)


def test_hashed_password_logs_in_and_a_wrong_one_is_refused(studio):
    base, limiter = studio
    status, body, headers = login(base, "alice", "alice's password")
    assert status == 200 and body == {"success": True}
    assert any(k.lower() == "set-cookie" for k in headers)
    assert login(base, "bob", "bob's password", multipart=False)[0] == 200
    status, body, _ = login(base, "alice", "not alice's password")
    assert status == 400 and body["detail"] == "Incorrect credentials."
    assert limiter.failures(user="alice") == 1
    assert login(base, "alice", "alice's password")[0] == 200  # a success forgets alice's failures from here ...
    assert limiter.failures("alice", "127.0.0.1") == 0
    assert limiter.failures(user="alice") == 1  # ... not those of the name from anywhere (a guesser's)


def test_failed_logins_hit_the_limit_per_user_then_per_address(studio):
    """LIMITS: 3 per name and address, 6 per address, 600 s window; every request comes from 127.0.0.1, which starts with
    `before` failures (1 after the test above: its wrong password; each success took only its own attempt back).
    carol x3 -> 400 (checked); carol's 4th -> 429 without a check (not counted). dave until the address holds 6
    failures -> 400 each (6 - before - 3 of them), then dave -> 429, and alice with her right password -> 429 too:
    the address is over its limit, and the wait is the address's (at most 600 s)."""
    base, limiter = studio
    before = limiter.failures(address="127.0.0.1")
    n_dave = LIMITS.per_address - before - LIMITS.per_user
    assert n_dave >= 1
    seen, details = [], []
    start = time.perf_counter()
    for user in ("carol",) * 4 + ("dave",) * (n_dave + 1) + ("alice",):
        password = "alice's password" if user == "alice" else "guess"
        status, body, headers = login(base, user, password)
        seen.append((user, status))
        if status == 429:
            wait = body["retry_after_s"]
            assert 0 < wait <= 600 and headers.get("retry-after", headers.get("Retry-After")) == str(wait)
            details.append((body["locked_out"], body["detail"]))
    elapsed = time.perf_counter() - start
    assert seen == ([("carol", 400)] * 3 + [("carol", 429)] + [("dave", 400)] * n_dave + [("dave", 429)]
                    + [("alice", 429)]), seen
    assert limiter.failures(address="127.0.0.1") == LIMITS.per_address
    # #46: the reply says who is locked out and for how long (the login page shows it: test_login_browser.py)
    assert details[0][0] == "pair" and details[0][1].startswith("The name \u201ccarol\u201d is locked out from this "
                                                                  "address after too many failed logins, for ")
    assert [scope for scope, _ in details[1:]] == ["addr", "addr"]
    assert details[2][1].startswith("This address is locked out, for every name, after too many failed logins")
    assert details[2][1].endswith("Until then every login is refused, even with the right password.")
    print(f"{len(seen)} login attempts ({3 + n_dave} argon2 checks) took {elapsed:.2f} s")


def login_from(base: str, source: str, user: str, password: str, forwarded: str | None = None) -> int:
    """The status of POST /login sent from the local address `source`, with an X-Forwarded-For header if given."""
    port = int(base.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    try:
        conn.request("POST", "/login", urllib.parse.urlencode({"username": user, "password": password}), headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_forwarded_headers_count_only_from_a_configured_trusted_proxy(studio):
    """#44 item 6. Before, uvicorn took X-Forwarded-For from any loopback peer: a client on the machine (or behind
    a proxy that passes the header on) named a new address per request and never met the per-address limit (25 of
    25 failures, no 429). Now from 127.0.0.1, not a trusted proxy here, the header is ignored: the failure counts
    against 127.0.0.1 (or, once 127.0.0.1 is over its limit after the test above, it is refused with 429), never
    against 203.0.113.7. From PROXY it names the client: the failure counts against 203.0.113.7, not PROXY."""
    base, limiter = studio
    before = limiter.failures(address="127.0.0.1")
    status = login_from(base, "127.0.0.1", "eve", "guess", forwarded="203.0.113.7")
    assert limiter.failures(address="203.0.113.7") == 0
    assert (status, limiter.failures(address="127.0.0.1")) in ((400, before + 1), (429, before))
    assert login_from(base, PROXY, "eve", "guess", forwarded="203.0.113.7") == 400
    assert limiter.failures(address="203.0.113.7") == 1 and limiter.failures(address=PROXY) == 0
    assert login_from(base, PROXY, "eve", "guess") == 400  # the proxy's own request: its own address
    assert limiter.failures(address=PROXY) == 1


def test_the_page_carries_the_script_that_shows_a_lockout(studio):
    """#46: Gradio's login form shows nothing for a 429; the page served by the studio carries the script that shows
    the reply's detail (app/shell/login_page.py), once, inside the head."""
    base, _ = studio
    with urllib.request.urlopen(base + "/", timeout=60) as resp:
        html = resp.read().decode()
        assert int(resp.headers["content-length"]) == len(html.encode())
    assert html.count('id="evo-login-lockout-js"') == 1
    assert html.index("evo-login-lockout-js") < html.index("</head>")
    # the frame guard (app/shell/page_scripts.py) too, once, inside the head: an inline script there runs while the
    # page is parsed, before Gradio's bundle (a module script, deferred unless async) starts
    assert html.count('id="evo-frame-guard-js"') == 1
    assert html.index("evo-frame-guard-js") < html.index("</head>")
    assert '<script type="module"' in html and '<script type="module" async' not in html
