"""The annotation queue in a real browser (issue #25): `evorag studio --auth users.toml` with two annotators and a
reviewer, 10 items (8 preference items of 3 candidates, 2 refusal items), each for N = 2 annotators; no model, no
worker.

- ann1 and ann2, each in their own browser context, label the same queue by keyboard only, interleaved (1-9 pick,
  Enter submit, U undo); ann2 ranks the first two preference items differently. ann1's 10 items are timed from the
  first key to the next item shown (the per-item median is printed: a figure, not an assertion).
- An annotator sees the Annotate tab only (no Training controls), a header of their own (name, role, progress: no
  adapter, rounds or worker) and, once done, an empty queue in words; and a direct call of the launch-round endpoint
  with their session cookie is refused: no round is queued.
- The reviewer sees the two disagreements and resolves one; its resolution replaces the two labels in the export.
- `evorag annotate export` writes each distinct pair of the labels once (agreeing annotators: one set), leaves the
  unresolved disagreement out and says so.

Every wait is on page or store state. Screenshots go to artifacts/screenshots/annotate_*.png.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

from tests.paths import REPO, SHOTS
from tests.studio_process import choose, serve_studio

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")

USERS = {"ann1": "annotator", "ann2": "annotator", "rev": "reviewer"}
PASSWORD = "a long enough password"
ITEM_JS = "(document.querySelector('#evo-ann-item .evo-ann-item') || {dataset: {}}).dataset.item"


def _items():
    from evorag_core.store import NewAnnotationItem

    out = []
    for i in range(8):
        cands = [{"completion": f"SEARCH: fact {i} part {j}", "preview": f"Found:\n[{j + 1}] Title {j}: text {i}.{j}",
                  "branch_return": round(0.1 * j, 2)} for j in range(2)] + [{"completion": f"ANSWER: answer {i}"}]
        chain = [{"t": 1, "action": "SEARCH", "argument": f"first hop {i}",
                  "passages": [{"pid": f"p{i}", "title": "Ansel Travine", "text": "Ansel Travine was born in Mirrow."}]}]
        out.append(NewAnnotationItem("preference", {"question": f"Question {i}: on which river is Mirrow?",
                                                    "prompt": f"PROMPT {i}", "t": 2, "chain": chain,
                                                    "candidates": cands}))
    for i in range(2):
        out.append(NewAnnotationItem("refusal", {"question": f"Refusal question {i}?",
                                                 "passages": [{"title": "Mirrow", "text": "Mirrow lies on the Sable."}]}))
    return out


@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    """(url, store) of a studio with a users file of two annotators and a reviewer, N = 2."""
    from evorag_core.auth.users_file import add_user
    from evorag_core.store import open_store

    work = tmp_path_factory.mktemp("annotate_browser")
    users = work / "users.toml"
    for name, role in USERS.items():
        add_user(users, name, PASSWORD, role)
    db_url = f"sqlite:///{work / 'studio.db'}"
    store = open_store(db_url)
    store.add_annotation_items(_items())
    with serve_studio(session_home, db_url, REPO / "artifacts" / "annotate_browser.log", "--auth", str(users),
                      "--no-worker", "--no-warm", "--set", "annotate.annotators_per_item=2") as (url, _):
        yield url, store, db_url
    store.close()


def _login(browser, url: str, name: str):
    ctx = browser.new_context(viewport={"width": 1500, "height": 1100})
    resp = ctx.request.post(url + "login", multipart={"username": name, "password": PASSWORD})
    assert resp.status == 200, resp.text()
    page = ctx.new_page()
    page.set_default_timeout(240_000)  # a page load on the shared 2-core machine can take minutes
    page.goto(url)
    page.wait_for_function("!!document.querySelector('#evo-ann-progress [data-done]')")
    return ctx, page


VISIBLE_TABS_JS = ("[...document.querySelectorAll('button[role=tab]')].filter((b) => b.offsetParent !== null)"
                   ".map((b) => b.innerText.trim())")


def _tabs_settled(page, hidden: str, shown: str = "Annotate") -> list[str]:
    """The tab buttons shown once the page has drawn them and the role's hiding has run (`hidden` is a tab it hides,
    `shown` one it keeps)."""
    page.wait_for_function(f"(({VISIBLE_TABS_JS}).includes({json.dumps(shown)})) && "
                           f"!({VISIBLE_TABS_JS}).includes({json.dumps(hidden)})")
    return page.evaluate(VISIBLE_TABS_JS)


def _shown(page) -> str:
    return page.evaluate(ITEM_JS) or ""


def _label(page, keys: list[str]) -> float:
    """Press `keys`, then Enter; wait for the next item (or the empty queue); seconds taken."""
    before = _shown(page)
    start = time.perf_counter()
    for key in keys:
        page.keyboard.press(key)
    page.keyboard.press("Enter")
    page.wait_for_function(f"({ITEM_JS} || '') !== {json.dumps(before)}")
    return time.perf_counter() - start


def _keys(page, who: str, n_done: int) -> list[str]:
    kind = page.evaluate("document.querySelector('#evo-ann-item .evo-ann-item').dataset.kind")
    if kind == "refusal":
        return ["1"]
    if who == "ann2" and n_done < 2:
        return ["2", "1", "3"]  # disagrees with ann1 on the first two preference items
    if who == "ann2" and n_done == 4:
        return ["1", "Shift+Digit3"]  # best 1 and worst 3: the same full order as ann1's 1, 2, 3
    return ["1", "2", "3"]


def _toasts(page) -> str:
    """The text of the toasts the page shows now."""
    return " | ".join(page.locator("[data-testid=toast-body]").all_inner_texts())


def _call_endpoint(page, name_part: str, first: object) -> None:
    """POST to the studio's API endpoint whose name contains `name_part`, as the page's logged-in user, with `first`
    as its first input and None for the rest; returns once the call has ended (refused or not)."""
    info = page.evaluate("fetch('/gradio_api/info').then(r => r.json())")
    name = next(n for n in info["named_endpoints"] if name_part in n)
    n_params = len(info["named_endpoints"][name]["parameters"])
    page.evaluate("""async ([name, n, first]) => {
        const data = Array(n).fill(null); data[0] = first;
        const post = await fetch('/gradio_api/call' + name, {method: 'POST', headers: {'Content-Type': 'application/json'},
                                                             body: JSON.stringify({data})});
        const {event_id} = await post.json();
        const res = await fetch('/gradio_api/call' + name + '/' + event_id);
        return await res.text();
    }""", [name, n_params, first])


def _wait_for_line(log: Path, text: str) -> None:
    """The studio logs each refusal (app.shell.event_roles) before the call's reply, so the line is in the file or being
    flushed to it; the bound only keeps a broken studio from hanging the run."""
    give_up = time.monotonic() + 120
    while text not in log.read_text():
        assert time.monotonic() < give_up, f"the studio log never said {text!r}"
        time.sleep(0.1)


def test_two_annotators_a_reviewer_and_roles(studio, browser, capsys):
    url, store, db_url = studio
    SHOTS.mkdir(parents=True, exist_ok=True)
    ctx1, ann1 = _login(browser, url, "ann1")
    ctx2, ann2 = _login(browser, url, "ann2")

    # the annotator's page: the Annotate tab only, with the first item
    tabs = _tabs_settled(ann1, "Episode")
    print(f"\nann1 (annotator) sees the tabs {tabs}")
    assert "Training" not in tabs and "Review" not in tabs, tabs
    ann1.wait_for_function(f"!!{ITEM_JS}")
    assert ann1.locator("#evo-launch").count() == 0 or not ann1.locator("#evo-launch").is_visible()
    assert "may not" not in _toasts(ann1)  # see below: refusals of page-fired events are quiet
    ann1.keyboard.press("2")
    ann1.keyboard.press("1")
    ann1.keyboard.press("Shift+Digit3")
    ann1.wait_for_selector("#evo-ann-item .evo-ann-cand.evo-picked")
    ann1.wait_for_selector("#evo-ann-item .evo-ann-cand.evo-worst[data-index='2']")
    ann1.screenshot(path=str(SHOTS / "annotate_picked.png"), full_page=True)
    ann1.keyboard.press("Escape")

    # undo: the last label comes back, and is labelled again
    first = _shown(ann1)
    _label(ann1, ["1", "2", "3"])
    ann1.keyboard.press("u")
    ann1.wait_for_function(f"{ITEM_JS} === {json.dumps(first)}")
    assert store.annotation_labels(int(first), annotator="ann1") == []

    times, done, worst_marked = [], {"ann1": 0, "ann2": 0}, None
    for _ in range(10):  # interleaved: ann1 one item, then ann2 one item
        times.append(_label(ann1, _keys(ann1, "ann1", done["ann1"])))
        done["ann1"] += 1
        ann2.wait_for_function(f"!!{ITEM_JS}")
        keys = _keys(ann2, "ann2", done["ann2"])
        if "Shift+Digit3" in keys:
            worst_marked = int(_shown(ann2))
        _label(ann2, keys)
        done["ann2"] += 1
    print(f"\nkeyboard labelling, 10 items: per-item median {statistics.median(times):.3f} s, "
          f"max {max(times):.3f} s, total {sum(times):.2f} s")
    ann1.wait_for_function("document.querySelector('#evo-ann-progress [data-done]').dataset.done === '10'")
    # #46: the annotator's header: their name, role and progress, no admin internals; the empty queue in words
    ann1.wait_for_function("(document.querySelector('#evo-member-header') || {innerText: ''}).innerText"
                           ".includes('labelled 10 items')")
    header = ann1.locator("#evo-header").inner_text()
    assert "ann1 (annotator)" in header and not any(w in header for w in ("adapter", "rounds", "worker", "pid"))
    empty = ann1.locator("#evo-ann-empty").inner_text()
    assert "Nothing left for you to label right now" in empty and "evorag" not in empty
    ann1.screenshot(path=str(SHOTS / "annotate_annotator_header.png"))
    ann2.wait_for_function("document.querySelector('#evo-ann-progress [data-queue-done]').dataset.queueDone === '10'")
    ann2.screenshot(path=str(SHOTS / "annotate_done.png"), full_page=True)
    labels = store.annotation_labels()
    # the worst mark reached the server: best 1, worst 3 is the full order (1 alone would leave 2 and 3 tied)
    assert worst_marked is not None
    assert store.annotation_labels(worst_marked, annotator="ann2")[0].ranking == [[0], [1], [2]]
    assert len(labels) == 20 and {lab.annotator for lab in labels} == {"ann1", "ann2"}
    assert all(len([lab for lab in labels if lab.item_id == i.id]) == 2 for i in store.list_annotation_items())

    # the annotator's page shows no error (the admin tabs' events its page fires by itself are refused quietly) ...
    assert "may not" not in _toasts(ann1)
    log = REPO / "artifacts" / "annotate_browser.log"
    # ... and calling an admin endpoint directly is refused on the server: launching a round (the Training tab's own
    # check) and resetting an episode (the check every event gets from app.shell.event_roles)
    _call_endpoint(ann1, "on_launch", "dpo")
    _wait_for_line(log, "ann1 (annotator) may not launch or cancel training rounds")
    assert store.list_rounds() == []
    _call_endpoint(ann1, "on_reset", None)
    _wait_for_line(log, "ann1 (annotator) may not run episodes, evaluations and comparisons")

    # the reviewer: the two disagreements, one resolved
    ctx3, rev = _login(browser, url, "rev")
    tabs = _tabs_settled(rev, "Episode")
    print(f"rev (reviewer) sees the tabs {tabs}")
    assert "Training" not in tabs, tabs
    rev.evaluate("[...document.querySelectorAll('button[role=tab]')].find((b) => b.innerText.trim() === 'Review')"
                 ".click()")
    rev.wait_for_selector("#evo-review-list tr[data-item]")
    assert rev.locator("#evo-review-list tr[data-item]").count() == 2
    disputed = int(rev.locator("#evo-review-list tr[data-item]").first.get_attribute("data-item"))
    choose(rev, "evo-review-pick", f"#{disputed} ")
    rev.wait_for_selector("#evo-review-item .evo-ann-labels")
    rev.locator("#evo-review-ranking textarea, #evo-review-ranking input").first.fill("2,1")
    rev.locator("#evo-review-resolve").click()
    rev.wait_for_function("document.querySelector('#evo-review-list') && "
                          "document.querySelectorAll('#evo-review-list tr[data-item]').length === 1")
    rev.screenshot(path=str(SHOTS / "annotate_review.png"), full_page=True)
    assert store.get_annotation_item(disputed).resolved_by == "rev"

    # export: each distinct pair of the labels once; the unresolved disagreement left out and counted
    from evorag_core.cli.main import main as cli_main
    from evorag_core.pairs.annotation import ranking_pairs

    expected = 0
    for item in store.list_annotation_items(kind="preference"):
        if item.resolution is not None:
            expected += len(ranking_pairs(item.resolution["ranking"]))
        else:
            given = [set(ranking_pairs(lab.ranking)) for lab in store.annotation_labels(item.id)
                     if lab.decision == "rank"]
            expected += len(given[0]) if all(g == given[0] for g in given) else 0
    out = SHOTS.parent / "annotate_pairs.jsonl"
    assert cli_main(["annotate", "export", "--out", str(out), "--db", db_url, "--home", str(out.parent)]) == 0
    assert "left out 1 item whose annotators disagree" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == expected == 6 * 3 + 3
    for ctx in (ctx1, ctx2, ctx3):
        ctx.close()
