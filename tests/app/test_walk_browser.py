"""The studio walk's small defects (issue #46 item 7) in a real browser: a studio started on a database that already
holds an `evorag eval` run (as if the studio had been restarted since) and a pair with the real agent prompt.

- Pairs: the edit panel shows the prompt as its conversation (roles; instructions and demonstration folded), never
  the chat template's `<|im_start|>` text.
- Evaluate: the run stored before this studio started is listed, and its questions open.
- Errors: a failed action leaves 'Last error at HH:MM:SS: ...' in its tab after the toast is gone; the next success
  empties it.
- Deep link: `?episode=N` scrolls the opened trace into view.
- Answer pairs: "Make answer pairs" reads the stored (non-evaluation) episode and queues pairs with source answer;
  Stop (while the run is held at its first of two episodes) keeps what was queued, and a second click goes on.

Screenshots go to $EVORAG_SHOTS, else artifacts/screenshots/walk_*.png. Every wait is on page state.
"""
from __future__ import annotations

import pytest

from evorag_core.store import TraceFilter, open_store
from evorag_core.store.records import Step
from tests.app.test_pairs_view import agent_prompt
from tests.paths import DEMO, REPO
from tests.studio_process import CHROMIUM, store_oracle_run, choose, serve_studio, shot, text_of

