"""Training feedback in a real browser (issue #24 item 5): `evorag studio` on the tiny 2-layer random Llama with its
background worker, driven by Playwright through Debian's Chromium. The learning-rate box takes 5e-5 typed and
ArrowUp moves it by 1e-5; a DPO round asking for 64 pairs when 3 exist is capped to 3 with a visible message (the
Rounds table shows 3); it runs (phase and step shown, KL panel hidden for DPO, the round's log lines streamed into
the log panel from the worker process through the store) and Cancel stops it: the table says cancelled, the log ends
with the cancel, the 3 pairs are queued again, no adapter. Then each objective shows its own fields (ARENA's settings,
DynaKrag's [dynakrag] ones), and a small DynaKrag round runs in the worker: its exploration charts appear, no loss
panel. Screenshots go to artifacts/screenshots/training_*.png.

Every wait is on page or store state; the generous timeouts only bound a hung worker (model and library loading on a
loaded machine takes most of them).
"""
from __future__ import annotations


import pytest

from tests.paths import REPO, SHOTS
from evorag_core.store import NewPair
from tests.studio_process import serve_studio, shot, text_of

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
PROMPT = "<|im_start|>system\nYou answer.<|im_end|>\n<|im_start|>user\nQuestion: {}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(url, store) of a studio on the tiny model with its worker; the test process opens the same database."""
    from tests.tiny_model import build_tiny_model

    work = tmp_path_factory.mktemp("training_browser")
    tiny = build_tiny_model(work / "tiny")
    db_url = f"sqlite:///{work / 'studio.db'}"
    with serve_studio(session_home, db_url, REPO / "artifacts" / "training_browser.log", "--model", str(tiny),
                      "--no-warm", "--set", "policy.device=cpu", "--set", "policy.threads=1") as (url, _):
        from evorag_core.store import open_store

        store = open_store(db_url)
        yield url, store
        store.close()


@pytest.fixture()
def page(browser, studio):
    url, _ = studio
    pg = browser.new_page(viewport={"width": 1500, "height": 1300})
    pg.set_default_timeout(60_000)
    pg.goto(url)
    pg.wait_for_selector("#evo-reset")
    yield pg
    pg.close()


def test_launch_more_pairs_than_exist_is_capped_then_cancel_the_running_round(page, studio):
    _, store = studio
    store.add_pairs([NewPair(PROMPT.format(f"who founded town {i}"), f"SEARCH: town {i} founder", f"ANSWER: {i}",
                             source="human") for i in range(3)])
    page.get_by_role("tab", name="Training").click()
    page.wait_for_function(f"{text_of('evo-available')}.startsWith('3 queued pairs available for DPO')")

    lr = page.locator("#evo-lr input")
    # the input's bounds are the setting's (train.lr in (0, 0.1]): 5 is refused in the page, nothing is queued
    lr.fill("5")
    page.click("#evo-launch")
    page.wait_for_function("[...document.querySelectorAll('[data-testid=toast-body]')]"
                           ".some(t => t.innerText.includes('maximum value 0.1'))")
    assert store.list_rounds() == []
    lr.fill("5e-5")
    lr.press("Tab")
    assert float(lr.input_value()) == pytest.approx(5e-5)
    lr.press("ArrowUp")
    assert float(lr.input_value()) == pytest.approx(6e-5)  # one step of 1e-5, not 1.00005

    page.locator("#evo-n-pairs input").fill("64")
    page.locator("#evo-epochs input").fill("20000")  # 1 step per epoch (3 pairs, batch 4): runs until cancelled
    page.click("#evo-launch")
    page.wait_for_function(f"{text_of('evo-launch-msg')}.includes('Capped: 64 pairs asked, only 3 available')")
    rid = store.list_rounds()[0].id
    assert store.get_round(rid).config["pairs"] == 3 and store.get_round(rid).config["lr"] == pytest.approx(6e-5)
    page.wait_for_function(f"{text_of('evo-rounds')}.includes('dpo')")
    shot(page, "training_01_capped")

    # the worker claims it, loads the tiny model and trains: the progress box shows the phase and step i/N
    page.wait_for_function(
        f"{text_of('evo-round-progress')}.includes('training') && /step [1-9][0-9]*\\/20000/.test({text_of('evo-round-progress')})",
        timeout=300_000)
    assert page.locator("#evo-round-progress").inner_text().count("ETA") == 1
    assert not page.locator("#evo-kl").is_visible()  # DPO logs no per-step KL: no empty panel
    # the log panel follows the newest round: the worker's lines from the claim to the training steps
    page.wait_for_function(
        f"{text_of('evo-round-log')}.includes('round {rid} (dpo, attempt 1/2) claimed by') && "
        f"{text_of('evo-round-log')}.includes('round {rid} phase load') && "
        f"/round {rid} step [0-9]+\\/20000: loss /.test({text_of('evo-round-log')})", timeout=120_000)
    page.wait_for_selector("#evo-metric-0 .js-plotly-plot", state="visible")  # DPO's own: reward margin, accuracy
    page.wait_for_selector("#evo-metric-1 .js-plotly-plot", state="visible")
    shot(page, "training_02_running")

    page.wait_for_function(f"{text_of('evo-cancel-pick')} !== '' && "
                           f"document.querySelector('#evo-cancel-pick input').value.startsWith('#{rid} ')")
    page.click("#evo-cancel")
    page.wait_for_function(f"{text_of('evo-cancel-msg')}.includes('cancel requested')")
    page.wait_for_function(
        f"Array.from(document.querySelectorAll('#evo-rounds tbody tr')).some("
        f"tr => tr.cells[0].innerText.trim() === '{rid}' && tr.cells[2].innerText.trim() === 'cancelled' "
        f"&& tr.cells[3].innerText.trim() === '3')", timeout=120_000)
    page.wait_for_function(f"{text_of('evo-round-progress')}.includes('cancelled')")
    page.wait_for_function(f"{text_of('evo-round-log')}.includes('round {rid} cancelled at step')", timeout=60_000)
    shot(page, "training_03_cancelled")
    # every stored line is shown, in order, newest at the bottom, and the panel is scrolled to it
    stored = [line.message for line in store.round_log(rid)]
    shown = page.eval_on_selector_all("#evo-round-log .evo-log-msg", "els => els.map(e => e.innerText)")
    assert shown == stored[-len(shown):] and shown[-1].startswith(f"round {rid} cancelled at step")
    assert page.eval_on_selector(
        "#evo-round-log .evo-log-lines", "b => b.scrollTop + b.clientHeight >= b.scrollHeight - 24")
    page.locator("#evo-round-log").scroll_into_view_if_needed()
    page.locator("#evo-round-log").screenshot(path=str(SHOTS / "training_04_log_panel.png"))
    done = store.get_round(rid)
    assert done.status == "cancelled" and done.progress["step"] < 20000
    assert store.count_pairs("status") == {"queued": 3} and store.list_adapters() == []


