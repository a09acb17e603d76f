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
