"""The studio's login: the password check Gradio calls, and the failed-login limit around Gradio's POST /login.

Gradio (6.x) calls `auth(username, password)` from its /login route without the request, so the client address is
not visible there: `LoginGuard`, an ASGI middleware given to Gradio's FastAPI app, reads the form's username and the
client address, asks the `LoginLimiter` first and answers 429 (with Retry-After, and a detail that says who is
locked out and for how long: `app.shell.login_page.lockout_message`) without checking the password once the name from
this address, the address, or the name from anywhere but its known-good addresses is over its limit; Gradio's own
reply (200, or 400 for wrong credentials) tells the limiter the outcome. Gradio's login form shows nothing for a
429, so the page also gets a script that shows that detail (app/shell/login_page.py). The password
check runs in a worker thread (argon2 takes ~0.1-0.4 s of CPU and 64 MiB), at most two at a time, so a burst of
logins neither stalls the event loop nor the machine.

`UploadGuard`, another middleware, answers 403 to POST /gradio_api/upload unless the session's user (Gradio's login
cookie) may upload (`app.common.roles`, the admin role), before the body is read; and to GET /gradio_api/file=… likewise:
the files Gradio serves there are the uploaded data files (the studio shows no other file), which only the roles
that may upload may read back.

The client address is uvicorn's: the peer, or the X-Forwarded-For client when the peer is one of
`studio.trusted_proxies` (none by default: the header is ignored). uvicorn trusts loopback unless told otherwise, and
Gradio builds uvicorn's Config without a say in it: `trusting_proxies` sets the variable uvicorn reads
(FORWARDED_ALLOW_IPS) while `launch` builds the server, and restores it afterwards.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import TYPE_CHECKING, Awaitable, Callable, Iterator, Sequence

import anyio
from starlette.requests import Request

from evorag_core.auth.limiter import LoginLimiter
from evorag_core.auth.passwords import check_password, check_unknown_user
from evorag_core.auth.users_file import FileUser

from app.shell.login_page import lockout_message
from app.shell.page_scripts import is_route

if TYPE_CHECKING:
    from starlette.types import ASGIApp

__all__ = ["LoginGuard", "UploadGuard", "threaded_check", "file_check", "login_message", "trusting_proxies"]

MAX_FORM_BYTES = 64 * 1024
_CHECK_SLOTS = threading.BoundedSemaphore(2)
_UVICORN_TRUST = "FORWARDED_ALLOW_IPS"  # uvicorn.Config reads it when not given forwarded_allow_ips


def file_check(users: dict[str, FileUser]) -> Callable[[str, str], bool]:
    """name, password -> whether they match a user of the users file (as long for an unknown name)."""

    def check(name: str, password: str) -> bool:
        user = users.get(name)
        if user is None:
            return check_unknown_user(password)
        return check_password(password, user.password_hash)

    return check


def threaded_check(check: Callable[[str, str], bool]) -> Callable[[str, str], Awaitable[bool]]:
    """`check` as the coroutine Gradio awaits, run in a worker thread, at most two checks at once."""

    def run(name: str, password: str) -> bool:
        with _CHECK_SLOTS:
            return bool(check(name, password))

    async def auth(name: str, password: str) -> bool:
        return await anyio.to_thread.run_sync(run, name, password)

    return auth


def login_message(limiter: LoginLimiter) -> str:
    """The note on the login page (Gradio shows only 'incorrect credentials' itself, and nothing for a 429)."""
    lim = limiter.limits
    return (f"After {lim.per_user} failed logins for a name from one address, or {lim.per_address} from one address, "
            f"within {lim.window_s / 60:g} minutes, further logins from there are refused for a while.")


@contextlib.contextmanager
def trusting_proxies(proxies: Sequence[str]) -> Iterator[None]:
    """While the block runs (Gradio's `launch` building its uvicorn server), uvicorn honours X-Forwarded-For from
    exactly `proxies` (IPs or networks; none: from no one) instead of its default, loopback."""
    before = os.environ.get(_UVICORN_TRUST)
    os.environ[_UVICORN_TRUST] = ",".join(proxies)  # "" trusts no one (uvicorn never matches an empty host)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_UVICORN_TRUST, None)
        else:
            os.environ[_UVICORN_TRUST] = before


class LoginGuard:
    """ASGI middleware: the failed-login limit around POST /login (see the module docstring)."""

    def __init__(self, app: ASGIApp, limiter: LoginLimiter):
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not is_route(scope, "/login"):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            await _reply(send, 413, "the login form is too large")
            return

        user = await _form_username(scope, _replay(body, receive))
        address = (scope.get("client") or ("unknown",))[0]
        refusal = self.limiter.admit(user, address)
        if refusal is not None:
            wait = f"{refusal.wait_s:.0f}"
            await _reply(send, 429, lockout_message(refusal, user), {"retry-after": wait},
                         locked_out=refusal.scope, retry_after_s=int(wait))
            return

        async def watch(message: dict) -> None:
            # A success is recorded before its response starts, so a client that has read the 200 never sees the
            # attempt still counted as a failure (it was recorded after the reply: a race the suite hit under load).
            if message["type"] == "http.response.start" and message["status"] == 200:
                self.limiter.succeeded(user, address)
            await send(message)

        await self.app(scope, _replay(body, receive), watch)


class UploadGuard:
    """ASGI middleware: Gradio's upload and file routes only for users whose role may "upload" (see the module
    docstring)."""

    def __init__(self, app: ASGIApp, may_upload: Callable[[str | None], bool]):
        self.app = app
        self.may_upload = may_upload

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and is_route(scope, "/gradio_api/upload"):
            user = _session_user(scope)
            if user is None or not self.may_upload(user):
                await _reply(send, 403, f"{user or 'this session'} may not upload files: uploads need the admin role")
                return
        if scope["type"] == "http" and _is_file_route(scope):
            user = _session_user(scope)
            if user is None or not self.may_upload(user):
                await _reply(send, 403,
                             f"{user or 'this session'} may not read uploaded files: that needs the admin role")
                return
        await self.app(scope, receive, send)


def _session_user(scope: dict) -> str | None:
    """The logged-in user of the request, as Gradio's routes find it (its login cookie in the app's tokens)."""
    gradio_app = scope.get("app")
    cookie_id = getattr(gradio_app, "cookie_id", None)
    if cookie_id is None:
        return None
    cookies = Request(scope).cookies
    token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
    return gradio_app.tokens.get(token) if token else None


def _is_file_route(scope: dict) -> bool:
    """GET/HEAD of Gradio's file route (`/gradio_api/file=<path>`, under the app's root path if any)."""
    path = scope["path"]
    root = scope.get("root_path", "").rstrip("/")
    return any(path.startswith(prefix + "/gradio_api/file=") for prefix in {"", root})


async def _read_body(receive: Callable) -> bytes | None:
    """The request body, or None once it exceeds MAX_FORM_BYTES."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Callable) -> Callable[[], Awaitable[dict]]:
    """A `receive` that hands out the buffered body once, then the real one (a disconnect, say)."""
    sent = False

    async def replay() -> dict:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _form_username(scope: dict, receive: Callable) -> str:
    """The form's username as Gradio reads it (stripped); "" when there is none or the form is unreadable."""
    try:
        form = await Request(scope, receive).form()
    except Exception:  # malformed form: Gradio answers it (422); it still counts against the address
        return ""
    value = form.get("username")
    return value.strip() if isinstance(value, str) else ""


async def _reply(send: Callable, status: int, detail: str, headers: dict[str, str] | None = None, **extra) -> None:
    body = json.dumps({"detail": detail, **extra}).encode("utf-8")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
