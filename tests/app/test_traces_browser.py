"""The Traces tab in a real browser (issue 24 item 1): an `evorag eval` run of the oracle on the first three demo
questions is stored as traces; in the studio (subprocess, Playwright through Debian's Chromium) its episode is found
by filter (method, outcome, text), opened from its row (steps table, passages, link), and opened again by deep link
(`?episode=ID` selects the Traces tab). Bad links and a malformed filter give a message in the page. The question link
(`?data=FILE&question=ID`) selects the question in the Episode tab.

Screenshots go to $EVORAG_SHOTS, else artifacts/screenshots/traces_*.png. Every wait is on page state.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.paths import REPO, SHOTS
from evorag_core.store import TraceFilter, open_store
from tests.studio_process import CHROMIUM, store_oracle_run, choose, demo_page, serve_studio

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DEMO = REPO / "data" / "demo" / "demo.jsonl"

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` to run the browser tests",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(url, db url): the eval run is stored first (it builds the demo index in the shared home), then the studio."""
    db_url = f"sqlite:///{tmp_path_factory.mktemp('traces_db') / 'studio.db'}"
    store_oracle_run(session_home, db_url)
    with serve_studio(session_home, db_url, REPO / "artifacts" / "traces_browser.log",
                      "--no-worker", "--no-warm", "--set", "policy.threads=1") as (url, _):
        yield url, db_url


def shot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def text_of(css: str) -> str:
    return f"(document.querySelector({css!r}) || {{innerText: ''}}).innerText"


def test_find_an_eval_episode_by_filter_open_it_and_open_it_by_deep_link(browser, studio):
    url, db_url = studio
    with open_store(db_url) as s:
        stored = s.search_traces(TraceFilter(source="eval", text="demo-002"))
        assert stored.total == 1
        target = stored.rows[0]
        assert target.em == 1.0  # the oracle answers demo-002 right
    with demo_page(browser, url, height=1300) as page:
        page.get_by_role("tab", name="Traces").click()
        page.wait_for_function(f"{text_of('#evo-traces-count')}.includes('of 3')")
        choose(page, "evo-tf-policy", target.policy)
        choose(page, "evo-tf-outcome", "correct")
        page.locator("#evo-tf-text textarea, #evo-tf-text input").first.fill(target.question[:25].lower())
        page.click("#evo-traces-search")
        page.wait_for_function(f"{text_of('#evo-traces-count')}.includes('of 1 ')")
        cell = page.locator("#evo-traces-table [role=gridcell]", has_text="demo-002").first
        cell.wait_for()
        shot(page, "traces_01_list_filtered")

        cell.click()
        page.wait_for_function(f"document.querySelector('#evo-trace-head')?.dataset.episode === '{target.id}'")
        rows = page.locator("#evo-trace-steps tbody tr")
        assert rows.count() == target.n_steps and target.n_steps >= 2
        assert "ANSWER" in rows.last.inner_text()
        assert page.locator("#evo-trace-passages li").count() >= 1
        link = page.locator("#evo-trace-link").inner_text()
        assert link.endswith(f"?episode={target.id}")
        head = page.locator("#evo-trace-head").inner_text()
        assert "eval" in head and target.question in head and "EM 1" in head
        page.locator("#evo-trace-head").scroll_into_view_if_needed()
        shot(page, "traces_02_opened")

        page.goto(f"{url}?episode={target.id}")
        page.wait_for_function(f"document.querySelector('#evo-trace-head')?.dataset.episode === '{target.id}'")
        assert page.get_by_role("tab", name="Traces").get_attribute("aria-selected") == "true"
        shot(page, "traces_03_deep_link")

        page.goto(f"{url}?episode=999999")
        page.wait_for_function(f"{text_of('#evo-trace-msg')}.includes('there is no trace #999999')")
        page.goto(f"{url}?episode=abc")
        page.wait_for_function(f"{text_of('#evo-trace-msg')}.includes('is not a trace id')")
        shot(page, "traces_04_bad_link")

        date_box = page.locator("#evo-tf-from textarea, #evo-tf-from input").first
        date_box.fill("2026-13-45")
        date_box.press("Enter")
        page.wait_for_function(f"{text_of('#evo-traces-summary')}.includes('write it as YYYY-MM-DD')")
        assert "Traceback" not in page.content()


def test_question_link_selects_the_question_in_the_episode_tab(browser, studio):
    url, _ = studio
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(f"{url}?data={DEMO}&question=demo-003")
    page.wait_for_function(f"{text_of('#evo-data-info')}.includes('Opened from a link: question demo-003')")
    assert page.locator("#evo-question input").input_value().startswith("demo-003")
    page.goto(f"{url}?data={DEMO}&question=no-such-question")
    page.wait_for_function(f"{text_of('#evo-data-info')}.includes('The link was not opened')")
    assert "no-such-question" in page.locator("#evo-data-info").inner_text()
    page.close()
