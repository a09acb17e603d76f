"""The R²AG tab's tree diagram in a real browser (issue 26 item 4): `evorag studio` (subprocess, a fresh home, the demo
data, scripted steering, no LM) driven by Playwright through Debian's Chromium. demo-002 with L_max 3: Start shows
the root; one expansion marks the gold hits node by node (the plotly figure's "gold hit" trace) with a legend; the
run goes to the end; picking a node in the list and clicking a node in the figure both show its detail (query kind,
query, top-1 passage, reward terms) beside the figure; "Show pruning" greys the pruned nodes.

Screenshots go to $EVORAG_SHOTS, else artifacts/screenshots/r2ag_*.png. Every wait is on page state.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.paths import REPO, SHOTS
from tests.studio_process import CHROMIUM, choose, serve_studio

pytestmark = [pytest.mark.browser, pytest.mark.slow]

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` to run the browser tests",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")

GD = "document.querySelector('#evo-r2ag-figure .js-plotly-plot')"
# ids of the nodes in the figure's trace named `name` (the node traces carry meta 'r2ag-nodes')
IDS_OF = ("(name) => { const gd = " + GD + "; if (!gd || !gd.data) return [];"
          " return gd.data.filter(t => t.meta === 'r2ag-nodes' && t.name === name)"
          ".flatMap(t => Array.from(t.customdata)); }")
# the viewport coordinates of node `id`'s marker
POINT_OF = ("(id) => { const gd = " + GD + "; const fl = gd._fullLayout; const r = gd.getBoundingClientRect();"
            " for (const t of gd.data) { if (t.meta !== 'r2ag-nodes') continue;"
            " const i = Array.from(t.customdata).indexOf(id); if (i < 0) continue;"
            " return [r.left + fl._size.l + fl.xaxis.l2p(t.x[i]), r.top + fl._size.t + fl.yaxis.l2p(t.y[i])]; }"
            " return null; }")


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """A studio on a fresh home (nothing built yet) with the scripted steering and no LM."""
    home = tmp_path_factory.mktemp("r2ag_home")
    db_url = f"sqlite:///{tmp_path_factory.mktemp('r2ag_db') / 'studio.db'}"
    with serve_studio(home, db_url, REPO / "artifacts" / "r2ag_tree_browser.log", "--no-worker", "--no-warm",
                      "--set", "r2ag.steering=scripted", "--set", "policy.threads=1") as (url, _):
        yield url


def shot(page, name: str, element: str | None = None) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    if element:
        page.locator(element).screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=True)
    return path


def status_has(text: str) -> str:
    return f"(document.querySelector('#evo-r2ag-status') || {{innerText: ''}}).innerText.includes({text!r})"


def detail_of(node: int) -> str:
    return f"document.querySelector('#evo-r2ag-detail .r2ag-detail[data-node=\"{node}\"]') !== null"


def test_tree_diagram_marks_gold_and_shows_a_clicked_node(studio, browser):
    page = browser.new_page(viewport={"width": 1500, "height": 1300})
    page.set_default_timeout(240_000)  # a fresh home: the first load and the first expansion build the indexes
    try:
        page.goto(studio)
        page.wait_for_function("(document.querySelector('#evo-data-info') || {innerText: ''}).innerText"
                               ".includes('demo: 52 questions')", timeout=420_000)
        _grow_pick_click_prune(page)
    finally:
        page.close()


def _grow_pick_click_prune(page) -> None:
    page.get_by_role("tab", name="R²AG tree").click()
    choose(page, "evo-r2ag-question", "demo-002")
    page.locator("#evo-r2ag-tab-iterations input[type=number]").fill("3")
    page.click("#evo-r2ag-start")
    page.wait_for_function(status_has("iteration 0/3"))
    page.wait_for_function(f"({IDS_OF})('root (question)').length === 1")

    page.click("#evo-r2ag-step")
    page.wait_for_function(status_has("iteration 1/3"))
    assert "gold found 2/2" in page.locator("#evo-r2ag-status").inner_text()
    page.wait_for_function(f"({IDS_OF})('gold hit').length === 3")
    gold = sorted(page.evaluate(f"({IDS_OF})('gold hit')"))
    assert gold == [1, 2, 3]  # each gold node marked by itself
    legend = page.locator("#evo-r2ag-figure .legendtext").all_text_contents()
    assert {"root (question)", "gold hit", "no gold hit"} <= set(legend)
    assert any(t.startswith("stop") for t in legend)
    assert page.locator("#evo-r2ag-rewards tbody tr").count() == 1
    shot(page, "r2ag_01_one_expansion")

    page.click("#evo-r2ag-run")
    page.wait_for_function(status_has("done ("))
    page.wait_for_function(f"({IDS_OF})('no gold hit').length > 3")
    # a node picked in the list: its detail beside the figure
    choose(page, "evo-r2ag-node", "#2 base")
    page.wait_for_function(detail_of(2))
    detail = page.locator("#evo-r2ag-detail").inner_text()
    assert "Query kind: base" in detail and "Sable River" in detail and "R_MH" in detail
    assert "Top-1 passage" in detail
    shot(page, "r2ag_02_node_picked")

    # a node clicked in the figure: its detail, and the list follows
    page.locator("#evo-r2ag-figure").scroll_into_view_if_needed()
    leaf = max(page.evaluate(f"({IDS_OF})('no gold hit')"))
    x, y = page.evaluate(f"({POINT_OF})({leaf})")
    page.mouse.move(x, y)
    page.wait_for_selector("#evo-r2ag-figure .hoverlayer .hovertext")  # hovering shows the query and the title
    assert "query:" in page.locator("#evo-r2ag-figure .hoverlayer .hovertext").first.text_content()
    page.mouse.click(x, y)
    try:
        page.wait_for_function(detail_of(leaf), timeout=30_000)
    except Exception:
        box = page.evaluate("(document.querySelector('#evo-r2ag-clicked textarea, #evo-r2ag-clicked input')"
                            " || {value: 'no box'}).value")
        shot(page, "r2ag_failed_click")
        pytest.fail(f"clicking node {leaf} at ({x:.0f}, {y:.0f}) showed no detail; the click box holds {box!r}")
    assert "Query kind: predicted" in page.locator("#evo-r2ag-detail").inner_text()
    assert page.locator("#evo-r2ag-node input").input_value().startswith(f"#{leaf} ")
    shot(page, "r2ag_03_node_clicked")
    shot(page, "r2ag_03_figure", "#evo-r2ag-figure")

    page.locator("#evo-r2ag-pruning input").check()
    page.wait_for_function(f"({IDS_OF})('pruned').length > 0")
    assert page.evaluate(f"({IDS_OF})('gold hit').length") == 3
    assert page.evaluate(f"({IDS_OF})('kept').length") == 0  # every kept node of demo-002 is a gold hit
    shot(page, "r2ag_04_pruning")
    shot(page, "r2ag_04_figure", "#evo-r2ag-figure")
