"""The method tabs in a real browser, on one studio: `evorag studio` in a fresh home on the tiny 2-layer random Llama
with one registered adapter, driven by Playwright through Debian's Chromium (issue #26 items 1 and 2).

DynaKrag: no controller is trained, so the tab says so and runs the uniform-valid controller, labelled as such:
Step shows the evidence state, the operations with the invalid ones greyed and their rule, and the scores as a bar
chart with the pick highlighted. Then a run is stopped while the generator compresses the evidence: the page says
Stopped, no answer appears, the state shown is the one before the interrupted operation; the next Run finishes with
the graded answer and the compressed evidence.

ARENA: a generation is stopped while the base model writes: the page says so, both columns go back to empty and stay
so (the discarded reply shows nothing), and the next Generate runs the base model and then the adapter on demo-001
and shows both replies side by side, each with its rewards table and format verdict; a Stop with nothing running
keeps them.

Each stopped operation is held open by one of the studio's test hold points (`evorag_core.test_hooks`:
`dynakrag:finish`, `arena:base`) until the page's Stop releases it, so no Stop races an operation, however loaded the machine; a hold
is spent then, and the next Run / Generate goes through. Short generation budgets: the tests read no generated
text. Screenshots: artifacts/screenshots/dynakrag_* and arena_*.
"""
from __future__ import annotations

import json

import pytest

from evorag_core.test_hooks import ENV
from tests.paths import REPO
from tests.studio_process import CHROMIUM, choose, serve_studio, shot, text_of

pytestmark = [pytest.mark.browser, pytest.mark.slow]

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` to run the browser tests",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """The url of a studio on the tiny model in a fresh home (no worker, no trained DynaKrag controller) with adapter
    r1 registered, the first DynaKrag finish (compression and answer) and the first ARENA base reply held until
    Stop."""
    from evorag_core.config import apply_overrides, load_config
    from evorag_core.store import open_store
    from tests.app.test_studio_activation import make_adapter
    from tests.tiny_model import build_tiny_model

    work = tmp_path_factory.mktemp("method_tabs_browser")
    tiny = build_tiny_model(work / "tiny")
    cfg = apply_overrides(load_config(), {"policy.model": str(tiny), "policy.device": "cpu"})
    folder = make_adapter(cfg, str(tiny), work / "adapters" / "r1", seed=3)
    db_url = f"sqlite:///{work / 'studio.db'}"
    store = open_store(db_url)
    store.register_adapter("r1", str(folder), base_model=str(tiny), objective="dpo",
                           checksum=json.loads((folder / "evorag_adapter.json").read_text())["sha256"])
    store.close()
    with serve_studio(work / "home", db_url, REPO / "artifacts" / "method_tabs_browser.log", "--model", str(tiny),
                      "--no-worker", "--no-warm", "--set", "policy.device=cpu", "--set", "policy.threads=1",
                      "--set", "dynakrag.compress_tokens=32", "--set", "dynakrag.answer_tokens=16",
                      "--set", "dynakrag.max_context_docs=3", "--set", "dynakrag.passage_chars=120",
                      env={ENV: "dynakrag:finish,arena:base"}) as (url, _):
        yield url


@pytest.fixture()
def page(studio, browser):
    pg = browser.new_page(viewport={"width": 1500, "height": 1300})
    pg.set_default_timeout(300_000)  # a loaded 2-core machine renders the page and runs the tiny model slowly
    pg.goto(studio)
    pg.wait_for_selector("#evo-reset", timeout=900_000)
    yield pg
    shot(pg, "method_tabs_last_state")
    pg.close()


# -- DynaKrag --------------------------------------------------------------------------------------------------------

def test_dynakrag_uniform_valid_step_then_a_stopped_run_then_the_graded_answer(page):
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
    valid = page.locator("#evo-dk-ops tr.dk-op.valid").count()
    terminal = page.locator("#evo-dk-ops tr[data-op=compress_answer_evidence].valid").count()  # not a choice: no bar
    assert page.locator("#evo-dk-scores .bars path").count() == valid - terminal
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


# -- ARENA -----------------------------------------------------------------------------------------------------------

def generate(page, tokens: int) -> None:
    box = page.locator("#evo-arena-tokens input")
    box.fill(str(tokens))
    box.press("Tab")
    page.click("#evo-arena-run")


def test_arena_a_stopped_generation_then_base_and_adapter_side_by_side(page):
    page.get_by_role("tab", name="ARENA").click()
    page.wait_for_function("document.querySelector('#evo-arena-question input') && "
                           "document.querySelector('#evo-arena-question input').value.startsWith('demo-001')")
    choose(page, "evo-arena-adapter", "adapter r1")

    generate(page, 48)  # held while the base model writes (the test hold point) until Stop
    page.wait_for_function(f"{text_of('evo-arena-status')}.includes('generating')")
    shot(page, "arena_01_generating")
    page.click("#evo-arena-stop")
    page.wait_for_function(f"{text_of('evo-arena-status')}.includes('Stopped')")
    assert page.locator("#evo-arena-base table.arena-rewards").count() == 0
    assert page.locator("#evo-arena-adapter-out table.arena-rewards").count() == 0
    assert "the generation was stopped" in page.locator("#evo-arena-base").inner_text()
    shot(page, "arena_02_stopped")
    # the stream has ended (a second Stop finds nothing running), so the discarded reply can no longer appear
    page.click("#evo-arena-stop")
    page.wait_for_function(f"{text_of('evo-arena-status')}.includes('Nothing is generating')")
    assert page.locator("#evo-arena-base table.arena-rewards").count() == 0
    assert "the generation was stopped" in page.locator("#evo-arena-base").inner_text()

    generate(page, 48)  # the model is free again once the discarded reply has let go of it
    page.wait_for_function(f"{text_of('evo-arena-status')}.includes('Generated both replies')", timeout=300_000)
    for column, label in (("evo-arena-base", "(base)"), ("evo-arena-adapter-out", "+ adapter r1")):
        side = page.locator(f"#{column}")
        assert label in side.inner_text() and "/tmp/" not in side.inner_text()  # the model by its folder name
        assert side.locator("table.arena-rewards").is_visible()  # format, accuracy, relevance, bonus, total
        assert "Format:" in side.inner_text() and "Relevance:" in side.inner_text()
        assert side.locator("li.arena-ref").count() > 0  # the question's passages, numbered
    shot(page, "arena_03_generated")
    page.click("#evo-arena-stop")  # nothing runs: the replies stay
    page.wait_for_function(f"{text_of('evo-arena-status')}.includes('Nothing is generating')")
    assert page.locator("#evo-arena-base table.arena-rewards").count() == 1
    assert page.locator("#evo-arena-adapter-out table.arena-rewards").count() == 1
