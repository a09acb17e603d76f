"""The studio in a real browser: `evorag studio` as a subprocess on a free localhost port with a temporary home
and database, driven by Playwright through Debian's Chromium. Screenshots of each stage go to
artifacts/screenshots/, timings (cold start, UI step) to artifacts/studio_timings.json.
"""
from __future__ import annotations

import json
import os
import statistics
import time
import urllib.request

import pytest

from tests.paths import REPO
from tests.studio_process import CHROMIUM, choose, serve_studio, shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TIMINGS = REPO / "artifacts" / "studio_timings.json"

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium chromium-driver` to run the browser tests",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


def _record_timing(key: str, value) -> None:
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    data[key] = value
    TIMINGS.write_text(json.dumps(data, indent=2))


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(url, store) of a running studio; the test process opens the same SQLite database."""
    db_url = f"sqlite:///{tmp_path_factory.mktemp('studio_browser') / 'studio.db'}"
    # promotion.evaluate off: this module's round is activated by hand; the gate's queued evaluation (minutes of
    # agent episodes on the worker) is covered by test_promotion_browser.py and tests/promotion/test_gate.py
    with serve_studio(session_home, db_url, REPO / "artifacts" / "studio_browser.log",
                      "--set", "promotion.evaluate=false") as (url, seconds):
        _record_timing("cold_start_to_served_page_s", round(seconds, 2))
        _record_timing("cold_start_loadavg_1m", os.getloadavg()[0])
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
    pg.wait_for_selector("#evo-reset")
    pg.wait_for_function("document.querySelector('#evo-question input') && "
                         "document.querySelector('#evo-question input').value.startsWith('demo-001')")
    # the background warm-up (index, LM) runs in the studio process; timings are taken once it is done
    pg.wait_for_function("document.querySelector('#evo-live-adapter') && !document.querySelector('#evo-warming')",
                         timeout=300_000)
    yield pg
    pg.close()


def choose_when_listed(page, elem_id: str, text: str, deadline_s: float = 120.0) -> None:
    """Pick the option containing `text` once the dropdown lists it (its choices come from a server event that
    may still be running): the list is opened and filtered until the option is there, then it is clicked."""
    box = page.locator(f"#{elem_id} input")
    option = page.locator("[role=option]", has_text=text).first
    start = time.monotonic()
    while True:
        box.click()
        box.fill(text)
        try:
            option.wait_for(state="visible", timeout=2_000)
            option.click()
            return
        except sync_api.TimeoutError:
            page.keyboard.press("Escape")
            if time.monotonic() - start > deadline_s:
                raise AssertionError(f"{text!r} never appeared in #{elem_id} within {deadline_s:.0f} s") from None


def step_rows(page) -> int:
    return page.locator("#evo-steps tbody tr").count()


def test_step_an_episode_three_times_shows_signals_table_and_weights_chart(page):
    page.click("#evo-reset")
    page.wait_for_selector("#evo-status")
    times = []
    for i in range(1, 4):
        t0 = time.perf_counter()
        page.click("#evo-step")
        page.wait_for_function(f"document.querySelectorAll('#evo-steps tbody tr').length === {i}")
        times.append(time.perf_counter() - t0)
    _record_timing("ui_step_oracle_s", {"median": round(statistics.median(times), 3), "all": [round(t, 3) for t in times],
                                        "loadavg_1m": os.getloadavg()[0]})
    headers = page.locator("#evo-steps thead th").all_inner_texts()
    assert headers[:3] == ["t", "action", "sub-query / answer"]
    assert headers[3:10] == ["ret", "act", "dup", "bt", "ref", "step", "ans"]
    rows = page.locator("#evo-steps tbody tr")
    assert rows.nth(0).locator("td").nth(1).inner_text() == "SEARCH"
    assert rows.nth(0).locator("td").nth(3).inner_text() == "+1.00"  # ret: gold retrieved
    assert rows.nth(2).locator("td").nth(1).inner_text() == "ANSWER"
    assert page.locator("#evo-return").inner_text() == rows.nth(2).locator("td").nth(11).inner_text()
    weights = page.locator("#evo-weights .js-plotly-plot")
    weights.wait_for()
    # the seven weights' schedule lines, and on each the markers of the weights the three steps were scored with
    assert weights.locator("g.scatterlayer g.trace").count() == 14
    page.wait_for_function("document.querySelectorAll('#evo-weights g.scatterlayer g.trace path.point').length "
                           "=== 7 * 3")  # the chart is redrawn after the table: wait for the third step's markers
    assert "t = 3" in weights.inner_text()
    assert page.locator("#evo-contrib .js-plotly-plot g.barlayer").count() == 1
    assert page.locator("#evo-passages-box .badge.gold").count() >= 1
    shot(page, "01_episode_three_steps")


def test_override_a_refusal_and_see_the_signal_change(page):
    """demo-004 is unanswerable: the oracle refuses, the gold judge says unanswerable (ref = +1, R_1 = 0.48);
    overriding to 'answerable' flips ref to -1 and R_1 to -0.52."""
    choose(page, "evo-question", "demo-004")
    page.click("#evo-reset")
    page.wait_for_function("document.querySelector('#evo-status') && "
                           "document.querySelector('#evo-status').innerText.includes('demo-004')")
    page.click("#evo-step")
    page.wait_for_selector("#evo-verdicts")
    verdict_row = page.locator("#evo-verdicts tbody tr").first
    assert "unanswerable" in verdict_row.inner_text() and "gold" in verdict_row.inner_text()
    ref_cell = page.locator("#evo-steps tbody tr").first.locator("td").nth(7)
    assert ref_cell.inner_text() == "+1.00"
    page.locator("#evo-verdict input[value='answerable']").check()
    page.click("#evo-override")
    page.wait_for_function("document.querySelector('#evo-verdicts') && "
                           "document.querySelector('#evo-verdicts').innerText.includes('human')")
    assert page.locator("#evo-steps tbody tr").first.locator("td").nth(7).inner_text() == "-1.00"
    assert page.locator("#evo-return").inner_text() == "-0.520"
    assert "Override stored" in page.locator("#evo-message").inner_text()
    shot(page, "02_refusal_override")


def test_passage_and_question_text_is_never_rendered_as_html(page):
    free = page.get_by_label("…or a free question over this file's corpus")
    free.fill('Where is <img src=x onerror="window.__pwned=1"> Mirrow?')
    page.click("#evo-reset")
    page.wait_for_function("document.querySelector('#evo-status') && "
                           "document.querySelector('#evo-status').innerText.includes('Mirrow?')")
    assert page.locator("#evo-status img").count() == 0
    assert "<img src=x" in page.locator("#evo-status").inner_text()
    assert page.evaluate("window.__pwned === undefined")


def test_queued_pairs_are_listed_with_counts_and_can_be_discarded(page, studio):
    _, store = studio
    pid = store.add_pair("state", "SEARCH: Mirrow", "SEARCH: Ansel", source="human", annotator="alice",
                         stage="discovery")
    page.get_by_role("tab", name="Pairs").click()
    page.click("#evo-pairs-refresh")
    page.wait_for_function("document.querySelector('#evo-pairs') && "
                           "document.querySelector('#evo-pairs').innerText.includes('SEARCH: Mirrow')")
    assert "alice" in page.locator("#evo-pairs").inner_text()
    choose(page, "evo-pair-pick", f"#{pid} ")
    page.click("#evo-pair-discard")
    page.wait_for_function("document.querySelector('#evo-pairs').innerText.includes('discarded')")
    assert store.get_pair(pid).status == "discarded"
    shot(page, "03_pairs")


def test_sample_siblings_with_the_lm_and_queue_a_human_pair(page, studio):
    """LM policy: sample K = 6 candidates at t = 1 (temperature 2 so that they differ), pick two different ones and
    queue the pair: it is in the store as a human pair by the annotator, and in the Pairs tab. Then up to three
    timed LM steps."""
    pytest.importorskip("evorag_core.policy", reason="the LM policy package is not available")
    _, store = studio
    page.fill("#evo-annotator textarea, #evo-annotator input", "browser-annotator")
    choose(page, "evo-policy", "LM · base model")
    page.click("#evo-reset")
    page.wait_for_function("document.querySelector('#evo-status') && "
                           "document.querySelector('#evo-status').innerText.includes('LM')", timeout=300_000)
    page.locator("#evo-siblings").get_by_text("Sibling candidates and annotation").click()
    for elem, value in (("evo-seed", "11"), ("evo-k", "6"), ("evo-temp", "2")):
        page.locator(f"#{elem} input[type=number]").fill(value)
        page.locator(f"#{elem} input[type=number]").press("Tab")
    page.click("#evo-sample")
    page.wait_for_function("document.querySelectorAll('#evo-candidates .evo-card').length === 6", timeout=300_000)
    labels = page.eval_on_selector_all("#evo-candidates .evo-card", "els => els.map(e => e.dataset.completion)")
    j = next((j for j in range(1, 6) if labels[j] != labels[0]), None)
    if j is None:
        pytest.skip(f"all six sampled candidates were the same action: {labels[0]!r}")
    choose(page, "evo-preferred", "#1 ")
    choose(page, "evo-rejected", f"#{j + 1} ")
    page.click("#evo-queue-pair")
    page.wait_for_function("document.querySelector('#evo-pair-msg').innerText.includes('Queued human pair')")
    shot(page, "07_siblings_and_pair")
    pair_id = int(page.locator("#evo-pair-msg").inner_text().split("#")[1].split(":")[0])
    pair = store.get_pair(pair_id)
    assert pair.source == "human" and pair.annotator == "browser-annotator" and pair.status == "queued"
    assert pair.prompt.endswith("<|im_start|>assistant\n") and (pair.chosen, pair.rejected) == (labels[0], labels[j])

    times = []
    for i in range(1, 4):
        t0 = time.perf_counter()
        page.click("#evo-step")
        page.wait_for_function(f"document.querySelectorAll('#evo-steps tbody tr').length === {i}", timeout=300_000)
        times.append(time.perf_counter() - t0)
        if "done" in page.locator("#evo-status").inner_text():
            break
    _record_timing("ui_step_lm_s", {"median": round(statistics.median(times), 3), "all": [round(t, 3) for t in times],
                                    "loadavg_1m": os.getloadavg()[0]})
    shot(page, "07b_lm_steps")

    page.get_by_role("tab", name="Pairs").click()
    page.click("#evo-pairs-refresh")
    page.wait_for_function("document.querySelector('#evo-pairs') && "
                           "document.querySelector('#evo-pairs').innerText.includes('browser-annotator')")
    shot(page, "08_pairs_with_human_pair")


def _chatml(question: str, step: str) -> str:
    """A prompt in the policy model's chat format (what the LM policy's pairs hold)."""
    return (f"<|im_start|>system\nYou answer questions by searching Wikipedia.<|im_end|>\n<|im_start|>user\n"
            f"Question: {question}\n{step}Your action:<|im_end|>\n<|im_start|>assistant\n")


class _RoundWatch:
    """Follows a round until it ends. No deadline on the whole round: it fails only when the round stops moving - no
    change of status, attempt or reported progress (phase, step, loss) for `stall_s` - so a loaded machine that trains
    slowly does not fail it, while a dead or hung worker does, with the state it reached in the message."""

    def __init__(self, store, round_id: int, stall_s: float = 900.0):
        self.store, self.round_id, self.stall_s = store, round_id, stall_s
        self.round = store.get_round(round_id)
        self._state, self._moved = None, time.monotonic()

    def finished(self) -> bool:
        self.round = r = self.store.get_round(self.round_id)
        if r.status in ("succeeded", "failed", "cancelled"):
            return True
        state = (r.status, r.attempts, json.dumps(r.progress, sort_keys=True, default=str))
        if state != self._state:
            self._state, self._moved = state, time.monotonic()
        elif time.monotonic() - self._moved > self.stall_s:
            pytest.fail(f"round stopped moving for {self.stall_s:.0f} s: {self.describe()}")
        return False

    def describe(self) -> str:
        r = self.round
        return (f"round #{r.id} {r.status} (attempt {r.attempts}/{r.max_attempts}), progress {r.progress}, "
                f"heartbeat {r.heartbeat_at}, error {r.error!r}")


def _get_seconds(url: str, timeout: float = 60.0) -> float:
    """Seconds to answer a GET (the timeout itself when it did not answer in time: a measurement, not a crash)."""
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
    except TimeoutError:
        return timeout
    return time.perf_counter() - t0


def test_launch_a_tiny_round_see_it_complete_and_activate_its_adapter(page, studio):
    """Two human pairs, DPO, 1 epoch, at most 1 optimiser step: the studio's worker trains and registers
    adapter r<id>-dpo; the page shows it live; activating it changes the live name and the next LM episode uses it."""
    url, store = studio
    for q, good, bad in (("Where was Ansel Travine born?", "SEARCH: Ansel Travine", "ANSWER: Paris"),
                         ("On which river is Mirrow?", "SEARCH: Mirrow river", "REFUSE")):
        store.add_pair(_chatml(q, "Step 1 of 20. "), good, bad, source="human", annotator="fixture", stage="discovery")
    page.get_by_role("tab", name="Training").click()
    page.fill("#evo-n-pairs input", "2")
    page.fill("#evo-max-steps input", "1")
    choose(page, "evo-objective", "dpo")
    page.click("#evo-launch")
    page.wait_for_function("document.querySelector('#evo-launch-msg').innerText.includes('queued')")
    msg = page.locator("#evo-launch-msg").inner_text()
    round_id = int(msg.split("#")[1].split()[0])
    assert store.get_round(round_id).config["pairs"] == 2

    # while the worker trains: the page keeps answering (timed; the target, <= 1 s, is reported, not asserted,
    # since this machine may be shared)
    latencies = []
    watch = _RoundWatch(store, round_id)
    while not watch.finished():
        if watch.round.status == "running":
            latencies.append(_get_seconds(url + "config"))
            if len(latencies) == 3:
                shot(page, "04a_training_round_running")
        time.sleep(1.0)
    final = watch.round
    assert final.status == "succeeded", watch.describe()
    if latencies:
        _record_timing("request_during_training_s", {"max": round(max(latencies), 3),
                                                     "median": round(statistics.median(latencies), 3),
                                                     "n": len(latencies), "loadavg_1m": os.getloadavg()[0]})
    name = final.metrics["adapter"]
    page.wait_for_function("document.querySelector('#evo-round-progress').innerText.includes('succeeded')")
    page.wait_for_function(f"document.querySelector('#evo-adapters').innerText.includes('{name}')")
    shot(page, "04_training_round_done")

    assert page.locator("#evo-live-adapter").inner_text() != name
    choose(page, "evo-adapter-pick", name)
    page.click("#evo-activate")
    page.wait_for_function(f"document.querySelector('#evo-live-adapter').innerText === '{name}'")
    assert store.active_adapter().name == name
    shot(page, "05_adapter_live")

    page.get_by_role("tab", name="Episode").click()
    choose(page, "evo-policy", "LM · live adapter")
    page.click("#evo-reset")
    page.wait_for_function(f"document.querySelector('#evo-episode-adapter') && "
                           f"document.querySelector('#evo-episode-adapter').innerText === '{name}'",
                           timeout=300_000)
    page.click("#evo-step")
    page.wait_for_function("document.querySelectorAll('#evo-steps tbody tr').length === 1", timeout=300_000)
    shot(page, "05b_episode_with_live_adapter")


def test_errors_are_readable_and_the_app_keeps_running(page):
    """A script that is not JSON: the page shows the parser's message (no traceback); the next Reset works."""
    choose(page, "evo-policy", "script (JSON actions)")
    editor = page.locator("#evo-script .cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("search for it")
    page.click("#evo-reset")
    toast = page.locator(".toast-body").first
    toast.wait_for()
    text = toast.inner_text()
    assert "not valid JSON" in text and "Traceback" not in text
    assert "Error" not in page.locator("#evo-steps-box").inner_text()  # the outputs keep what they showed
    shot(page, "09_readable_error")
    choose(page, "evo-policy", "oracle (upper bound, reads gold)")
    # the pick is committed before Reset reads it (a Reset that still read "script" would fail again, silently)
    page.wait_for_function("document.querySelector('#evo-policy input').value.startsWith('oracle')")
    page.click("#evo-reset")
    page.wait_for_function("document.querySelector('#evo-status') && "
                           "document.querySelector('#evo-status').innerText.includes('oracle')")
    page.click("#evo-step")
    page.wait_for_function("document.querySelectorAll('#evo-steps tbody tr').length === 1")


def test_evaluate_two_runs_bootstrap_and_open_a_trace(page):
    """Oracle and a refuse-at-once script on demo[0:3]: EM 1 vs 0 on all three questions (A - B = +1)."""
    page.get_by_role("tab", name="Evaluate").click()
    page.fill("#evo-eval-count input", "3")
    page.click("#evo-eval-run")
    page.wait_for_function("document.querySelector('#evo-eval-summary') && "
                           "document.querySelector('#evo-eval-summary').innerText.includes('oracle')")
    row = page.locator("#evo-eval-summary tbody tr").first.inner_text()
    assert "\t3\t1\t1\t" in row  # n = 3, EM = 1, F1 = 1
    choose(page, "evo-eval-method", "script (JSON actions)")
    editor = page.locator("#evo-eval-script .cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.type('[{"action": "REFUSE"}]')
    page.click("#evo-eval-run")
    page.wait_for_function("document.querySelectorAll('#evo-eval-summary tbody tr').length === 2")
    page.click("#evo-compare")
    page.wait_for_function("document.querySelector('#evo-bootstrap') !== null")
    boot = page.locator("#evo-bootstrap").inner_text()
    assert "+1.0000" in boot
    choose(page, "evo-eval-run-pick", "oracle on demo")  # the run as the store names it
    choose_when_listed(page, "evo-eval-question", "demo-002")  # the picked run's question list arrives
    # the drill-down draws the stored trace as the Traces tab does (its steps table is #evo-trace-steps)
    page.wait_for_function("document.querySelector('#evo-trace-box #evo-trace-steps') !== null")
    assert "SEARCH" in page.locator("#evo-trace-box").inner_text()
    assert page.locator("#evo-drill-trace-link").get_attribute("href").startswith("?episode=")
    shot(page, "06_evaluate")


