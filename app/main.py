"""Launch the studio: build the Services, start the background worker, serve the page, stop everything on exit.

`run(...)` blocks until Ctrl-C or SIGTERM; the worker subprocess is stopped in either case (and, on Linux, gets
SIGTERM by itself should the studio die without cleaning up).
"""
from __future__ import annotations

import logging
import signal
import threading
import time
import tomllib
from pathlib import Path
from typing import Callable

from evorag_core.config import Config
from evorag_core.errors import ConfigError

from .services import Services

__all__ = ["load_auth_file", "make_auth", "launch", "run"]

log = logging.getLogger(__name__)


def load_auth_file(path: Path) -> dict[str, str]:
    """Users from a TOML file: a `[users]` table of `name = "password"` entries."""
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"auth file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    users = raw.get("users")
    if not isinstance(users, dict) or not users or not all(isinstance(v, str) and v for v in users.values()):
        raise ConfigError(f'{path}: expected a [users] table of name = "password" entries')
    return dict(users)


def make_auth(svc: Services, auth: str | None) -> Callable[[str, str], bool] | None:
    """None (no login), "store" (users kept in the store) or the path of a users TOML file."""
    if not auth:
        return None
    if auth == "store":
        store = svc.store()
        if not store.list_users():
            raise ConfigError("--auth store: the store has no users yet; add one first")
        return lambda name, password: store.verify_user(name, password) is not None
    users = load_auth_file(Path(auth))
    svc.auth_users = users
    return lambda name, password: users.get(name) == password


def launch(svc: Services, *, host: str, port: int, auth: str | None = None, block: bool = True,
           quiet: bool = False):
    """Build the UI and serve it; returns the Blocks (with `block=False` the server runs in the background)."""
    from .style import CSS
    from .ui import build_ui

    auth_fn = make_auth(svc, auth)
    demo = build_ui(svc)
    demo.queue(default_concurrency_limit=4)
    demo.launch(
        server_name=host, server_port=port, auth=auth_fn, prevent_thread_lock=True, show_error=False,
        quiet=quiet, ssr_mode=False, css=CSS, footer_links=["settings"], enable_monitoring=False,
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
    start_worker: bool | None = None,
    warm: bool = True,
) -> int:
    svc = Services(cfg, home, data_path=data, db_url=db_url)
    host = host or cfg.studio.host
    port = port or cfg.studio.port
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # make SIGTERM behave like Ctrl-C so that the worker is stopped
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        demo = launch(svc, host=host, port=port, auth=auth, block=False)
        print(f"EVO-RAG Studio: http://{host}:{port}", flush=True)
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
