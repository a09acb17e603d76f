"""Every tab keeps its last error in the page (issue #46 item 7: errors were only toasts that vanish): one mechanism
in app/common/wiring.py. A tab opened with `studio_tab` has a last-error line; every event `on(...)` wires from it
gets that line as one more output, written with the message and the time on an error and emptied on the next
success; timer ticks and reloads (`quiet`) leave it alone."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import gradio as gr
import pytest

from app.common.services import Services
from app.common.wiring import guard, last_error_html, on, studio_tab
from app.shell.ui import build_ui
from evorag_core.config import load_config
from tests.paths import DEMO

SKIP = type(gr.skip())


def _boom(*_):
    raise ValueError("bad <input>")


def _line_text(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


def test_the_guard_writes_the_line_on_an_error_and_empties_it_on_success():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the toast (gr.Warning outside a request)
        kept, line = guard(_boom, 1, error_line=True)()
        assert isinstance(kept, SKIP)
        assert re.fullmatch(r"Last error at \d\d:\d\d:\d\d: bad &lt;input&gt;", _line_text(line))
        assert 'data-time="' in line and "<input>" not in line  # escaped
        *kept, line = guard(_boom, 2, error_line=True)()
        assert all(isinstance(k, SKIP) for k in kept) and "bad" in line
        assert "bad" in guard(_boom, 0, error_line=True)()  # no outputs of its own: the line is the only one
    assert guard(lambda: 3, 1, error_line=True)() == (3, "")
    assert guard(lambda: (1, 2), 2, error_line=True)() == (1, 2, "")
    assert guard(lambda: None, 0, error_line=True)() == ""

    def stream():
        yield 1
        raise KeyError("gone")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, second = list(guard(stream, 1, error_line=True)())
    assert first == (1, "") and isinstance(second[0], SKIP) and second[1].endswith(": gone</div>")
    assert last_error_html("x", 0).count("x") == 1


def test_events_of_a_tab_get_its_line_and_quiet_or_shell_events_do_not():
    with gr.Blocks() as demo:
        shell_box = gr.Textbox()
        with gr.Tabs():
            with studio_tab("Pairs", id="pairs") as pairs:
                button, out = gr.Button(), gr.Textbox()
                on(button.click, lambda: "ok", None, out)
                on(button.click, lambda: "tick", None, out, quiet=True)
                on(pairs.select, lambda: None, None, None)
        on(demo.load, lambda: "x", None, shell_box)
    line = pairs.evo_error_line
    assert pairs.children[0] is line and line.elem_id == "evo-last-error-pairs"
    outputs = [[b._id for b in fn.outputs] for fn in demo.fns.values()]
    assert outputs == [[out._id, line._id], [out._id], [line._id], [shell_box._id]]
    click = next(iter(demo.fns.values()))
    assert [b._id for b in click.show_progress_on] == [out._id]  # no spinner on the line


@pytest.fixture
def svc(tmp_path: Path):
    s = Services(load_config(), tmp_path, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    yield s
    s.close()


def _tabs(block) -> list:
    found = [block] if isinstance(block, gr.Tab) else []
    for child in getattr(block, "children", []):
        found += _tabs(child)
    return found


def test_every_tab_of_the_studio_has_a_line_and_its_actions_write_it(svc):
    """The built studio: each of the 11 tabs starts with its line; the Pairs tab's Save writes the Pairs line (its
    error, 'choose a pair to edit', then emptied by a save that works)."""
    demo = build_ui(svc)
    tabs = [t for t in _tabs(demo) if not isinstance(getattr(t, "parent", None), gr.Tab)]
    assert len(tabs) == 11
    for t in tabs:
        assert getattr(t, "evo_error_line", None) is t.children[0], t.label
    pairs_line = next(t for t in tabs if t.id == "pairs").evo_error_line
    save = next(fn for fn in demo.fns.values()
                if fn.targets and demo.blocks.get(fn.targets[0][0]) is not None
                and demo.blocks[fn.targets[0][0]].elem_id == "evo-pair-save")
    assert save.outputs[-1] is pairs_line
    pid = svc.store().add_pair("state", "SEARCH: a", "SEARCH: b")
    request = gr.Request(username=None)
    inputs = [None, "x", "y", "", "all", "all", "", "all"]  # pair, chosen, rejected, stage, the four filters
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        failed = save.fn(request, None, *inputs[1:4], request, *inputs[4:])
    assert "choose a pair to edit" in failed[-1] and isinstance(failed[0], SKIP)
    done = save.fn(request, pid, "SEARCH: b", "SEARCH: a", "", request, *inputs[4:])
    assert done[-1] == "" and "saved" in done[0]
