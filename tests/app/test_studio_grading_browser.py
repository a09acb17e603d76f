"""The grade badge and the answer's source passage in a real browser (the fixture pattern of
test_studio_hardening_browser.py: `evorag studio` as a subprocess on a free port with a temporary home and database,
no worker and no warm-up, Playwright through Debian's Chromium). Episodes are played to their end with the oracle
(deterministic: demo-001 answered "Sable River", demo-004 unanswerable and refused) and with the embedded LM (the span
reader's recorded source). Screenshots go to $EVORAG_SHOTS, else artifacts/screenshots/.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.paths import REPO, SHOTS
from evorag_core.metrics import normalize_answer
from tests.studio_process import CHROMIUM, choose, demo_page, serve_studio

pytestmark = [pytest.mark.browser, pytest.mark.slow]


if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium chromium-driver` to run the browser tests",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    db_url = f"sqlite:///{tmp_path_factory.mktemp('grading_db') / 'studio.db'}"
    with serve_studio(session_home, db_url, REPO / "artifacts" / "studio_grading_browser.log",
                      "--no-worker", "--no-warm", "--set", "policy.threads=1") as (url, _):
        yield url


@pytest.fixture()
def page(browser, studio):
    with demo_page(browser, studio, height=1100) as pg:
        yield pg


def shot(page, name: str) -> Path:
    """The page with the answer's source passage scrolled into view inside the passage list."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("document.querySelector('#evo-passages-box li.source')?.scrollIntoView({block: 'center'})")
    page.evaluate("window.scrollTo(0, 0)")
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def play_to_end(page, question: str, policy: str, timeout_ms: int = 120_000) -> None:
    choose(page, "evo-question", question)
    choose(page, "evo-policy", policy)
    page.click("#evo-reset")
    page.wait_for_function(f"document.querySelector('#evo-status') && "
                           f"document.querySelector('#evo-status').innerText.includes('{question}')",
                           timeout=timeout_ms)
    page.click("#evo-run")
    page.wait_for_function("document.querySelector('#evo-status .badge.done') !== null", timeout=timeout_ms)


def test_oracle_answer_shows_a_correct_badge_and_its_highlighted_source_passage(page):
    """demo-001: SEARCH, SEARCH, ANSWER "Sable River" = the gold answer: correct, EM 1, F1 1.00; the chain passage
    containing the span is marked "source" with the span in <mark>."""
    play_to_end(page, "demo-001", "oracle (upper bound, reads gold)")
    badge = page.locator("#evo-grade")
    assert badge.get_attribute("data-verdict") == "correct"
    assert "correct · EM 1 · F1 1.00" in badge.inner_text()
    assert "gold answer: Sable River" in page.locator("#evo-status").inner_text()
    source = page.locator("#evo-passages-box li.source")
    assert source.count() == 1
    assert "source of the answer" in source.inner_text()
    assert [m.lower() for m in source.locator("mark").all_inner_texts()] == ["sable river"]
    assert page.locator("#evo-passages-box mark").count() == 1  # only the source passage is highlighted
    ref = page.locator("#evo-status .evo-src-ref").inner_text()
    assert source.locator(".ptitle").inner_text().split(" ", 1)[0] in ref  # "[k]" of the marked passage
    shot(page, "grading_01_oracle_correct_with_source")


def test_unanswerable_question_shows_unanswerable_and_grades_the_refusal_correct(page):
    """demo-004's stored answer ("1845") is false to the corpus: the page says "unanswerable", never 1845."""
    play_to_end(page, "demo-004", "oracle (upper bound, reads gold)")
    status = page.locator("#evo-status").inner_text()
    assert "gold answer: unanswerable" in status and "1845" not in status and "refused" in status
    assert page.locator("#evo-grade").get_attribute("data-verdict") == "correct"
    assert page.locator("#evo-passages-box li.source").count() == 0
    shot(page, "grading_02_unanswerable_refused")


def test_lm_episode_marks_the_passage_its_span_was_read_from(page):
    """The embedded LM on demo-001 to its end. A span answer: badge (correct / partly correct / wrong by EM and F1)
    and exactly one passage marked "source", whose <mark> is the answer (case and whitespace folded). A refusal or
    running out of steps: a "wrong" badge and no source."""
    play_to_end(page, "demo-001", "LM · base model", timeout_ms=600_000)
    badge = page.locator("#evo-grade")
    verdict = badge.get_attribute("data-verdict")
    assert verdict in ("correct", "partial", "wrong") and "EM " in badge.inner_text() and "F1 " in badge.inner_text()
    answer = page.locator("#evo-answer")
    source = page.locator("#evo-passages-box li.source")
    path = shot(page, "grading_03_lm_episode")
    if answer.count() and normalize_answer(answer.inner_text()) not in ("yes", "no"):
        assert source.count() == 1, path
        marks = {" ".join(m.lower().split()) for m in source.locator("mark").all_inner_texts()}
        assert marks == {" ".join(answer.inner_text().lower().split())}, (marks, answer.inner_text())
    else:
        assert source.count() == 0 and (answer.count() or verdict == "wrong")
