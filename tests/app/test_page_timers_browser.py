"""The page's timers in a real browser (`app/common/page_timers.py`; the wiring alone: tests/app/test_page_timers.py):
a studio of its own, no worker, its periods shortened by the config (`[studio] timer_fast_s / timer_slow_s`, here
FAST_SECONDS / SLOW_SECONDS) so that the test's quiet windows and its count of slow ticks take seconds, not a minute."""
from __future__ import annotations

import time

import pytest

from tests.paths import REPO
from tests.studio_process import CHROMIUM, animation_frames, held_event, serve_studio

pytestmark = [pytest.mark.browser, pytest.mark.slow]

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium chromium-driver` to run the browser tests",
                allow_module_level=True)
pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")

FAST_SECONDS = 1.0
SLOW_SECONDS = 2.5


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(url, store) of a studio without a worker (a queued round stays queued) or warm-up."""
    db_url = f"sqlite:///{tmp_path_factory.mktemp('page_timers') / 'studio.db'}"
    with serve_studio(session_home, db_url, REPO / "artifacts" / "page_timers_browser.log", "--no-worker",
                      "--no-warm", "--set", "policy.threads=1", "--set", f"studio.timer_fast_s={FAST_SECONDS}",
                      "--set", f"studio.timer_slow_s={SLOW_SECONDS}") as (url, _):
        from evorag_core.store import open_store

        store = open_store(db_url)
        yield url, store
        store.close()


@pytest.fixture()
def page(browser, studio):
    url, _ = studio
    pg = browser.new_page(viewport={"width": 1500, "height": 1000})
    pg.set_default_timeout(60_000)
    pg.goto(url)
    pg.wait_for_function("document.querySelector('#evo-question input') && "
                         "document.querySelector('#evo-question input').value.startsWith('demo-001')")
    yield pg
    pg.close()


def test_timers_tick_only_for_the_selected_tab_of_a_visible_page(page, studio):
    """app/common/page_timers.py: a hidden page sends no timer ticks; shown again, the header's ticks resume; the idle
    Training tab's timer alone ticks, at the slow rate; it ticks only while that tab is selected. Ticks are counted as
    the page's queue joins (nothing else runs on an idle page). Absences are checked over three slow periods: a loaded
    machine only sends fewer ticks, so it cannot fail them; each presence is awaited as a state; the slow rate is read
    as the mean gap over four ticks, which a loaded machine can only lengthen."""
    _, store = studio
    joins: list[float] = []
    page.on("request", lambda r: joins.append(time.monotonic()) if "/queue/join" in r.url else None)

    def ticks_after(t0: float) -> int:
        return sum(t >= t0 for t in joins)

    def await_tick(what: str) -> None:
        t0 = time.monotonic()
        deadline = t0 + 120
        while ticks_after(t0) == 0:
            assert time.monotonic() < deadline, f"no tick: {what}"
            page.wait_for_timeout(200)

    def set_visibility(state: str) -> None:
        page.evaluate("(s) => { Object.defineProperty(document, 'visibilityState', {value: s, configurable: true});"
                      " document.dispatchEvent(new Event('visibilitychange')); }", state)

    def quiet_window() -> bool:
        """No tick over three slow periods (a tick in flight when the page was hidden may still land before)."""
        t0 = time.monotonic()
        page.wait_for_timeout(3 * SLOW_SECONDS * 1000)
        return ticks_after(t0) == 0

    await_tick("the header's timer of a visible page")
    set_visibility("hidden")
    # the server stops the timers once the hidden event is through: a window without ticks comes within a few tries
    # on a loaded machine, never when the timers keep running (a tick in every window)
    assert any(quiet_window() for _ in range(6)), "a hidden page kept polling"
    # nothing pending, nothing animates: no animation frames at all (Gradio's status tracker of the page's
    # "Loading..." kept a 60-frames-a-second loop for the page's life; app/shell/page_scripts.py FRAME_GUARD_JS)
    page.wait_for_function("!document.querySelector('[data-testid=\"status-tracker\"] .progress-text')")
    assert page.evaluate("window.__evoFrameGuard.dropped") >= 1, "no status-tracker loop was ended: see FRAME_GUARD_JS"
    assert animation_frames(page, 2.0) == 0
    # ... while a pending event's tracker still counts its time (the Reset's event held in the page until released)
    tracker = "document.querySelector('[data-testid=\"status-tracker\"] .progress-text')"
    with held_event(page, "evo-reset"):
        page.wait_for_function(f"{tracker} && /[0-9]s/.test({tracker}.innerText)")
        counted = page.evaluate(f"{tracker}.innerText")
        page.wait_for_function(f"(t) => {tracker} && {tracker}.innerText !== t", arg=counted)
    page.wait_for_function(f"!{tracker}")
    set_visibility("visible")
    await_tick("the header's timer once the page is shown again")

    # the idle Training tab (no round queued or running): one timer, at the slow rate
    assert not store.list_rounds(limit=1)
    page.get_by_role("tab", name="Training").click()
    # the tab's select event draws the rounds box ("No rounds yet." or the table #evo-rounds) once; then count
    page.wait_for_function("(document.querySelector('#evo-rounds-box') || {innerText: ''}).innerText.trim() !== ''")
    t0 = time.monotonic()
    deadline = t0 + 300
    while ticks_after(t0) < 5:
        assert time.monotonic() < deadline, "the Training tab's timer stopped"
        page.wait_for_timeout(500)
    ticks = [t for t in joins if t >= t0][:5]
    mean_gap = (ticks[-1] - ticks[0]) / 4
    assert mean_gap >= (FAST_SECONDS + SLOW_SECONDS) / 2, f"an idle Training tab polled every {mean_gap:.1f} s"

    # a round queued after the tab was opened appears in its table (the tab's select event drew the table before;
    # only the timer redraws it)
    rows = "document.querySelectorAll('#evo-rounds tbody tr').length"
    before = page.evaluate(rows)
    store.enqueue_round("dpo", {"pairs": 1})
    page.wait_for_function(f"{rows} > {before}", timeout=120_000)
    # on the Episode tab the Training tab's timer stops: only the header's ticks (at most one per fast period)
    page.get_by_role("tab", name="Episode").click()

    def header_only_window() -> bool:
        """At most the header's ticks over four fast periods (the Training tab's timer would add as many)."""
        t0 = time.monotonic()
        page.wait_for_timeout(4 * FAST_SECONDS * 1000)
        return ticks_after(t0) <= 4 + 1

    assert any(header_only_window() for _ in range(4)), "the Training tab's timer kept ticking on the Episode tab"
