"""The ARENA tab in a real browser (issue #26 item 2): `evorag studio` in a fresh home on the tiny 2-layer random
Llama with one registered adapter, driven by Playwright through Debian's Chromium. A generation is stopped while the
base model writes: the page says so, both columns go back to empty and stay so (the discarded reply shows nothing),
and the next Generate runs the base model and then the adapter on demo-001 and shows both replies side by side, each
with its rewards table and format verdict; a Stop with nothing running keeps them.

The stopped reply is held open by the studio's test hold point `arena:base` (`app.test_hooks`) until the page's Stop
releases it, so the Stop never races the reply, however loaded the machine; the hold is spent then, and the next
Generate goes through. Screenshots: artifacts/screenshots/arena_*.
"""
from __future__ import annotations

import json

import pytest

from app.test_hooks import ENV
from tests.paths import REPO
from tests.studio_process import CHROMIUM, choose, chromium, serve_studio, shot, text_of

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """The url of a studio on the tiny model, in a fresh home, with adapter r1 registered."""
    from evorag_core.config import apply_overrides, load_config
    from evorag_core.store import open_store
    from tests.app.test_studio_activation import make_adapter
    from training.tiny import build_tiny_model

    work = tmp_path_factory.mktemp("arena_browser")
    tiny = build_tiny_model(work / "tiny")
    cfg = apply_overrides(load_config(), {"policy.model": str(tiny), "policy.device": "cpu"})
    folder = make_adapter(cfg, str(tiny), work / "adapters" / "r1", seed=3)
    db_url = f"sqlite:///{work / 'studio.db'}"
    store = open_store(db_url)
    store.register_adapter("r1", str(folder), base_model=str(tiny), objective="dpo",
                           checksum=json.loads((folder / "evorag_adapter.json").read_text())["sha256"])
    store.close()
    with serve_studio(work / "home", db_url, REPO / "artifacts" / "arena_browser.log", "--model", str(tiny),
                      "--no-worker", "--no-warm", "--set", "policy.device=cpu",
                      "--set", "policy.threads=1", env={ENV: "arena:base"}) as (url, _):
        yield url


@pytest.fixture()
def page(studio):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` to run the browser tests")
    with chromium() as browser:
        pg = browser.new_page(viewport={"width": 1500, "height": 1200})
        pg.set_default_timeout(120_000)
        pg.goto(studio)
        pg.wait_for_selector("#evo-reset")
        yield pg
        shot(pg, "arena_last_state")


def generate(page, tokens: int) -> None:
    box = page.locator("#evo-arena-tokens input")
    box.fill(str(tokens))
    box.press("Tab")
    page.click("#evo-arena-run")


def test_a_stopped_generation_then_base_and_adapter_side_by_side(page):
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
