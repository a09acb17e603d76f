"""app/shell/page_scripts.py: the page's HTML gets the scripts at the end of its head, with a right content-length,
whatever chunks the app sent it in; other routes, other methods, other content types and encoded replies pass as they
are. The guard's effect in a real browser: tests/app/test_studio_browser.py (timers test)."""
from __future__ import annotations

import asyncio

import pytest

from app.shell.page_scripts import FRAME_GUARD_JS, PageScripts, is_page, with_script

PAGE = (b'<html><head><title>t</title><script type="module" src="./assets/index.js"></script></head>'
        b"<body></body></html>")


def _app(body: bytes, content_type: bytes = b"text/html; charset=utf-8", encoding: bytes | None = None,
         chunks: int = 1):
    async def app(scope, receive, send):
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        if encoding:
            headers.append((b"content-encoding", encoding))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        size = -(-len(body) // chunks)
        parts = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
        for i, part in enumerate(parts):
            await send({"type": "http.response.body", "body": part, "more_body": i < len(parts) - 1})
    return app


def _call(app, path: str = "/", method: str = "GET", root_path: str = "") -> tuple[dict, bytes]:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "root_path": root_path, "headers": []}
    asyncio.run(PageScripts(app, "<script>x()</script>")(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return dict(start["headers"]), b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.mark.parametrize("chunks", [1, 3])
def test_the_page_gets_the_script_at_the_end_of_its_head_and_a_right_length(chunks):
    headers, body = _call(_app(PAGE, chunks=chunks))
    assert body == PAGE.replace(b"</head>", b"<script>x()</script></head>")
    assert int(headers[b"content-length"]) == len(body)


@pytest.mark.parametrize("path,method,kind,encoding", [
    ("/config", "GET", b"text/html", None),              # not the page
    ("/", "POST", b"text/html", None),                   # not a GET
    ("/", "GET", b"application/json", None),            # not HTML
    ("/", "GET", b"text/html", b"gzip"),                 # encoded: left alone
])
def test_everything_else_passes_unchanged(path, method, kind, encoding):
    headers, body = _call(_app(PAGE, content_type=kind, encoding=encoding), path=path, method=method)
    assert body == PAGE and int(headers[b"content-length"]) == len(PAGE)


def test_page_routes_and_a_page_without_a_head():
    assert is_page({"type": "http", "method": "GET", "path": "/"})
    assert is_page({"type": "http", "method": "GET", "path": "/studio/", "root_path": "/studio"})
    assert not is_page({"type": "http", "method": "GET", "path": "/gradio_api/queue/join"})
    assert not is_page({"type": "websocket", "method": "GET", "path": "/"})
    assert with_script(b"<p>no head</p>", FRAME_GUARD_JS) == b"<p>no head</p>"
    assert FRAME_GUARD_JS.startswith('<script id="evo-frame-guard-js">') and FRAME_GUARD_JS.endswith("</script>")