def visible(page, elem_id: str) -> bool:
    return page.locator(f"#{elem_id}").is_visible()


def choose(page, elem_id: str, text: str) -> None:
    """Pick the dropdown option `text` (its choices are fixed at build time)."""
    page.locator(f"#{elem_id} input").click()
    page.locator("[role=option]", has_text=text).first.click()


def test_each_objective_shows_its_own_fields_and_a_dynakrag_round_charts_its_exploration(page, studio):
    """ARENA picked: its settings (questions, G, temperature) and the data file show, DPO's pairs and source hide, the
    KL estimator switches to ARENA's k2, the availability line counts the demo file's questions with passages.
    DynaKrag picked: its [dynakrag] fields, no epochs/lr/KL; a small round runs in the studio's worker, its
    exploration charts appear, the loss panel stays hidden, the Rounds table names the controller."""
    _, store = studio
    page.get_by_role("tab", name="Training").click()
    page.wait_for_selector("#evo-n-pairs", state="visible")
    choose(page, "evo-objective", "arena-grpo")
    page.wait_for_function(f"{text_of('evo-available')}.includes('questions with passages in demo.jsonl')")
    assert visible(page, "evo-f-arena-questions") and visible(page, "evo-f-arena-group-size")
    assert visible(page, "evo-train-data") and visible(page, "evo-f-arena-temperature")
    assert not visible(page, "evo-n-pairs") and not visible(page, "evo-f-source") and not visible(page, "evo-f-beta")
    assert not visible(page, "evo-f-dynakrag-train-rollouts")
    assert page.locator("#evo-f-kl input[value='k2']").is_checked()
    shot(page, "training_04_arena_fields")

    choose(page, "evo-objective", "dynakrag")
    page.wait_for_function(f"{text_of('evo-available')}.includes('questions with gold passages in demo.jsonl')")
    assert visible(page, "evo-f-dynakrag-train-rollouts") and visible(page, "evo-f-dynakrag-n-estimators")
    assert not visible(page, "evo-epochs") and not visible(page, "evo-lr") and not visible(page, "evo-f-kl")
    assert not visible(page, "evo-f-arena-questions")
    for elem_id, value in (("evo-f-dynakrag-questions", "3"), ("evo-f-dynakrag-train-rollouts", "1"),
                           ("evo-f-dynakrag-n-estimators", "5"), ("evo-f-dynakrag-min-samples-leaf", "1")):
        page.locator(f"#{elem_id} input").fill(value)
        page.locator(f"#{elem_id} input").press("Tab")
    page.click("#evo-launch")
    page.wait_for_function(f"{text_of('evo-launch-msg')}.includes('queued (dynakrag, 3 questions)')")
    rid = store.list_rounds()[0].id
    assert store.get_round(rid).config["dynakrag"]["questions"] == 3
    page.wait_for_function(
        f"Array.from(document.querySelectorAll('#evo-rounds tbody tr')).some("
        f"tr => tr.cells[0].innerText.trim() === '{rid}' && tr.cells[2].innerText.trim() === 'succeeded')",
        timeout=400_000)
    page.wait_for_selector("#evo-metric-0 .js-plotly-plot", state="visible")
    page.wait_for_selector("#evo-metric-1 .js-plotly-plot", state="visible")
    assert not visible(page, "evo-loss") and not visible(page, "evo-kl")
    assert "controller dynakrag/" in page.locator("#evo-rounds").inner_text()
    shot(page, "training_05_dynakrag_done")
    done = store.get_round(rid)
    assert done.status == "succeeded" and done.metrics["steps"] == 3 and "adapter" not in done.metrics
