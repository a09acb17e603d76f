"""The studio's data box under hostile input, in a real browser (the fixture pattern of test_studio_browser.py: the
studio as a subprocess on a free port with a temporary home and database, Playwright through Debian's Chromium; no
worker and no LM warm-up, which these tests do not need). Screenshots go to artifacts/screenshots/.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.paths import REPO, SHOTS
from tests.studio_process import CHROMIUM, demo_page, serve_studio

pytestmark = [pytest.mark.browser, pytest.mark.slow]


if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium chromium-driver` to run the browser tests",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")


def _record(qid: str, dataset: str) -> str:
    return json.dumps({
        "id": qid, "dataset": dataset, "question": f"What is {qid}?", "answers": ["x"],
        "passages": [{"pid": f"p:{qid}:0", "title": "T", "text": f"{qid} is x.", "gold": True}],
    }) + "\n"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data_root")
    (root / "mine.jsonl").write_text(_record("m1", "mine"), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory, data_root):
    """The URL of a running studio whose studio.data_roots is `data_root`."""
    db_url = f"sqlite:///{tmp_path_factory.mktemp('hardening_db') / 'studio.db'}"
    with serve_studio(session_home, db_url, REPO / "artifacts" / "studio_hardening_browser.log",
                      "--no-worker", "--no-warm", "--set", f"studio.data_roots={data_root}") as (url, _):
        yield url


@pytest.fixture()
def page(browser, studio):
    with demo_page(browser, studio, height=1000) as pg:
        yield pg


def shot(page, name: str) -> None:
    """The viewport from the top (where Gradio's toasts are) once every toast has finished fading in."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("[...document.querySelectorAll('.toast-body')].every(t => t.getAnimations().length === 0)")
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def type_path_and_load(page, path: str) -> None:
    box = page.locator("#evo-data input")
    box.click()
    box.fill(path)
    page.click("#evo-load")


def wait_for_data_info(page, text: str) -> None:
    page.wait_for_function(f"document.querySelector('#evo-data-info').innerText.includes({json.dumps(text)})")


def test_a_path_outside_the_data_folders_is_refused_once_without_its_content(page, data_root):
    """/etc/passwd typed and loaded: one toast, no line of the file in it; then a file under studio.data_roots
    loads (its summary appearing is the point by which a second, duplicate message would have arrived)."""
    type_path_and_load(page, "/etc/passwd")
    page.locator("[data-testid=toast-text]").first.wait_for()
    shot(page, "hardening_01_path_refused")
    type_path_and_load(page, str(data_root / "mine.jsonl"))
    wait_for_data_info(page, "mine: 1 questions")
    texts = page.locator("[data-testid=toast-text]").all_inner_texts()  # one per message (a toast groups them)
    assert len(texts) == 1, texts
    assert "not a data file the studio may read" in texts[0] and "root:" not in texts[0]
    assert page.locator("#evo-question input").input_value().startswith("m1")


def test_html_in_an_uploaded_data_set_name_is_shown_as_text(page, tmp_path):
    evil = tmp_path / "evil.jsonl"
    evil.write_text(_record("e1", '<img src=x onerror="window.__pwned=1">'), encoding="utf-8")
    page.locator("#evo-upload input[type=file], input[type=file]").first.set_input_files(str(evil))
    wait_for_data_info(page, "1 questions")
    assert page.locator("#evo-data-info img").count() == 0
    assert '<img src=x onerror="window.__pwned=1">' in page.locator("#evo-data-info").inner_text()
    assert page.evaluate("window.__pwned === undefined")
    shot(page, "hardening_02_escaped_name")


def test_a_question_over_the_length_limit_is_refused_with_a_message(page):
    page.get_by_label("…or a free question over this file's corpus").fill("Where is Mirrow? " * 1800)  # 30,600
    page.click("#evo-reset")
    toast = page.locator("[data-testid=toast-text]").first
    toast.wait_for()
    assert "at most 2,000 characters" in toast.inner_text()
    assert page.locator("#evo-status").count() == 0  # no episode started: the heading keeps its empty note
    shot(page, "hardening_03_question_too_long")
