"""`evorag studio` as a subprocess for the browser tests: a free localhost port, the test's home and database, the
log in a file; `serve_studio` yields the URL once the page is served and stops the process after."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
START_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve_studio(home: Path, db_url: str, log_path: Path, *args: str,
                 start_timeout_s: float = START_TIMEOUT_S) -> Iterator[tuple[str, float]]:
    """(url, seconds from start to the first served page) of `evorag studio --home home --db db_url *args`;
    `start_timeout_s` bounds a studio that never starts (raise it on a loaded machine)."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, EVORAG_HOME=str(home), EVORAG_DB_URL=db_url, GRADIO_ANALYTICS_ENABLED="False")
    cmd = [sys.executable, "-m", "evorag_core.cli", "studio", "--host", "127.0.0.1", "--port", str(port),
           "--home", str(home), "--db", db_url, *args]
    with log_path.open("wb") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the studio exited with code {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.perf_counter() - start > start_timeout_s:
                pytest.fail(f"the studio did not serve {url} within {start_timeout_s:.0f} s; see {log_path}")
            time.sleep(0.2)
        yield url, time.perf_counter() - start
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def chromium() -> Iterator:
    """Debian's headless Chromium under Playwright (never a downloaded browser); closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def demo_page(browser, url: str, height: int = 1000) -> Iterator:
    """A new page on the studio at `url`, returned once the demo data file is loaded (the first load builds the
    demo's retrieval index, hence the long default timeout); closed on exit."""
    page = browser.new_page(viewport={"width": 1500, "height": height})
    page.set_default_timeout(120_000)
    page.goto(url)
    page.wait_for_function("document.querySelector('#evo-data-info') && "
                           "document.querySelector('#evo-data-info').innerText.includes('demo: 52 questions')")
    try:
        yield page
    finally:
        page.close()
