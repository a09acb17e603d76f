"""The server-side role check `app.shell.event_roles.check_roles` puts in front of every event of a built page: Gradio still
fills the handler's own parameters (its request, event data, progress), generators stay generators, a refused call
never reaches the handler, and page loads / timer ticks are checked too (#44 item 3): a shell event runs with the
outputs inside a tab the user may not use left as they are."""
from __future__ import annotations

import warnings
from pathlib import Path

import gradio as gr
import pytest
from gradio.helpers import special_args

from app.common.services import Services
from app.common.wiring import guard, on
from app.shell.event_roles import check_roles
from evorag_core.config import load_config
from tests.paths import DEMO

SKIP = type(gr.skip())


@pytest.fixture
def svc(tmp_path: Path):
    s = Services(load_config(), tmp_path, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    s.auth_users = {"ann": "annotator", "boss": "admin"}
    yield s
    s.close()


def _call(fn, inputs: list, user: str | None):
    """Call `fn` as Gradio does: special parameters (request, progress, event data) inserted by their positions."""
    request = gr.Request(username=user)
    args, _, _, _ = special_args(fn, list(inputs), request=request)
    return fn(*args)


def _by_trigger(demo: gr.Blocks) -> dict[str, object]:
    return {fn.targets[0][1]: fn.fn for fn in demo.fns.values()}


def test_the_handler_gets_its_own_parameters_and_a_refusal_never_runs_it(svc: Services) -> None:
    seen = []

    def handler(a, b, request: gr.Request, progress=gr.Progress()):
        seen.append((a, b, request.username, isinstance(progress, gr.Progress)))
        return a + b

    with gr.Blocks() as demo:
        with gr.Tabs():
            with gr.Tab("Episode", id="episode"):
                x, y, total = gr.Number(), gr.Number(), gr.Number()
                button = gr.Button()
                button.click(handler, [x, y], total)
    checked = _by_trigger(check_roles(demo, svc))["click"]
    assert _call(checked, [1, 2], "boss") == 3
    assert seen == [(1, 2, "boss", True)]
    assert isinstance(_call(checked, [1, 2], "ann"), SKIP)  # the output keeps what it shows ...
    assert len(seen) == 1  # ... and the handler never ran
    assert _call(checked, [5, 5], None) == 10  # no login: the single local user is an admin


def test_variadic_handlers_and_generators_keep_their_shape(svc: Services) -> None:
    def stream(n):
        yield from range(n)

    with gr.Blocks() as demo:
        with gr.Tabs():
            with gr.Tab("Pairs", id="pairs"):
                a, b, c = gr.Number(), gr.Number(), gr.Number()
                on(gr.Button().click, lambda *f: sum(f), [a, b, c], a)
            with gr.Tab("Episode", id="episode"):
                n = gr.Number()
                gr.Button().click(stream, n, n)
    fns = [fn.fn for fn in check_roles(demo, svc).fns.values()]
    assert _call(fns[0], [1, 2, 3], "boss") == 6
    assert list(_call(fns[1], [3], "boss")) == [0, 1, 2]
    refused = list(_call(fns[1], [3], "ann"))
    assert len(refused) == 1 and isinstance(refused[0], SKIP)
    # a refusal is only logged (a non-admin's page fires some admin-tab events by itself), while any other error in
    # a handler `on` wired still warns the user
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert isinstance(_call(fns[0], [1, 2, 3], "ann"), SKIP)
    assert not shown
    with pytest.warns(UserWarning, match="no such question"):
        _call(check_roles_guarded(svc), [0], "boss")


def check_roles_guarded(svc: Services):
    with gr.Blocks() as demo:
        with gr.Tabs():
            with gr.Tab("Episode", id="episode"):
                n = gr.Number()
                on(n.submit, _missing, n, n)
    return next(iter(check_roles(demo, svc).fns.values())).fn


def _missing(x):
    raise ValueError("no such question")


def test_loads_and_ticks_are_checked_and_shell_outputs_still_come(svc: Services) -> None:
    """A load with one shell output and one Episode output: the annotator gets the first, the second left as it is;
    a load reading an Episode component and a tick of a timer inside the Episode tab never run for the annotator;
    the admin gets everything."""
    ran = []

    def both():
        ran.append("both")
        return "header", "episode data"

    def episode_only(x):
        ran.append("episode_only")
        return x

    with gr.Blocks() as demo:
        header = gr.HTML()
        with gr.Tabs():
            with gr.Tab("Episode", id="episode") as tab:
                box = gr.Textbox()
                timer = gr.Timer(1.0)
        on(demo.load, both, None, [header, box])
        on(demo.load, episode_only, box, box)
        on(timer.tick, episode_only, box, box)
        on(demo.load, lambda: gr.Tab(visible=False), None, tab)  # a tab's own visibility is the shell's to set
    fns = [fn.fn for fn in check_roles(demo, svc).fns.values()]
    first = _call(fns[0], [], "ann")
    assert first[0] == "header" and isinstance(first[1], SKIP)
    assert isinstance(_call(fns[1], ["x"], "ann"), SKIP) and isinstance(_call(fns[2], ["x"], "ann"), SKIP)
    assert ran == ["both"]
    assert not isinstance(_call(fns[3], [], "ann"), SKIP)
    assert _call(fns[0], [], "boss") == ("header", "episode data")
    assert _call(fns[1], ["x"], "boss") == "x" and _call(fns[2], ["y"], "boss") == "y"


def test_a_tab_without_an_action_fails_the_build(svc: Services) -> None:
    with gr.Blocks() as demo:
        with gr.Tabs():
            with gr.Tab("New", id="new-tab"):
                box = gr.Textbox()
                box.submit(lambda x: x, box, box)
    with pytest.raises(ValueError, match="'new-tab' has no action in app.common.roles.TAB_ACTIONS"):
        check_roles(demo, svc)
