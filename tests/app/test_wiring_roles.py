"""The server-side role check that `app.wiring.requiring` puts in front of every handler of an admin tab: Gradio still
fills the handler's own parameters (its request, event data, progress), generators stay generators, a refused call
never reaches the handler, and page loads / timer ticks are left unchecked."""
from __future__ import annotations

import warnings
from pathlib import Path

import gradio as gr
import pytest
from gradio.helpers import special_args

from app.services import Services
from app.wiring import guard, on, requiring, role_checked
from evorag_core.config import load_config
from evorag_core.errors import PermissionDenied
from tests.paths import DEMO


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


def test_the_handler_gets_its_own_parameters_and_a_refusal_never_runs_it(svc: Services) -> None:
    seen = []

    def handler(a, b, request: gr.Request, progress=gr.Progress()):
        seen.append((a, b, request.username, isinstance(progress, gr.Progress)))
        return a + b

    checked = role_checked(handler, svc, "episodes")
    assert _call(checked, [1, 2], "boss") == 3
    assert seen == [(1, 2, "boss", True)]
    with pytest.raises(PermissionDenied, match=r"ann \(annotator\) may not run episodes"):
        _call(checked, [1, 2], "ann")
    assert len(seen) == 1  # refused before the handler ran
    assert _call(checked, [5, 5], None) == 10  # no login: the single local user is an admin


def test_variadic_handlers_and_generators_keep_their_shape(svc: Services) -> None:
    checked = role_checked(lambda *f: sum(f), svc, "queue")
    assert _call(checked, [1, 2, 3], "boss") == 6

    def stream(n):
        yield from range(n)

    streamed = role_checked(stream, svc, "episodes")
    assert list(_call(streamed, [3], "boss")) == [0, 1, 2]
    with pytest.raises(PermissionDenied):
        list(_call(streamed, [3], "ann"))
    # inside the studio's guard a refusal leaves the outputs alone and is only logged (no toast: a non-admin's page
    # fires some admin-tab events by itself), while any other error still warns the user
    guarded = guard(role_checked(lambda x: x * 2, svc, "episodes"), 1)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert isinstance(_call(guarded, [4], "ann"), type(gr.skip()))
    assert not shown
    assert _call(guarded, [4], "boss") == 8
    with pytest.warns(UserWarning, match="no such question"):
        _call(guard(role_checked(_missing, svc, "episodes"), 1), [4], "boss")


def _missing(x):
    raise ValueError("no such question")


def test_requiring_checks_clicks_but_not_page_loads_or_timer_ticks(svc: Services) -> None:
    with gr.Blocks() as demo:
        box = gr.Number()
        with requiring(svc, "episodes"):
            button = gr.Button()
            timer = gr.Timer(1.0)
            on(button.click, lambda x: x + 1, box, box)
            on(demo.load, lambda: 1, None, box)
            on(timer.tick, lambda x: x, box, box)
        on(box.submit, lambda x: x, box, box)  # outside the block: unchecked
    by_trigger = {fn.targets[0][1]: fn.fn for fn in demo.fns.values()}
    assert set(by_trigger) == {"click", "load", "tick", "submit"}
    assert "_role_request" in str(getattr(by_trigger["click"], "__signature__", ""))
    for name in ("load", "tick", "submit"):
        assert "_role_request" not in str(getattr(by_trigger[name], "__signature__", "")), name
    with pytest.raises(ValueError, match="unknown action"):
        with requiring(svc, "everything"):
            pass
