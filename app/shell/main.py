"""Launch the studio: build the Services, start the background worker, serve the page, stop everything on exit.

A studio bound to anything but a loopback address needs a login (`--auth users.toml` or `--auth store`) unless
`--insecure-no-auth` is passed; logins check argon2 hashes and are rate-limited (app/shell/login.py).

`run(...)` blocks until Ctrl-C or SIGTERM; the worker subprocess is stopped in either case (and, on Linux, gets
SIGTERM by itself should the studio die without cleaning up).
"""
from __future__ import annotations

import functools
import ipaddress
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Awaitable, Callable

from evorag_core.auth.limiter import LoginLimiter
from evorag_core.auth.users_file import load_users
from evorag_core.config import Config
from evorag_core.errors import ConfigError

from app.common import roles
from app.common.services import Services
from app.shell.login import LoginGuard, UploadGuard, file_check, login_message, threaded_check, trusting_proxies

__all__ = ["make_auth", "check_exposure", "is_loopback", "launch", "quiet_queue_polling", "run"]

log = logging.getLogger(__name__)


def make_auth(svc: Services, auth: str | None) -> Callable[[str, str], Awaitable[bool]] | None:
    """The password check Gradio awaits for `auth`: None (no login), "store" (the store's users) or the path of a
    users file written by `evorag users add` (argon2 hashes; plain-text passwords are refused)."""
    if not auth:
        return None
    if auth == "store":
        store = svc.store()
        if not store.list_users():
            raise ConfigError(f"--auth store: the store {store.url} has no users yet; add one with `evorag users "
                              "add NAME --store` (with the studio's --db or --home)")
        return threaded_check(lambda name, password: store.verify_user(name, password) is not None)
    users = load_users(Path(auth))
    svc.auth_users = {name: user.role for name, user in users.items()}  # name -> role
    return threaded_check(file_check(users))


def check_exposure(host: str, auth: str | None, insecure_no_auth: bool) -> None:
    """ConfigError unless the studio is reachable only from this machine, has a login, or the person asked for an
    open studio with --insecure-no-auth."""
    if auth or insecure_no_auth or is_loopback(host):
        return
    raise ConfigError(
        f"refusing to serve the studio on {host} without a login: anyone who reaches this address could label, "
        "train and activate adapters. Pass --auth users.toml (write it with `evorag users add NAME --file "
        "users.toml`) or --auth store, bind 127.0.0.1, or pass --insecure-no-auth to serve it open anyway")


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and 'localhost' (any other name counts as reachable from elsewhere)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


# Gradio's queue looks for new events every 1 ms and for progress to send every 10 ms while it has nothing to do
# (gradio/queueing.py, `sleep_when_free`, `progress_update_sleep_when_free`): 6-8 % of a core with no page open and no
# request (py-spy: the uvicorn thread in Queue.start_processing's sleep loop). Gradio's own values on Windows, 50 ms /
# 100 ms, cost a click at most 50 ms before it starts and a progress bar 0.1 s of lag.
QUEUE_IDLE_POLL_S = 0.05
PROGRESS_IDLE_POLL_S = 0.1


def quiet_queue_polling(demo) -> None:
    """Slow the queue's idle polling (above). A Gradio whose queue lacks these settings is logged and left as it is
    (tests/app/test_queue_polling.py fails on it)."""
    queue = getattr(demo, "_queue", None)
    missing = [n for n in ("sleep_when_free", "progress_update_sleep_when_free")
               if not isinstance(getattr(queue, n, None), float)]
    if missing:
        log.warning("gradio's queue has no %s: its idle polling is left as it is", ", ".join(missing))
        return
    queue.sleep_when_free = QUEUE_IDLE_POLL_S
    queue.progress_update_sleep_when_free = PROGRESS_IDLE_POLL_S


