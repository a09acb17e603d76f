"""The studio's event wiring: every UI callback runs guarded (an error becomes a one-line toast and a log entry,
the page keeps what it shows), plus the helpers every tab shares. Tabs import this; `ui` assembles the tabs."""
from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

import gradio as gr

from evorag_core.errors import EvoRagError, PermissionDenied

from app import roles, views
from app.handlers.common import check_typed

if TYPE_CHECKING:
    from app.services import Services

__all__ = ["EXAMPLE_SCRIPT", "TIMER_SECONDS", "Refused", "annotator_name", "error_message", "guard", "on", "requiring",
           "role_checked"]

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
        if not quiet and not isinstance(exc, Refused):
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


class Refused(PermissionDenied):
    """A handler of an admin tab refused for the session's user (`requiring`): logged, never shown as a toast. A
    non-admin's page fires some of those events by itself (a tab's select, a dropdown's change after the page load
    updates it); the refusal is the server's, the page stays quiet."""


# The permission every event wired inside `with requiring(svc, action):` checks on the server (None: no check).
_REQUIRED: contextvars.ContextVar[tuple[Services, str] | None] = contextvars.ContextVar("evorag_required", default=None)
# Triggers that only show data as the page loads or a timer ticks: never refused (a non-admin's page fires them too).
DISPLAY_TRIGGERS = frozenset({"load", "tick"})


@contextlib.contextmanager
def requiring(svc: Services, action: str) -> Iterator[None]:
    """Every event wired with `on` inside this block (a tab's build) checks on the server that the session's user may
    do `action` (`app.roles.ACTIONS`) before its handler runs; page loads and timer ticks are not checked."""
    if action not in roles.ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    token = _REQUIRED.set((svc, action))
    try:
        yield
    finally:
        _REQUIRED.reset(token)


def role_checked(fn: Callable, svc: Services, action: str) -> Callable:
    """`fn` with `roles.require(svc, request, action)` before it runs (a refusal raises `Refused`). The wrapper's
    first parameter is the request (Gradio passes one to a parameter typed gr.Request); `fn` is called without it, so its own parameters, a request
    of its own, event data and progress included, are filled exactly as before. Generators stay generators."""
    sig = inspect.signature(fn)

    def check(request: gr.Request | None) -> None:
        try:
            roles.require(svc, request, action)
        except PermissionDenied as exc:
            raise Refused(str(exc)) from None

    extra = inspect.Parameter("_role_request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request)

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def checked_stream(_role_request: gr.Request, *args: Any, **kwargs: Any) -> Any:
            check(_role_request)
            yield from fn(*args, **kwargs)

        checked: Callable = checked_stream
    else:

        @functools.wraps(fn)
        def checked_call(_role_request: gr.Request, *args: Any, **kwargs: Any) -> Any:
            check(_role_request)
            return fn(*args, **kwargs)

        checked = checked_call
    checked.__signature__ = sig.replace(parameters=[extra, *sig.parameters.values()])  # type: ignore[attr-defined]
    checked.__annotations__ = {**getattr(fn, "__annotations__", {}), "_role_request": gr.Request}
    return checked


def on(trigger: Callable, fn: Callable, inputs: Any, outputs: Any, *, quiet: bool = False, **kwargs: Any) -> Any:
    """`trigger(guard(fn), inputs, outputs, **kwargs)` with the guard told how many outputs to leave alone; inside
    `requiring(...)` the handler also checks the user's role first (a refusal is logged, the outputs left alone)."""
    n = len(outputs) if isinstance(outputs, (list, tuple)) else (0 if outputs is None else 1)
    required = _REQUIRED.get()
    if required is not None and getattr(trigger, "event_name", None) not in DISPLAY_TRIGGERS:
        fn = role_checked(fn, *required)
    return trigger(guard(fn, n, quiet=quiet), inputs, outputs, **kwargs)


def annotator_name(typed: str | None, request: gr.Request | None, limit: int) -> str:
    """Who made an annotation: the logged-in user when the studio requires login, else the name typed in the page
    (ValueError if it is longer than `limit`, studio.max_question_chars)."""
    user = getattr(request, "username", None) if request is not None else None
    return user or check_typed((typed or "").strip(), limit, "annotator name")
