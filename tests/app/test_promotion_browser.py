"""Gated promotion in a real browser (Training tab, Adapters panel): `evorag studio` as a subprocess (the tiny
2-layer Llama, no worker), its store shared with the test. Adapter "alpha" has a real promotion report (the agent
on 6 demo questions against the base model, evaluated here with the studio's settings); "bravo" and "charlie",
reader adapters (role "reader": they read the answers only), have none.

The report view shows both sides, the verdict and the changed questions with links to their traces; Activate of
an adapter that did not pass is refused in the tab until a reason is typed, and then the header says it was forced
and why; Evaluate queues bravo's evaluation, which the table shows as evaluating; bravo then goes live, and the
header says it reads only. A soup of alpha and bravo is refused (two roles); one of bravo and charlie is registered
as a staged reader and its evaluation queued. Screenshots under artifacts/screenshots/promotion_*.png.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.paths import DEMO
from tests.studio_process import choose, serve_studio, shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")

SETTINGS = {"policy.device": "cpu", "policy.threads": 1, "promotion.questions": "0:6", "promotion.min_n": 5}


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(url, store, report row of alpha) of a running studio with adapters alpha (evaluated) and bravo."""
    import torch

    from evorag_core.adapters.files import read_adapter_meta
    from evorag_core.adapters.registry import register_verified
    from evorag_core.config import apply_overrides, load_config
    from evorag_core.promotion.gate import evaluate_candidate
    from evorag_core.store import open_store
    from tests.lora_adapters import random_adapter
    from tests.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    work = tmp_path_factory.mktemp("promotion_browser")
    texts = [json.loads(line)["question"] for line in DEMO.open(encoding="utf-8")][:20]
    tiny = build_tiny_model(work / "tiny", texts)
    db_url = f"sqlite:///{work / 'studio.db'}"
    store = open_store(db_url)
    for seed, (name, role) in enumerate((("alpha", "policy"), ("bravo", "reader"), ("charlie", "reader"))):
        folder = random_adapter(tiny, work / "adapters" / name, seed, base_id=str(tiny), scale=2.0)
        register_verified(store, name, folder, base_model_id=str(tiny), checksum=read_adapter_meta(folder)["sha256"],
                          role=role)
    cfg = apply_overrides(load_config(), {**SETTINGS, "policy.model": str(tiny)})
    report = evaluate_candidate(store, cfg, work / "home", "alpha")
    args = ["--model", str(tiny), "--no-worker"] + [a for k, v in SETTINGS.items() for a in ("--set", f"{k}={v}")]
    with serve_studio(session_home, db_url, Path(work / "studio.log"), *args) as (url, _):
        yield url, store, report
    store.close()


@pytest.fixture()
def page(browser, studio):
    pg = browser.new_page(viewport={"width": 1500, "height": 2200})
    pg.set_default_timeout(60_000)
    pg.goto(studio[0])
    pg.wait_for_selector("#evo-reset")
    pg.wait_for_function("document.querySelector('#evo-live-adapter') && !document.querySelector('#evo-warming')",
                         timeout=300_000)
    yield pg
    pg.close()


