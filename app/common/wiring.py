"""The studio's event wiring: every UI callback runs guarded (an error becomes a one-line toast and a log entry,
the page keeps what it shows), plus the helpers every tab shares. Tabs import this; `ui` assembles the tabs and has
`app.shell.event_roles` put the role check in front of every event.

A toast goes away after some seconds, so every tab also keeps its last error: each tab is opened with `studio_tab(...)`
(a gr.Tab with a "last error" line at its top), and every event `on(...)` wires from inside a tab (its trigger, else
its first output, sits in it) also writes that line: the error's message with the time on a failure, nothing on the
next success. Timer ticks and reloads (`quiet`) leave the line alone."""
from __future__ import annotations

import functools
import inspect
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import gradio as gr

from evorag_core.errors import EvoRagError

from app.common import views
from app.common.handlers import check_typed

__all__ = ["EXAMPLE_SCRIPT", "Reload", "annotator_name", "error_message", "guard", "on", "studio_tab",
           "last_error_html"]

log = logging.getLogger(__name__)

EXAMPLE_SCRIPT = '[\n  {"action": "SEARCH", "query": "Ansel Travine"},\n  {"action": "SEARCH", "query": "Mirrow"},\n  {"action": "REFUSE"}\n]'


def error_message(exc: BaseException) -> str:
    """A one-line, human-readable message for an error raised by a handler."""
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc) or type(exc).__name__


def _report(fn: Callable, exc: BaseException) -> str:
    """Log an error raised by a UI callback and return the one-line message the page shows."""
    if isinstance(exc, (EvoRagError, ValueError, KeyError, OSError)):
        log.info("%s: %s", fn.__name__, exc)
        return error_message(exc)
    log.error("unexpected error in %s", fn.__name__, exc_info=exc)
    return f"internal error ({type(exc).__name__}): {error_message(exc)} — details are in the studio log"


def last_error_html(msg: str, when: float | None = None) -> str:
    """The tab's "last error" line: the message and the time it happened (server clock)."""
    stamp = time.strftime("%H:%M:%S", time.localtime(when))
    return (f'<div class="evo-last-error" role="alert" data-time="{stamp}"><b>Last error</b> at {stamp}: '
            f"{views.esc(msg)}</div>")


def _with_line(result: Any, n_outputs: int, line: str) -> Any:
    """A callback's result with the value of the tab's error line appended as one more output."""
    if n_outputs == 0:
        return line
    if n_outputs == 1:
        return result, line
    return (*result, line)


def guard(fn: Callable, n_outputs: int = 1, *, quiet: bool = False, error_line: bool = False) -> Callable:
    """Run a UI callback so that no error reaches the page as a stack trace: on an error the outputs keep what they
    show (gr.skip()), a toast says in one line what went wrong (not for `quiet` timer ticks), and the server log
    has the details. The app keeps running. Generator callbacks (streamed outputs) stay generators. With
    `error_line`, the callback has one more output, its tab's last-error line: set on an error, emptied on success."""

    def fail(exc: BaseException) -> Any:
        msg = _report(fn, exc)
        if not quiet:
            gr.Warning(views.esc(msg), title="Error", duration=15)
        if n_outputs == 0:
            kept = None
        else:
            kept = gr.skip() if n_outputs == 1 else tuple(gr.skip() for _ in range(n_outputs))
        return _with_line(kept, n_outputs, last_error_html(msg)) if error_line else kept

    def ok(result: Any) -> Any:
        return _with_line(result, n_outputs, "") if error_line else result

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args: Any, **kwargs: Any) -> Any:
            try:
                for item in fn(*args, **kwargs):
                    yield ok(item)
            except Exception as exc:  # UI boundary: report, keep serving
                yield fail(exc)

        return stream

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # UI boundary: report, keep serving
            return fail(exc)
        finally:
            log.debug("%s took %.3f s", fn.__name__, time.perf_counter() - start)
        return ok(result)

    return wrapper


