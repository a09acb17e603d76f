"""The role check every event of the studio passes on the server, clicks, page loads, timer ticks and `.then` steps
alike: `check_roles(demo, svc)` wraps each registered event function once, after the Blocks are built, so no handler
can be added without it.

What an event may touch follows from where its components sit: a component inside a tab belongs to that tab's action
(`roles.TAB_ACTIONS`; a tab missing there fails the build). For the session's user,
- an event fired by, or reading, a component of a tab the user may not use is refused before its function runs: every
  output is left as it is (gr.skip()), the refusal is logged, the page shows nothing (a non-admin's page fires some
  of those events by itself);
- an event of the page's shell (a load, the header's timer) runs, and each output inside a tab the user may not use is
  left as it is; when that is every output, the function is not run at all.
Without a login the single local user is an admin, and every event runs as before.
"""
from __future__ import annotations

import functools
import inspect
import logging
from typing import TYPE_CHECKING, Any, Callable

import gradio as gr

from app.common import roles

if TYPE_CHECKING:
    from gradio.block_function import BlockFunction

    from app.common.services import Services

__all__ = ["check_roles", "tab_action"]

log = logging.getLogger(__name__)

_QUIET_TRIGGERS = frozenset({"load", "tick", "then"})  # fired by the page itself: refusals logged at debug level


def tab_action(block: Any, *, include_self: bool = True) -> str | None:
    """The action of the tab `block` sits in (None: the page's shell). A tab's own component (its select, its
    visibility) belongs to it only with `include_self`."""
    node = block if include_self else getattr(block, "parent", None)
    actions = []
    while node is not None:
        if isinstance(node, gr.Tab):
            if node.id not in roles.TAB_ACTIONS:
                raise ValueError(f"tab {node.id!r} has no action in app.common.roles.TAB_ACTIONS: every tab needs one")
            actions.append(roles.TAB_ACTIONS[node.id])
        node = getattr(node, "parent", None)
    return actions[-1] if actions else None  # the outermost tab decides


def check_roles(demo: gr.Blocks, svc: Services) -> gr.Blocks:
    """Wrap every event function of `demo` with the role check (see the module docstring); returns `demo`."""
    for block_fn in demo.fns.values():
        if block_fn.fn is not None:
            block_fn.fn = _checked(block_fn, svc, demo.blocks)
    return demo


def _checked(block_fn: BlockFunction, svc: Services, blocks: dict[int, Any]) -> Callable:
    fn = block_fn.fn
    triggers = [blocks.get(target) for target, _ in block_fn.targets]  # None: the page itself (load, then)
    needed = {a for b in [*triggers, *block_fn.inputs] if b is not None and (a := tab_action(b)) is not None}
    out_actions = [tab_action(b, include_self=False) for b in block_fn.outputs]
    event = ",".join(name for _, name in block_fn.targets) or "event"
    quiet = event in _QUIET_TRIGGERS

    def allowed_outputs(request: gr.Request | None) -> list[bool] | None:
        """Which outputs the user may get; None when the event is refused (its function must not run)."""
        role = roles.user_role(svc, request)
        may = roles.PERMISSIONS.get(role, frozenset())
        shown = [a is None or a in may for a in out_actions]
        if not needed <= may or (shown and not any(shown)):
            missing = sorted(needed - may) or sorted(set(filter(None, out_actions)) - may)
            (log.debug if quiet else log.info)("%s (%s): %s (%s) may not %s", block_fn.name, event,
                                               roles.session_user(request), role,
                                               "; ".join(roles.ACTIONS[a] for a in missing))
            return None
        return shown

    n = len(out_actions)
    nothing = None if n == 0 else (gr.skip() if n == 1 else tuple(gr.skip() for _ in range(n)))

    def keep(result: Any, shown: list[bool]) -> Any:
        if all(shown) or n < 2 or not isinstance(result, (tuple, list)) or len(result) != n:
            return result
        return tuple(value if ok else gr.skip() for value, ok in zip(result, shown))

    if inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(fn):
        raise TypeError(f"{block_fn.name}: async event functions are not role-checked yet; write it sync")
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def checked_stream(_role_request: gr.Request, *args: Any, **kwargs: Any) -> Any:
            shown = allowed_outputs(_role_request)
            if shown is None:
                yield nothing
                return
            for item in fn(*args, **kwargs):
                yield keep(item, shown)

        checked: Callable = checked_stream
    else:

        @functools.wraps(fn)
        def checked_call(_role_request: gr.Request, *args: Any, **kwargs: Any) -> Any:
            shown = allowed_outputs(_role_request)
            return nothing if shown is None else keep(fn(*args, **kwargs), shown)

        checked = checked_call
    extra = inspect.Parameter("_role_request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request)
    sig = inspect.signature(fn)
    checked.__signature__ = sig.replace(parameters=[extra, *sig.parameters.values()])  # type: ignore[attr-defined]
    checked.__annotations__ = {**getattr(fn, "__annotations__", {}), "_role_request": gr.Request}
    return checked
