"""`evorag studio` as a subprocess for the browser tests: a free localhost port, the test's home and database, the
log in a file; `serve_studio` yields the URL once the page is served and stops the process after."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from evorag_core.procs import free_port
from tests.paths import DEMO, SHOTS

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# The studio must serve its page within START_CPU_S seconds of its own CPU time (imports, model and index loading):
# a budget in CPU time, not wall time, so that a loaded machine, which gives the process less CPU, does not fail the
# test. START_STALL_S of wall time without the process using any CPU means it hangs.
START_CPU_S = 240
START_STALL_S = 300

# Test pages run without CSS animations and transitions: a pending event's spinner and progress bar otherwise animate
# every frame, which headless Chromium's GPU process composites in software (tests/app/test_studio_grading_browser.py:
# its GPU process 19.6-20.7 CPU-s -> 4.3; the whole suite's Chromium 531 -> 494 CPU-s). What the tests read and click
# is the same; the idle-tab and tab-switch benches (bench/) load pages as a person's browser does, animations on.
STILL_JS = """document.addEventListener('DOMContentLoaded', () => {
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after { animation: none !important; transition: none !important; }';
  document.head.appendChild(style);
});"""


@contextmanager
def serve_studio(home: Path, db_url: str, log_path: Path, *args: str, env: dict[str, str] | None = None
                 ) -> Iterator[tuple[str, float]]:
    """(url, seconds from start to the first served page) of `evorag studio --home home --db db_url *args`, with
    `env` added to its environment (e.g. a test hold point, `evorag_core.test_hooks`); it fails when the studio has used
    START_CPU_S of CPU time, or none for START_STALL_S, without serving the page (a budget in CPU time: imports alone
    take minutes of wall time on a loaded machine)."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, EVORAG_HOME=str(home), EVORAG_DB_URL=db_url, GRADIO_ANALYTICS_ENABLED="False",
               **(env or {}))
    cmd = [sys.executable, "-m", "evorag_core.cli.main", "studio", "--host", "127.0.0.1", "--port", str(port),
           "--home", str(home), "--db", db_url, *args]
    with log_path.open("wb") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    usage = _CpuWatch(proc.pid)
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
            problem = usage.problem()
            if problem:
                pytest.fail(f"the studio did not serve {url}: {problem}; see {log_path}")
            time.sleep(0.2)
        yield url, time.perf_counter() - start
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class _CpuWatch:
    """The CPU seconds a process (and its children) has used, and how long it has used none."""

    def __init__(self, pid: int):
        import psutil

        self.proc = psutil.Process(pid)
        self.used = 0.0
        self.last_change = time.perf_counter()

    def problem(self) -> str | None:
        import psutil

        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
            used = sum(sum(p.cpu_times()[:2]) for p in procs)
        except psutil.Error:
            return None  # it just exited: the caller's poll() reports that
        if used > self.used:
            self.used, self.last_change = used, time.perf_counter()
        if self.used > START_CPU_S:
            return f"it used {self.used:.0f} s of CPU time (budget {START_CPU_S} s)"
        if time.perf_counter() - self.last_change > START_STALL_S:
            return f"it used no CPU for {START_STALL_S} s (hung)"
        return None


@contextmanager
def chromium() -> Iterator:
    """Debian's headless Chromium under Playwright (never a downloaded browser), its pages without CSS animations
    (`StillBrowser`); closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield StillBrowser(browser)
        finally:
            browser.close()


class StillBrowser:
    """A Playwright browser whose new pages and contexts load `STILL_JS` (no CSS animations); the rest as is."""

    def __init__(self, browser) -> None:
        self._browser = browser

    def new_page(self, **kwargs):
        page = self._browser.new_page(**kwargs)
        page.add_init_script(STILL_JS)
        return page

    def new_context(self, **kwargs):
        context = self._browser.new_context(**kwargs)
        context.add_init_script(STILL_JS)
        return context

    def __getattr__(self, name: str):
        return getattr(self._browser, name)


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


def choose(page, elem_id: str, text: str) -> None:
    """Pick the option containing `text` in a Gradio dropdown."""
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(text)
    page.locator("[role=option]", has_text=text).first.click()


# Holds the queue/join request of the event that the button with this elem_id triggers until
# window.__evoRelease() runs: a test can then act while that event is known to be pending (a fast model's reply
# would otherwise race the test's next step). Gradio's client calls the global fetch at call time.
_HOLD_EVENT_JS = """(elemId) => {
  const cfg = window.gradio_config;
  const button = cfg.components.find(c => c.props && c.props.elem_id === elemId).id;
  const fnIds = cfg.dependencies.filter(d => d.targets.some(t => t[0] === button)).map(d => d.id);
  const real = window.fetch;
  window.__evoHeld = false;
  window.fetch = (url, init) => {
    let fn = null;
    try { fn = JSON.parse(init.body).fn_index; } catch (e) {}
    if (!String(url).includes('/queue/join') || !fnIds.includes(fn)) return real(url, init);
    window.fetch = real;
    window.__evoHeld = true;
    return new Promise(resolve => { window.__evoRelease = () => resolve(real(url, init)); });
  };
}"""


@contextmanager
def held_event(page, elem_id: str) -> Iterator[None]:
    """Click the button `elem_id` and keep its event from reaching the server for the body of the with block."""
    page.evaluate(_HOLD_EVENT_JS, elem_id)
    page.click(f"#{elem_id}")
    page.wait_for_function("window.__evoHeld === true")
    try:
        yield
    finally:
        page.evaluate("window.__evoRelease()")


def animation_frames(page, seconds: float) -> int:
    """How many requestAnimationFrame callbacks the page ran over `seconds` (a Chromium trace of its renderer)."""
    cdp = page.context.new_cdp_session(page)
    events: list[dict] = []
    done: list[bool] = []
    cdp.on("Tracing.dataCollected", lambda p: events.extend(p["value"]))
    cdp.on("Tracing.tracingComplete", lambda p: done.append(True))
    cdp.send("Tracing.start", {"categories": "devtools.timeline", "transferMode": "ReportEvents"})
    page.wait_for_timeout(seconds * 1000)
    cdp.send("Tracing.end")
    while not done:
        page.wait_for_timeout(100)
    cdp.detach()
    return sum(e.get("name") == "FireAnimationFrame" for e in events)


def shot(page, name: str) -> None:
    """A full-page screenshot under artifacts/screenshots/NAME.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def text_of(elem_id: str) -> str:
    """A JS expression: the element's innerText, or '' while it is not on the page."""
    return f"(document.querySelector('#{elem_id}') || {{innerText: ''}}).innerText"


def store_oracle_run(home: Path, db_url: str, limit: int = 3) -> None:
    """An `evorag eval` run of the oracle on the demo's first `limit` questions, stored in `db_url` (it also builds
    the demo index in `home`): what the Traces and Evaluate tabs list before a studio starts."""
    from evorag_core.cli.main import main as cli_main

    assert cli_main(["eval", "--method", "oracle", "--limit", str(limit), "--data", str(DEMO), "--home", str(home),
                     "--db", db_url, "--json", "--no-progress"]) == 0
