"""The studio's event wiring: every UI callback runs guarded (an error becomes a one-line toast and a log entry,
the page keeps what it shows), plus the helpers every tab shares. Tabs import this; `ui` assembles the tabs and has
`app.shell.event_roles` put the role check in front of every event."""
from __future__ import annotations

import functools
import inspect
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from evorag_core.errors import EvoRagError

from app.common import views
from app.common.handlers import check_typed

__all__ = ["EXAMPLE_SCRIPT", "TIMER_SECONDS", "Reload", "annotator_name", "error_message", "guard", "on"]

log = logging.getLogger(__name__)

EXAMPLE_SCRIPT = '[\n  {"action": "SEARCH", "query": "Ansel Travine"},\n  {"action": "SEARCH", "query": "Mirrow"},\n  {"action": "REFUSE"}\n]'
TIMER_SECONDS = 2.0


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


def guard(fn: Callable, n_outputs: int = 1, *, quiet: bool = False) -> Callable:
    """Run a UI callback so that no error reaches the page as a stack trace: on an error the outputs keep what they
    show (gr.skip()), a toast says in one line what went wrong (not for `quiet` timer ticks), and the server log
    has the details. The app keeps running. Generator callbacks (streamed outputs) stay generators."""

    def fail(exc: BaseException) -> Any:
        msg = _report(fn, exc)
        if not quiet:
            gr.Warning(views.esc(msg), title="Error", duration=15)
        if n_outputs == 0:
            return None
        return gr.skip() if n_outputs == 1 else tuple(gr.skip() for _ in range(n_outputs))

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args: Any, **kwargs: Any) -> Any:
            try:
                yield from fn(*args, **kwargs)
            except Exception as exc:  # UI boundary: report, keep serving
                yield fail(exc)

        return stream

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # UI boundary: report, keep serving
            return fail(exc)
        finally:
            log.debug("%s took %.3f s", fn.__name__, time.perf_counter() - start)

    return wrapper


def on(trigger: Callable, fn: Callable, inputs: Any, outputs: Any, *, quiet: bool = False, **kwargs: Any) -> Any:
    """`trigger(guard(fn), inputs, outputs, **kwargs)` with the guard told how many outputs to leave alone. (The role
    check is not here: `app.shell.event_roles.check_roles` puts it in front of every event of the built page.)"""
    n = len(outputs) if isinstance(outputs, (list, tuple)) else (0 if outputs is None else 1)
    return trigger(guard(fn, n, quiet=quiet), inputs, outputs, **kwargs)


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