def _outer_tab(block: Any) -> gr.Tab | None:
    """The outermost gr.Tab `block` sits in (itself when it is one), None outside every tab."""
    found = None
    while block is not None:
        if isinstance(block, gr.Tab):
            found = block
        block = getattr(block, "parent", None)
    return found


def _error_line_of(trigger: Callable, outputs: list) -> gr.HTML | None:
    """The last-error line of the tab an event belongs to: its trigger's tab, else (a page load, a `.then`, a
    trigger outside the tabs) its first output's; None when that is in no tab."""
    owner = _outer_tab(getattr(trigger, "__self__", None))
    if owner is None and outputs:
        owner = _outer_tab(outputs[0])
    return getattr(owner, "evo_error_line", None) if owner is not None else None


def _is_layout(block: Any) -> bool:
    """A layout block (gr.Tab, gr.Tabs, gr.Row, gr.Column, gr.Accordion...), not a component. Gradio 6.31's page
    re-reads the state of every progress target of every event it has run, and of all their descendants, at each status
    change of any event (`update_loading_stati_state` in its Blocks frontend): a Tab among them made every timer tick and
    tab switch walk the whole page (~400 components). So an event that updates a layout block shows its progress on its
    other outputs only."""
    return isinstance(block, gr.blocks.BlockContext) and not isinstance(block, gr.components.Component)


def on(trigger: Callable, fn: Callable, inputs: Any, outputs: Any, *, quiet: bool = False, **kwargs: Any) -> Any:
    """`trigger(guard(fn), inputs, outputs, **kwargs)` with the guard told how many outputs to leave alone, and, for
    an event of a tab opened with `studio_tab(...)` (not `quiet`), the tab's last-error line as one more output (no progress
    animation on it). An output that is a layout block (a Tab, the Tabs) gets no progress animation either
    (`_is_layout`). (The role check is not here: `app.shell.event_roles.check_roles` puts it in front of every
    event of the built page.)"""
    listed = list(outputs) if isinstance(outputs, (list, tuple)) else ([] if outputs is None else [outputs])
    n = len(listed)
    line = None if quiet else _error_line_of(trigger, listed)
    leaves = [b for b in listed if not _is_layout(b)]
    if "show_progress_on" not in kwargs and leaves and len(leaves) < n:
        kwargs["show_progress_on"] = leaves  # never a Tab, Tabs or Row: see _is_layout
    if line is None or line in listed:
        return trigger(guard(fn, n, quiet=quiet), inputs, outputs, **kwargs)
    if "show_progress_on" not in kwargs:
        if n:
            kwargs["show_progress_on"] = listed
        else:
            kwargs.setdefault("show_progress", "hidden")
    return trigger(guard(fn, n, error_line=True), inputs, [*listed, line], **kwargs)


@contextmanager
def studio_tab(label: str, **kwargs: Any) -> Iterator[gr.Tab]:
    """`with studio_tab("Pairs", id="pairs") as t:` a gr.Tab whose first component is its last-error line (empty until an
    event of the tab fails; see the module docstring)."""
    with gr.Tab(label, **kwargs) as opened:
        ident = kwargs.get("id") or label.lower()
        opened.evo_error_line = gr.HTML("", elem_id=f"evo-last-error-{ident}", elem_classes=["evo-last-error-box"])
        yield opened


def annotator_name(typed: str | None, request: gr.Request | None, limit: int) -> str:
    """Who made an annotation: the logged-in user when the studio requires login, else the name typed in the page
    (ValueError if it is longer than `limit`, studio.max_question_chars)."""
    user = getattr(request, "username", None) if request is not None else None
    return user or check_typed((typed or "").strip(), limit, "annotator name")


@dataclass(frozen=True)
class Reload:
    """How a tab reloads its data: `fn(*inputs)` gives new values for `outputs` (wired to tab selects and to the
    actions of other tabs that change the data)."""

    fn: Callable[..., Any]
    inputs: list
    outputs: list

    def wire(self, trigger: Callable) -> Any:

        return on(trigger, self.fn, self.inputs, self.outputs, quiet=True, show_progress="hidden",
                  api_visibility="private")
