"""Activating adapters in a real browser: `evorag studio` as a subprocess on a free localhost port (the tiny 2-layer
random Llama as its policy model, no worker), driven by Playwright through Debian's Chromium. A good adapter is
activated from the Training tab; a garbled one is refused with an error beside the button naming the reason, the live adapter
stays the good one in the page and the store, and the next LM episode runs on it. Screenshots go to
/tmp/sec-auth-shots/.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.paths import SHOTS
from tests.studio_process import choose, serve_studio, shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


def make_adapter(tiny: Path, folder: Path, seed: int) -> str:
    """A LoRA adapter with random B matrices for `tiny`, saved with its checksum; returns the checksum."""
    import torch
    from transformers import AutoModelForCausalLM

    from evorag_core.config import load_config
    from training.lora import attach_lora, save_adapter

    model = attach_lora(AutoModelForCausalLM.from_pretrained(tiny), dataclasses.replace(load_config().train, seed=seed))
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return save_adapter(model, folder, {"round_id": None, "objective": "test", "base_model_id": str(tiny),
                                        "metrics": {}})


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(url, store, adapter folders) of a running studio on the tiny model with adapters 'good' and 'garbled'
    registered; the test process opens the same SQLite database."""
    from tests.tiny_model import build_tiny_model

    work = tmp_path_factory.mktemp("studio_activation")
    tiny = build_tiny_model(work / "tiny")
    db_url = f"sqlite:///{work / 'studio.db'}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with serve_studio(session_home, db_url, SHOTS / "studio.log", "--model", str(tiny), "--no-worker",
                      "--set", "policy.device=cpu", "--set", "policy.threads=1") as (url, _):
        from evorag_core.store import open_store

        store = open_store(db_url)
        folders = {}
        for seed, name in enumerate(("good", "garbled"), start=1):
            folders[name] = work / "adapters" / name
            checksum = make_adapter(tiny, folders[name], seed)
            store.register_adapter(name, str(folders[name]), base_model=str(tiny), objective="dpo", checksum=checksum)
        yield url, store, folders
        store.close()


@pytest.fixture()
def page(browser, studio):
    url, _, _ = studio
    pg = browser.new_page(viewport={"width": 1500, "height": 2000})  # the adapter list opens below the fold
    pg.set_default_timeout(60_000)
    pg.goto(url)
    pg.wait_for_selector("#evo-reset")
    pg.wait_for_function("document.querySelector('#evo-live-adapter') && !document.querySelector('#evo-warming')",
                         timeout=300_000)
    yield pg
    pg.close()


def live(page) -> str:
    return page.locator("#evo-live-adapter").inner_text()


def test_a_garbled_adapter_is_refused_in_the_page_and_the_previous_stays_live(page, studio):
    """Activate 'good' -> live, and the button reads "Live", greyed out. Zero the last 16 bytes of 'garbled's
    weights, Activate it -> an error message says why (sha256) and that 'good' stays live; the header, the store's
    active row and the next LM episode keep 'good'."""
    _, store, folders = studio
    page.get_by_role("tab", name="Training").click()
    choose(page, "evo-adapter-pick", "good")
    page.click("#evo-activate")
    page.wait_for_function("document.querySelector('#evo-live-adapter').innerText === 'good'")
    assert store.active_adapter().name == "good"
    # the picked adapter is the live one: the button says so and cannot be pressed
    page.wait_for_function("document.querySelector('#evo-activate').disabled")
    assert page.locator("#evo-activate").inner_text() == "Live"
    shot(page, "activation_live")

    weights = folders["garbled"] / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-16] + b"\x00" * 16)
    choose(page, "evo-adapter-pick", "garbled")
    page.click("#evo-activate")
    refusal = page.locator("#evo-activate-msg", has_text="not activated: adapter good stays live")
    refusal.wait_for()  # kept in the tab beside the button (not a toast that fades)
    text = refusal.inner_text()
    assert "adapter 'garbled' refused" in text and "sha256" in text
    shot(page, "activation_refused")
    refusal.screenshot(path=str(SHOTS / "activation_refused_message.png"))
    assert live(page) == "good" and store.active_adapter().name == "good"

    page.get_by_role("tab", name="Episode").click()
    choose(page, "evo-policy", "LM · live adapter")
    page.click("#evo-reset")
    page.wait_for_function("document.querySelector('#evo-episode-adapter') && "
                           "document.querySelector('#evo-episode-adapter').innerText === 'good'", timeout=300_000)
    page.click("#evo-step")
    page.wait_for_function("document.querySelectorAll('#evo-steps tbody tr').length === 1", timeout=300_000)
    shot(page, "episode_on_previous_adapter")
    assert store.active_adapter().name == "good"


def test_compare_base_with_an_adapter_from_the_adapters_list(page, studio):
    """Training tab: pick 'good', Compare with base -> the Compare tab opens with A = base, B = good; Run both ->
    both episodes run to the end and the step-aligned table shows them with their stored episodes linked."""
    page.get_by_role("tab", name="Training").click()
    choose(page, "evo-adapter-pick", "good")
    page.click("#evo-compare-adapter")
    page.wait_for_selector("#evo-cmp-run", state="visible")
    assert page.locator("#evo-cmp-b input").input_value() == "LM · adapter good"
    assert page.locator("#evo-cmp-a input").input_value() == "LM · base model"
    page.wait_for_function("document.querySelector('#evo-cmp-question input').value !== ''")
    page.click("#evo-cmp-run")
    page.wait_for_selector("#evo-compare-steps", timeout=300_000)
    summary = page.locator("#evo-compare-summary").inner_text()
    assert "A · LM" in summary and "adapter good" in summary and "gold passages found" in summary
    assert page.locator("#evo-compare-summary a.cmp-link").count() == 2
    rows = page.locator("#evo-compare-steps tbody tr")
    assert rows.count() >= 1
    assert "Ran both" in page.locator("#evo-cmp-progress").inner_text()
    shot(page, "compare_base_vs_adapter")
    # #46 item 7: whether training changed anything shows even on identical steps: each chosen reply's log-prob under
    # base and adapter, and their difference
    shift = page.locator("#evo-compare-shift-table tbody tr")
    assert shift.count() >= rows.count()
    assert "Mean shift B − A over" in page.locator("#evo-compare-shift").inner_text()
    page.locator("#evo-compare-shift").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "compare_logprob_shift.png"))
