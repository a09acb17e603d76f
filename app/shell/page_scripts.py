"""Scripts the studio adds to its page's HTML, and the ASGI middleware that adds them.

A script that must run before Gradio's own code (which starts once the page is parsed: its bundle is a module script)
cannot come from `launch(head=...)`: Gradio inserts that head from its config, after its bundle has started. So the
middleware `PageScripts` adds such scripts to the HTML of the page itself (`serve_with_script`), at the end of its
head, where an inline script runs while the page is parsed, before any module script.

`FRAME_GUARD_JS`: Gradio 6.31's status tracker (`js/statustracker/static/index.svelte`) counts a pending event's
elapsed time in a requestAnimationFrame loop that only its own "status changed" effect stops; a tracker removed from
the page while pending keeps its loop for the page's life. Every studio page has one from its start (the page's
"Loading..." tracker is removed while pending): 60 frames a second on an idle page, ~10 % of a core of the browser's
renderer and GPU process (`bench/studio_idle.py`). The guard wraps `requestAnimationFrame` before Gradio takes it:
a frame asked for by a status tracker's timer (the caller's stack is Gradio's status-tracker chunk and the callback
reads `performance.now`) runs only while some tracker on the page is pending (it then shows `.progress-text`);
otherwise it is dropped, which ends that loop (it only asks for the next frame from inside the last). A live
tracker's timer is untouched: it runs while its tracker is pending. `window.__evoFrameGuard` counts the frames run
and dropped.
"""
from __future__ import annotations

from typing import Callable

__all__ = ["FRAME_GUARD_JS", "PageScripts", "is_page", "is_route", "serve_with_script", "with_script"]

FRAME_GUARD_JS = """<script id="evo-frame-guard-js">(() => {
  if (window.__evoFrameGuard) return;
  const guard = window.__evoFrameGuard = {ran: 0, dropped: 0};
  const frame = window.requestAnimationFrame.bind(window);
  const pending = () => document.querySelector('[data-testid="status-tracker"] .progress-text') !== null;
  window.requestAnimationFrame = (callback) => {
    if (!String(new Error().stack).includes('statustracker') || !String(callback).includes('performance.now')) {
      return frame(callback);
    }
    return frame((t) => {
      if (pending()) { guard.ran++; callback(t); } else guard.dropped++;
    });
  };
})();</script>"""


def is_route(scope: dict, route: str) -> bool:
    """Whether an ASGI request's path is `route` ("" for the page, "/login", ...), under the app's root path or not."""
    path = scope["path"].rstrip("/")
    return path == route or path == scope.get("root_path", "").rstrip("/") + route


def is_page(scope: dict) -> bool:
    """Whether an ASGI request is a GET of the studio's page (its root path; deep links are query strings)."""
    return scope["type"] == "http" and scope["method"] == "GET" and is_route(scope, "")


def with_script(html: bytes, script: str) -> bytes:
    """`html` with `script` at the end of its head (unchanged without a </head>)."""
    at = html.find(b"</head>")
    return html if at < 0 else html[:at] + script.encode("utf-8") + html[at:]


async def serve_with_script(app: Callable, scope: dict, receive: Callable, send: Callable, script: str) -> None:
    """Run `app` for a page request and add `script` to an HTML reply that is not encoded (others pass as they
    are)."""
    start: dict | None = None
    chunks: list[bytes] = []

    async def rewrite(message: dict) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            headers = {k.lower(): v for k, v in message.get("headers", [])}
            if headers.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in headers:
                start = message
                return
        elif message["type"] == "http.response.body" and start is not None:
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = with_script(b"".join(chunks), script)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await send(message)

    await app(scope, receive, rewrite)


class PageScripts:
    """ASGI middleware: `scripts` (default: FRAME_GUARD_JS) at the end of the head of the studio's page."""

    def __init__(self, app: Callable, scripts: str = FRAME_GUARD_JS):
        self.app = app
        self.scripts = scripts

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if is_page(scope):
            await serve_with_script(self.app, scope, receive, send, self.scripts)
        else:
            await self.app(scope, receive, send)
