"""The studio's layout as Gradio builds it (no server, no browser)."""
from __future__ import annotations

import gradio as gr

from app.common.services import Services
from app.shell.ui import build_ui
from evorag_core.config import load_config
from tests.paths import DEMO


def _blocks(block) -> list:
    found = [block]
    for child in getattr(block, "children", []):
        found += _blocks(child)
    return found


def test_the_tab_row_holds_only_tabs_with_distinct_ids(tmp_path):
    """A component created after a `with gr.Tab` block sits directly in the Tabs; Gradio 6 then draws the selected
    tab's button twice once the server selects a tab (the Traces deep link did, CI failure of 2026-11-27)."""
    svc = Services(load_config(), tmp_path / "home", data_path=DEMO, db_url=f"sqlite:///{tmp_path / 's.db'}")
    blocks = _blocks(build_ui(svc))
    tab_rows = [b for b in blocks if isinstance(b, gr.Tabs)]
    assert tab_rows
    for row in tab_rows:
        strays = [f"{type(c).__name__}({c.elem_id or ''})" for c in row.children if not isinstance(c, gr.Tab)]
        assert not strays, f"components directly inside gr.Tabs, outside any gr.Tab: {strays}"
        ids = [c.id for c in row.children]
        assert len(ids) == len(set(ids)), ids
    labels = [c.label for row in tab_rows for c in row.children]
    assert {"Episode", "Traces", "DynaKrag", "ARENA"} <= set(labels)


def test_a_deep_link_scrolls_to_the_opened_trace(tmp_path):
    """Issue #46 item 7: `?episode=N` selected the trace but left the page at its top. The Traces tab's page load
    (which opens the trace) is followed by a JS step that scrolls the opened trace (or the link's error) into view;
    it waits for the trace whose id the URL names, and does nothing without `?episode=`."""
    from app.tabs.traces.layout import SCROLL_TO_TRACE_JS

    svc = Services(load_config(), tmp_path / "home", data_path=DEMO, db_url=f"sqlite:///{tmp_path / 's.db'}")
    demo = build_ui(svc)
    fns = list(demo.fns.values())
    scroll = [fn for fn in fns if fn.js == SCROLL_TO_TRACE_JS]
    assert len(scroll) == 1 and scroll[0].fn is None and not scroll[0].outputs
    opened_by = next(fn for fn in fns if fn._id == scroll[0].trigger_after)
    assert opened_by.targets[0][1] == "load" and "evo-trace-head-box" in [b.elem_id for b in opened_by.outputs]
    assert "head.dataset.episode === wanted.trim()" in SCROLL_TO_TRACE_JS
    assert "#evo-trace-head-box" in SCROLL_TO_TRACE_JS and "scrollIntoView" in SCROLL_TO_TRACE_JS
    assert "if (wanted === null) return;" in SCROLL_TO_TRACE_JS


def test_no_event_shows_its_progress_on_a_layout_block(tmp_path):
    """Gradio 6.31's page re-reads every progress target of every event it has run, with all their descendants, at
    each status change of any event: the page load's outputs (every admin tab, the Tabs) made each timer tick and tab
    switch walk the whole page (DynaKrag 8.9 s, R²AG 9.1 s under load, #46 item 8). `wiring.on` keeps layout blocks
    out of the progress targets (`show_progress_on`)."""
    from app.common.wiring import _is_layout

    svc = Services(load_config(), tmp_path / "home", data_path=DEMO, db_url=f"sqlite:///{tmp_path / 's.db'}")
    demo = build_ui(svc)
    updates_a_tab = [fn for fn in demo.fns.values() if any(_is_layout(b) for b in fn.outputs)]
    assert len(updates_a_tab) >= 2  # the page load (tabs shown per role) and the Traces deep link (selects its tab)
    for fn in demo.fns.values():
        targets = fn.show_progress_on or fn.outputs
        assert not [b for b in targets if _is_layout(b)], f"{fn.name} shows its progress on a layout block"
