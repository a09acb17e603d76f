"""Who may do what in the studio: the role of the session's user and the server-side check every guarded handler
makes (a hidden button is not a permission: the handler asks `require` before it acts).

Roles come from the users file (`[users.NAME] role = ...`, `evorag studio --auth users.toml`) or the store's users
(`--auth store`). Without a login the studio is single-user on this machine, and that user is an admin.

- annotator: label items of the annotation queue;
- reviewer: that, and resolve disagreements;
- admin: everything: episodes, launch and cancel rounds, activate adapters, manage pairs and the queue, upload data
  files.
A store user with role viewer may do none of these.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import gradio as gr

from evorag_core.errors import PermissionDenied

if TYPE_CHECKING:
    from app.common.services import Services

__all__ = ["ACTIONS", "PERMISSIONS", "TAB_ACTIONS", "session_user", "name_role", "user_role", "allowed",
           "name_allowed", "require"]

ACTIONS: dict[str, str] = {
    "label": "label items of the annotation queue",
    "review": "resolve annotation disagreements",
    "train": "launch or cancel training rounds",
    "adapters": "evaluate, average and activate adapters",
    "queue": "manage the pairs and the annotation queue",
    "episodes": "run episodes, evaluations and comparisons",
    "upload": "upload data files",
}
PERMISSIONS: dict[str, frozenset[str]] = {
    "annotator": frozenset({"label"}),
    "reviewer": frozenset({"label", "review"}),
    "admin": frozenset(ACTIONS),
    "viewer": frozenset(),
}
# The action a tab's events need, by the tab's id (app/shell/event_roles.py checks every event against it; a tab missing
# here fails the build).
TAB_ACTIONS: dict[str, str] = {
    "episode": "episodes", "pairs": "queue", "training": "train", "compare": "episodes", "evaluate": "episodes",
    "r2ag": "episodes", "dynakrag": "episodes", "arena": "episodes", "traces": "episodes",
    "annotate": "label", "review": "review",
}
LOCAL_USER = "local"  # who labels in a studio without a login (unless a name is typed in the header)


def session_user(request: gr.Request | None) -> str | None:
    """The logged-in user of the request, None without a login."""
    return getattr(request, "username", None) if request is not None else None


def user_role(svc: Services, request: gr.Request | None) -> str:
    """The role of the session's user: admin without a login; else from the users file or the store."""
    return name_role(svc, session_user(request))


def name_role(svc: Services, name: str | None) -> str:
    """The role of the user `name`: admin for no name (no login); viewer for a name the users do not know."""
    if not name:
        return "admin"
    if svc.auth_users is not None:
        return svc.auth_users.get(name, "viewer")
    found = [u.role for u in svc.store().list_users() if u.name == name]
    return found[0] if found else "viewer"


def allowed(svc: Services, request: gr.Request | None, action: str) -> bool:
    return name_allowed(svc, session_user(request), action)


def name_allowed(svc: Services, name: str | None, action: str) -> bool:
    """Whether the user `name` (None: no login) may do `action`."""
    return action in PERMISSIONS.get(name_role(svc, name), frozenset())


def require(svc: Services, request: gr.Request | None, action: str) -> None:
    """PermissionDenied unless the session's user may do `action` (one of ACTIONS)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    if not allowed(svc, request, action):
        role = user_role(svc, request)
        raise PermissionDenied(f"{session_user(request)} ({role}) may not {ACTIONS[action]}")