def test_the_report_view_a_forced_activation_with_its_reason_and_a_queued_evaluation(page, studio):
    _, store, report = studio
    assert report.passed is not True  # a random adapter is not shown better on 6 questions
    page.get_by_role("tab", name="Training").click()
    table = page.locator("#evo-adapters")
    table.wait_for()
    alpha_row = table.locator("tr", has_text="alpha").inner_text()
    assert f"{report.report['candidate']['summary']['f1']:.4g}" in alpha_row and "vs base" in alpha_row
    assert ("not passed" if report.passed is False else "no verdict") in alpha_row
    bravo_row = table.locator("tr", has_text="bravo").inner_text()
    assert "not evaluated" in bravo_row and "\treader\t" in bravo_row and "\tpolicy\t" in alpha_row

    choose(page, "evo-adapter-pick", "alpha")
    page.wait_for_selector('#evo-report[data-adapter="alpha"]')
    view = page.locator("#evo-report").inner_text()
    assert f"Report #{report.id}" in view and "alpha vs base" in view and report.verdict in view
    assert page.locator("#evo-report-sides tbody tr").count() == 2
    changed = report.report["changed"]
    assert page.locator("#evo-report-changes tbody tr").count() == len(changed)
    if changed:  # each changed answer links to its stored trace
        href = page.locator("#evo-report-changes a").first.get_attribute("href")
        assert href == f"?episode={changed[0]['candidate']['episode']}"
    page.wait_for_selector("#evo-learning-curve .js-plotly-plot")
    shot(page, "promotion_report")

    page.click("#evo-activate")
    msg = page.locator("#evo-activate-msg")
    msg.locator("text=needs a reason").wait_for()
    assert "did not pass its evaluation" in msg.inner_text() and "the base model stays live" in msg.inner_text()
    assert store.active_adapter() is None and page.locator("#evo-live-adapter").inner_text() == "base model"

    page.locator("#evo-activate-reason textarea").fill("demo for the reading group")
    page.click("#evo-activate")
    page.wait_for_function("document.querySelector('#evo-live-adapter').innerText === 'alpha'")
    assert "forced" in msg.inner_text()
    page.wait_for_function("(document.querySelector('#evo-live-why') || {innerText: ''}).innerText"
                           ".includes('demo for the reading group')")
    assert "forced" in page.locator("#evo-live-why").inner_text()
    why = store.last_activation()
    assert (why.adapter, why.kind, why.reason, why.promotion_id) == ("alpha", "forced", "demo for the reading group",
                                                                      report.id)
    shot(page, "promotion_forced")

    choose(page, "evo-adapter-pick", "bravo")
    page.wait_for_selector('#evo-report:has-text("no promotion report yet")')
    page.click("#evo-evaluate-adapter")
    msg.locator("text=queued as round").wait_for()
    [job] = [r for r in store.list_rounds(status="queued") if r.objective == "evaluate"]
    assert job.config["adapter"] == "bravo" and job.config["against"] == "live"
    page.wait_for_function(f"document.querySelector('#evo-adapters').innerText.includes('evaluating (#{job.id})')")
    assert "evaluate bravo vs live" in page.locator("#evo-rounds").inner_text()
    shot(page, "promotion_queued")

    page.click("#evo-activate")  # bravo has no failed report: it goes live, in its role (the reader's)
    page.wait_for_function("document.querySelector('#evo-live-adapter').innerText === 'bravo (reader only)'")
    assert store.active_adapter().name == "bravo" and store.last_activation().kind == "activated"
    shot(page, "promotion_reader_live")


def test_a_soup_of_two_readers_is_registered_staged_and_queued_for_evaluation(page, studio):
    _, store, _ = studio
    page.get_by_role("tab", name="Training").click()
    page.locator("#evo-adapters").wait_for()
    page.click("#evo-soup button, #evo-soup .label-wrap")  # open the accordion
    for name in ("alpha", "bravo"):
        choose(page, "evo-soup-pick", name)
    page.locator("#evo-soup-name input, #evo-soup-name textarea").first.fill("mixed")
    page.click("#evo-soup-make")
    msg = page.locator("#evo-soup-msg")
    msg.locator("text=one role").wait_for()
    assert "alpha (policy), bravo (reader)" in msg.inner_text() and "mixed" not in {a.name for a in store.list_adapters()}

    page.locator("#evo-soup-pick .token", has_text="alpha").locator(".token-remove").click()  # the chip's ×
    choose(page, "evo-soup-pick", "charlie")
    page.locator("#evo-soup-name input, #evo-soup-name textarea").first.fill("bc-soup")
    page.click("#evo-soup-make")
    msg.locator("text=registered, staged").wait_for()
    row = store.get_adapter("bc-soup")
    assert (row.role, row.active, row.objective) == ("reader", False, "soup: bravo + charlie")
    [job] = [r for r in store.list_rounds(status="queued") if r.config.get("adapter") == "bc-soup"]
    assert job.objective == "evaluate"
    page.wait_for_function(f"document.querySelector('#evo-adapters').innerText.includes('evaluating (#{job.id})')")
    assert "soup: bravo + charlie" in page.locator("#evo-adapters tr", has_text="bc-soup").inner_text()
    shot(page, "promotion_soup")
