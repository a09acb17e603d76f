"""The DynaKrag tab in a real browser (issue #26 item 1): `evorag studio` in a fresh home on the tiny 2-layer random
Llama, driven by Playwright through Debian's Chromium. No controller is trained, so the tab says so and runs the
uniform-valid controller, labelled as such: Step shows the evidence state, the operations with the invalid ones greyed
and their rule, and the scores as a bar chart with the pick highlighted. Then a run is stopped while the generator
compresses the evidence: the page says Stopped, no answer appears, the state shown is the one before the interrupted
operation; the next Run finishes with the graded answer and the compressed evidence.

The stopped operation is held open by the studio's test hold point `dynakrag:finish` (`app.test_hooks`) until the
page's Stop releases it, so the Stop never races the operation, however loaded the machine; the hold is spent then,
and the next Run goes through. Screenshots: artifacts/screenshots/dynakrag_*.
"""
from __future__ import annotations

import pytest

from app.test_hooks import ENV
from tests.paths import REPO
from tests.studio_process import CHROMIUM, chromium, serve_studio, shot, text_of

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """The url of a studio on the tiny model in a fresh home (no worker, no trained controller), the first finish
    (compression and answer) held until Stop; short generation budgets, as the test reads no generated text."""
    from training.tiny import build_tiny_model

    work = tmp_path_factory.mktemp("dynakrag_browser")
    tiny = build_tiny_model(work / "tiny")
    with serve_studio(work / "home", f"sqlite:///{work / 'studio.db'}", REPO / "artifacts" / "dynakrag_browser.log",
                      "--model", str(tiny), "--no-worker", "--no-warm", "--set", "policy.device=cpu",
                      "--set", "policy.threads=1", "--set", "dynakrag.compress_tokens=32",
                      "--set", "dynakrag.answer_tokens=16", "--set", "dynakrag.max_context_docs=3",
                      "--set", "dynakrag.passage_chars=120",
                      env={ENV: "dynakrag:finish"}) as (url, _):
        yield url


@pytest.fixture()
def page(studio):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` to run the browser tests")
    with chromium() as browser:
        pg = browser.new_page(viewport={"width": 1500, "height": 1300})
        pg.set_default_timeout(300_000)  # a loaded 2-core machine renders the page and runs the tiny model slowly
        pg.goto(studio)
        pg.wait_for_selector("#evo-reset", timeout=900_000)
        yield pg
        shot(pg, "dynakrag_last_state")


def test_uniform_valid_step_then_a_stopped_run_then_the_graded_answer(page):
    page.get_by_role("tab", name="DynaKrag").click()
    page.wait_for_function("document.querySelector('#evo-dk-question input') && "
                           "document.querySelector('#evo-dk-question input').value.startsWith('demo-001')")
    controller = page.locator("#evo-dk-controller")
    assert "No trained controller" in controller.inner_text()
    assert "uniform-valid controller" in controller.inner_text()
    assert page.locator("#evo-dk-controller-pick input[value=uniform]").is_checked()

    page.click("#evo-dk-step")  # s0 -> retrieve_more (the only valid operation at s0)
    page.wait_for_function(f"{text_of('evo-dk-status')}.includes('Step 1: retrieve_more done')", timeout=900_000)
    assert page.locator("#evo-dk-state ol.dk-docs li").count() > 0
    assert "Frontier cursor" in page.locator("#evo-dk-state").inner_text()
    invalid = page.locator("#evo-dk-ops tr.dk-op.invalid")
    assert invalid.count() >= 1 and "excluded:" in invalid.first.inner_text()  # greyed, with the rule
    assert page.locator("#evo-dk-ops tr.dk-op.chosen").count() == 1
    page.wait_for_selector("#evo-dk-scores .js-plotly-plot .bars path")
    assert page.locator("#evo-dk-scores .bars path").count() == page.locator(
        "#evo-dk-ops tr.dk-op.valid").count() - page.locator("#evo-dk-ops tr[data-op=compress_answer_evidence].valid").count()
    assert "Uniform-valid controller" in page.locator("#evo-dk-scores").inner_text()
    shot(page, "dynakrag_01_step")

    page.click("#evo-dk-run")  # held at the finish (the test hold point) until Stop: no race with a loaded machine
    page.wait_for_function(f"{text_of('evo-dk-status')}.includes('running compress_answer_evidence')",
                           timeout=900_000)
    before = page.locator("#evo-dk-state").inner_text()
    shot(page, "dynakrag_02_running")
    page.click("#evo-dk-stop")
    page.wait_for_function(f"{text_of('evo-dk-status')}.includes('Stopped')")
    assert "interrupted and discarded" in page.locator("#evo-dk-status").inner_text()
    assert page.locator("#evo-dk-final #dk-answer").count() == 0  # no answer: nothing of the stopped step is kept
    assert page.locator("#evo-dk-state").inner_text() == before  # the state before the interrupted operation
    shot(page, "dynakrag_03_stopped")
    page.click("#evo-dk-stop")  # the stream has ended: nothing to stop
    page.wait_for_function(f"{text_of('evo-dk-status')}.includes('Nothing is running')")
    assert page.locator("#evo-dk-final #dk-answer").count() == 0

    page.click("#evo-dk-run")  # the model is free again: the run goes on from the kept state to the answer
    page.wait_for_function(f"{text_of('evo-dk-status')}.includes('Finished')", timeout=900_000)
    final = page.locator("#evo-dk-final")
    assert final.locator("#dk-answer").count() == 1 and final.locator(".badge.grade").count() == 1  # EM/F1 vs gold
    assert "Compressed evidence" in final.inner_text()
    shot(page, "dynakrag_04_finished")