def launch(svc: Services, *, host: str, port: int, auth: str | None = None, block: bool = True,
           quiet: bool = False, limiter: LoginLimiter | None = None):
    """Build the UI and serve it; returns the Blocks (with `block=False` the server runs in the background).
    With `auth`, failed logins are limited per name and client address, per address and per name (`limiter`,
    default LoginLimits()); the client address comes from X-Forwarded-For only when the peer is one of
    `studio.trusted_proxies`; uploads need the admin role (app/shell/login.py UploadGuard)."""
    from starlette.middleware import Middleware

    from app.shell.login_page import LOCKOUT_JS
    from app.shell.page_scripts import FRAME_GUARD_JS, PageScripts
    from app.shell.style import CSS
    from app.shell.ui import build_ui

    auth_fn = make_auth(svc, auth)
    scripts = FRAME_GUARD_JS  # no animation frames on an idle page
    guards: list = []
    extra: dict = {}
    if auth_fn is not None:
        limiter = limiter or LoginLimiter()
        may_upload = functools.partial(roles.name_allowed, svc, action="upload")
        extra = {"auth_message": login_message(limiter)}
        scripts += LOCKOUT_JS  # the login page says so when a login is refused
        guards = [Middleware(LoginGuard, limiter=limiter), Middleware(UploadGuard, may_upload=may_upload)]
    middleware = [Middleware(PageScripts, scripts=scripts), *guards]
    demo = build_ui(svc)
    demo.queue(default_concurrency_limit=4)
    quiet_queue_polling(demo)
    # _frontend=False skips only Gradio's "is localhost reachable" probe: one HEAD / with a 3 s timeout, and the page
    # (a ~380 kB config walked per request) took 3-6 s on a loaded 2-core machine, so the studio exited at start with
    # "When localhost is not accessible, a shareable link must be created" (2026-11-27, load average 9).
    with trusting_proxies(svc.cfg.studio.trusted_proxies):  # X-Forwarded-For only from these (app/shell/login.py)
        demo.launch(
            server_name=host, server_port=port, auth=auth_fn, prevent_thread_lock=True, show_error=False,
            quiet=quiet, ssr_mode=False, css=CSS, footer_links=["settings"], enable_monitoring=False,
            _frontend=False, max_file_size=int(svc.cfg.studio.max_upload_mb * 2**20),
            app_kwargs={"middleware": middleware}, **extra,
        )
    log.info("studio serving on http://%s:%d", host, port)
    if block:
        demo.block_thread()
    return demo


def _warm(svc: Services) -> None:
    start = time.perf_counter()
    try:
        svc.warm()
        log.info("default data file and retrieval index ready in %.1f s", time.perf_counter() - start)
    except Exception as exc:  # background warm-up only; the page reports errors when the user acts
        log.warning("warm-up failed (the first episode will retry): %s", exc)


def run(
    cfg: Config,
    home: Path,
    *,
    data: Path,
    db_url: str | None = None,
    host: str | None = None,
    port: int | None = None,
    auth: str | None = None,
    insecure_no_auth: bool = False,
    start_worker: bool | None = None,
    warm: bool = True,
) -> int:
    host = host or cfg.studio.host
    port = port or cfg.studio.port
    check_exposure(host, auth, insecure_no_auth)
    if insecure_no_auth and not auth and not is_loopback(host):
        log.warning("serving the studio on %s WITHOUT a login (--insecure-no-auth)", host)
    svc = Services(cfg, home, data_path=data, db_url=db_url)
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # make SIGTERM behave like Ctrl-C so that the worker is stopped
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        demo = launch(svc, host=host, port=port, auth=auth, block=False)
        print(f"EVO-RAG Studio: http://{host}:{port}", flush=True)
        svc.clean_uploads()  # uploads unused for studio.upload_max_age_hours
        if cfg.studio.start_worker if start_worker is None else start_worker:
            svc.start_worker()  # after the page is served: its imports would only slow the start down
        if warm:
            svc.warm_status = "loading the retrieval index"  # shown from the first page load on
            threading.Thread(target=_warm, args=(svc,), name="evorag-warm", daemon=True).start()
        demo.block_thread()
        demo.close()
    finally:
        svc.close()
        signal.signal(signal.SIGTERM, previous)
    return 0
