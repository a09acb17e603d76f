"""Human in the loop and live state in a real browser (issue #24 items 2 and 4): `evorag studio` on the tiny 2-layer
random Llama (no worker, no warm-up: the first LM Reset loads the model and says so), driven by Playwright through
Debian's Chromium.

- Oracle on demo-001: after its first SEARCH the person asks for the policy's proposal (SEARCH 'Mirrow'), searches
  'Sable River' instead, and Run to end hands back: the oracle searches 'Mirrow' and answers; the steps table marks
  the human step with the annotator's name, and the store has it as a human step.
- LM (tiny): the person answers instead of the LM and queues a human-correction pair: the Episode tab's and the
  header's pair counts and the Pairs tab (which showed 0 before) show it without Refresh; a new question clears
  the messages, and so does Reset.

Every wait is on page or store state. Screenshots go to artifacts/screenshots/human_*.png.
"""
from __future__ import annotations


import pytest

from app.tabs.episode.layout import KEEP_TYPED_JS

from tests.paths import REPO
from tests.studio_process import choose, held_event, serve_studio, shot, text_of

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(url, store) of a studio on the tiny model; the test process opens the same SQLite database."""
    from tests.tiny_model import build_tiny_model

    work = tmp_path_factory.mktemp("human_browser")
    tiny = build_tiny_model(work / "tiny")
    db_url = f"sqlite:///{work / 'studio.db'}"
    with serve_studio(session_home, db_url, REPO / "artifacts" / "human_browser.log", "--model", str(tiny),
                      "--no-worker", "--no-warm", "--set", "policy.device=cpu", "--set", "policy.threads=1",
                      "--set", "env.t_max=4", "--set", "policy.max_answer_tokens=4") as (url, _):
        from evorag_core.store import open_store

        store = open_store(db_url)
        yield url, store
        store.close()


@pytest.fixture()
def page(browser, studio):
    url, _ = studio
    pg = browser.new_page(viewport={"width": 1500, "height": 1200})
    pg.set_default_timeout(120_000)  # the first Reset builds the demo's retrieval index
    pg.goto(url)
    pg.wait_for_function("document.querySelector('#evo-question input') && "
                         "document.querySelector('#evo-question input').value.startsWith('demo-001')")
    pg.wait_for_function(f"{text_of('evo-header-pairs')} !== ''")
    yield pg
    shot(pg, "human_last_state")  # what the page showed when the test ended (a failure's state included)
    pg.close()


def rows(n: int) -> str:
    return f"document.querySelectorAll('#evo-steps tbody tr').length === {n}"


def test_a_human_search_mid_episode_and_the_oracle_continues(page, studio):
    _, store = studio
    page.fill("#evo-annotator textarea, #evo-annotator input", "browser-human")
    page.click("#evo-reset")
    page.wait_for_function(f"{text_of('evo-status')}.includes('oracle')")
    page.locator("#evo-human-row").wait_for(state="visible")
    page.click("#evo-step")
    page.wait_for_function(rows(1))
    page.click("#evo-propose")
    page.wait_for_function(f"{text_of('evo-proposal-text')} === 'SEARCH: Mirrow'")
    box = page.locator("#evo-human-arg textarea, #evo-human-arg input").first
    page.wait_for_function("(el) => el.value === 'Mirrow'", arg=box.element_handle())  # the untouched box is filled
    shot(page, "human_01_proposal")

    page.locator("#evo-human-arg textarea, #evo-human-arg input").first.fill("Sable River")
    page.click("#evo-human-step")
    page.wait_for_function(rows(2))
    page.wait_for_function(f"{text_of('evo-message')}.includes('you took SEARCH')")
    second = page.locator("#evo-steps tbody tr").nth(1)
    assert second.locator("td").nth(2).inner_text() == "Sable River"
    assert second.locator("td").last.inner_text().strip() == "human browser-human"
    assert page.locator("#evo-steps tbody tr").first.locator("td").last.inner_text() == "agent"
    shot(page, "human_02_human_step")

    page.click("#evo-run")
    page.wait_for_function(f"{text_of('evo-status')}.includes('done')")
    assert page.locator("#evo-steps tbody tr").count() == 4
    assert page.locator("#evo-answer").inner_text() == "Sable River"
    assert page.locator("#evo-steps tbody tr").nth(2).locator("td").nth(2).inner_text() == "Mirrow"
    page.locator("#evo-human-row").wait_for(state="hidden")  # nothing to act on once the episode is done
    shot(page, "human_03_agent_finished")
    episode = store.list_episodes(question_id="demo-001", limit=1)[0]
    steps = store.get_episode(episode.id).steps
    assert [(s.actor, s.annotator) for s in steps] == [("policy", None), ("human", "browser-human"),
                                                       ("policy", None), ("policy", None)]


def test_a_correction_pair_updates_the_counts_and_messages_clear(page, studio):
    _, store = studio
    queued = store.count_pairs("status").get("queued", 0)
    page.get_by_role("tab", name="Pairs").click()
    page.wait_for_function(f"{text_of('evo-pair-total')} === '{queued}'")
    page.get_by_role("tab", name="Episode").click()

    choose(page, "evo-policy", "LM · base model")
    page.click("#evo-reset")
    # the first LM Reset loads the model and says so while it loads; the message then says how long it took
    page.wait_for_function(f"{text_of('evo-message')}.includes('loading the policy model')")
    page.wait_for_function(f"{text_of('evo-status')}.includes('LM')", timeout=300_000)
    assert " took " in page.locator("#evo-message").inner_text()
    box = page.locator("#evo-human-arg textarea, #evo-human-arg input").first
    with held_event(page, "evo-propose"):  # a person types before the proposal arrives: it must not overwrite
        box.fill("typed while the policy thinks")
    page.wait_for_function(f"{text_of('evo-proposal-text')}.startsWith('SEARCH')", timeout=300_000)
    proposal = page.locator("#evo-proposal-text").inner_text()
    offered = proposal.split(": ", 1)[1]
    page.wait_for_function(f"document.getElementById('evo-human-arg').dataset.proposal === {offered!r}")
    assert box.input_value() == "typed while the policy thinks"  # the box was offered the proposal and kept the text
    # the rule itself, run by the browser: the proposal fills the box only if it is unchanged since the ask
    keep = f"({KEEP_TYPED_JS})"
    assert page.evaluate(f"{keep}('Mirrow', '', '')") == "Mirrow"
    assert page.evaluate(f"{keep}('Mirrow', 'old', 'old')") == "Mirrow"
    assert page.evaluate(f"{keep}('Mirrow', '', 'mine')") == "mine"
    page.locator("#evo-human-action input[value='ANSWER']").check()
    page.locator("#evo-human-arg textarea, #evo-human-arg input").first.fill("Sable River")
    page.locator("#evo-human-queue input").check()
    page.click("#evo-human-step")
    page.wait_for_function(f"{text_of('evo-message')}.includes('Queued human-correction pair #')")
    pair_id = int(page.locator("#evo-message").inner_text().split("pair #")[1].split()[0])
    pair = store.get_pair(pair_id)
    assert (pair.source, pair.annotator, pair.chosen, pair.rejected) == (
        "human-correction", "anonymous", "ANSWER: Sable River", proposal)
    assert pair.prompt.endswith("<|im_start|>assistant\n")
    page.wait_for_function(f"document.querySelector('#evo-ep-pairs').dataset.n === '{queued + 1}'")
    page.wait_for_function(f"{text_of('evo-header-pairs')}.startsWith('{queued + 1} queued')")
    shot(page, "human_04_correction_pair")

    page.get_by_role("tab", name="Pairs").click()  # no Refresh: the count and the table are already new
    page.wait_for_function(f"{text_of('evo-pair-total')} === '{queued + 1}'")
    assert "human-correction" in page.locator("#evo-pairs").inner_text()
    shot(page, "human_05_pairs_tab")

    page.get_by_role("tab", name="Episode").click()
    choose(page, "evo-question", "demo-004")
    page.wait_for_function(f"{text_of('evo-message')} === ''")
    choose(page, "evo-policy", "oracle (upper bound, reads gold)")
    page.click("#evo-reset")
    page.wait_for_function(f"{text_of('evo-status')}.includes('demo-004')")
    assert page.locator("#evo-message").inner_text() == "New episode started."
    shot(page, "human_06_reset_clears_messages")