pytestmark = [pytest.mark.browser, pytest.mark.slow]

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` to run the browser tests",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(url, db url, run name, pair id): the eval run and the pair are stored first, then the studio starts."""
    db_url = f"sqlite:///{tmp_path_factory.mktemp('walk_db') / 'studio.db'}"
    store_oracle_run(session_home, db_url)
    with open_store(db_url) as s:
        run = s.eval_runs()[0].run
        pair = s.add_pair(agent_prompt(), "SEARCH: Ansel Travine", "ANSWER: Paris", source="rollout",
                          stage="discovery")
        for _ in range(2):  # two finished rollout-like episodes (not an evaluation's): what "Make answer pairs" reads
            s.add_episode(question_id="demo-001", dataset="demo", question="On which river is the birthplace of the "
                          "chemist Ansel Travine?", policy="lm", stage="refinement", schedule="time-dynamic",
                          config={"data": str(DEMO), "t_max": 5}, source="rollout",
                          steps=(Step(1, "SEARCH", "Ansel Travine", ("demo:demo-001:2",)),
                                 Step(2, "SEARCH", "Mirrow", ("demo:demo-001:4",)), Step(3, "ANSWER", "Sable River")))
    with serve_studio(session_home, db_url, REPO / "artifacts" / "walk_browser.log",
                      "--no-worker", "--no-warm", "--set", "policy.threads=1",
                      env={"EVORAG_TEST_HOLD": "pairs:answers"}) as (url, _):
        yield url, db_url, run, pair


@pytest.fixture()
def page(browser, studio):
    pg = browser.new_page(viewport={"width": 1400, "height": 900})
    pg.set_default_timeout(120_000)
    pg.goto(studio[0])
    pg.wait_for_selector("button[role=tab]")
    yield pg
    pg.close()


def open_pairs(page) -> None:
    page.get_by_role("tab", name="Pairs").click()
    page.wait_for_function("document.querySelector('#evo-pair-total') !== null")


def test_the_pair_prompt_is_shown_as_a_conversation(page, studio):
    open_pairs(page)
    choose(page, "evo-pair-pick", f"#{studio[3]} ")
    page.wait_for_function("document.querySelector('#evo-pair-prompt')?.dataset.format === 'chatml'")
    box = page.locator("#evo-pair-prompt")
    text = box.inner_text()
    assert "im_start" not in text and "im_end" not in text
    assert "Where was <Ansel> Travine born?" in text  # the state, open (and not read as HTML)
    assert box.locator("details").count() == 2 and box.locator("details[open]").count() == 0
    assert not page.locator("#evo-pair-prompt details[data-part=demo] .evo-turn").first.is_visible()
    box.scroll_into_view_if_needed()
    shot(page, "walk_01_pair_prompt")
    page.locator("#evo-pair-prompt details[data-part=demo] summary").click()  # the demonstration, unfolded
    demo = page.locator("#evo-pair-prompt details[data-part=demo]")
    assert "Eiffel Tower" in demo.inner_text() and demo.locator(".evo-turn-role").first.inner_text() == "USER"
    shot(page, "walk_02_pair_prompt_demo_open")


def test_answer_pairs_stop_and_go_on(page, studio):
    """"Make answer pairs" on the two stored rollout episodes (the evaluation run's are not read), held at its first
    episode (hold point pairs:answers) until Stop: the run ends after that episode, its pairs queued; a second click
    reads the other one. The table lists the pairs with source answer."""
    open_pairs(page)
    page.locator("#evo-answer-pairs-box").get_by_text("Answer pairs from the stored episodes").click()
    page.click("#evo-answer-pairs")
    page.wait_for_function(f"{text_of('evo-answer-pairs-msg')}.includes('Reading the stored')")  # held at episode 1
    page.click("#evo-answer-pairs-stop")
    page.wait_for_function(f"{text_of('evo-answer-pairs-msg')}.includes('Stopped after')")
    msg = page.locator("#evo-answer-pairs-msg").inner_text()
    with open_store(studio[1]) as s:
        made = s.list_pairs(source="answer", limit=None)
    assert made and msg.startswith(f"Stopped after 1 episode: {len(made)} answer pair"), msg
    page.wait_for_function(f"{text_of('evo-pairs')}.includes('answer')")
    page.locator("#evo-answer-pairs-box").scroll_into_view_if_needed()
    shot(page, "walk_06_answer_pairs_stopped")
    page.click("#evo-answer-pairs")
    page.wait_for_function(f"{text_of('evo-answer-pairs-msg')}.includes('paired before')")
    msg = page.locator("#evo-answer-pairs-msg").inner_text()
    assert "answer pair" in msg and "from 1 state of 2 episodes (1 paired before" in msg, msg
    shot(page, "walk_07_answer_pairs_again")


def test_a_run_stored_before_the_studio_started_is_listed_and_opens(page, studio):
    _, _, run, _ = studio
    page.get_by_role("tab", name="Evaluate").click()
    page.wait_for_function(f"{text_of('evo-eval-summary')}.includes({run!r})")
    row = page.locator("#evo-eval-summary tbody tr").first.inner_text()
    assert run in row and "\t3\t1\t1\t" in row  # n = 3, EM = 1, F1 = 1
    choose(page, "evo-eval-run-pick", run)
    choose(page, "evo-eval-question", "demo-002")
    page.wait_for_function("document.querySelector('#evo-trace-box #evo-trace-steps') !== null")
    assert page.locator("#evo-drill-trace-link").get_attribute("href").startswith("?episode=")
    shot(page, "walk_03_evaluate_stored_run")


def test_an_error_stays_in_its_tab_until_the_next_success(page, studio):
    open_pairs(page)
    page.click("#evo-pair-save")  # no pair picked
    page.wait_for_function(f"{text_of('evo-last-error-pairs')}.includes('choose a pair to edit')")
    toast = page.locator(".toast-body").first
    toast.wait_for()
    page.locator("[data-testid=toast-close]").first.click()  # the toast goes away (as it does by itself after 15 s) ...
    toast.wait_for(state="detached")
    line = page.locator("#evo-last-error-pairs").inner_text()
    assert line.startswith("Last error at ") and line.endswith(": choose a pair to edit")  # ... the line stays
    shot(page, "walk_04_last_error")
    page.get_by_role("tab", name="Evaluate").click()  # another tab's line: untouched (and not shown while empty)
    page.wait_for_selector("#evo-last-error-evaluate", state="attached")
    assert page.evaluate("document.querySelector('#evo-last-error-evaluate').textContent.trim()") == ""
    assert not page.locator("#evo-last-error-evaluate").is_visible()
    open_pairs(page)
    assert "choose a pair to edit" in page.locator("#evo-last-error-pairs").inner_text()  # still there
    choose(page, "evo-pair-pick", f"#{studio[3]} ")  # the next action of the tab that works clears it
    page.wait_for_function(f"{text_of('evo-last-error-pairs')}.trim() === ''")
    assert "Traceback" not in page.content()


def test_a_deep_link_scrolls_to_the_opened_trace(browser, studio):
    url, db_url, run, _ = studio
    with open_store(db_url) as s:
        target = s.search_traces(TraceFilter(source="eval", run=run, text="demo-002")).rows[0]
    pg = browser.new_page(viewport={"width": 1400, "height": 800})
    pg.set_default_timeout(120_000)
    try:
        pg.goto(f"{url}?episode={target.id}")
        pg.wait_for_function(f"document.querySelector('#evo-trace-head')?.dataset.episode === '{target.id}'")
        pg.wait_for_function("window.scrollY > 200")  # the page moved down to the trace ...
        top = pg.evaluate("document.querySelector('#evo-trace-head-box').getBoundingClientRect().top")
        assert -2 <= top < 200  # ... whose head is at the top of the view (sub-pixel rounding: -0.44 seen)
        pg.screenshot(path=str(_shots() / "walk_05_deep_link.png"))  # the viewport, as the user sees it
    finally:
        pg.close()


def _shots():
    from tests.paths import SHOTS

    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS
