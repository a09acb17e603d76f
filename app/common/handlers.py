"""Small helpers shared by the handler modules."""
from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

from app.common.policies import FeatureUnavailable
from app.common.services import Services

__all__ = ["short", "none_if_all", "check_typed", "adapter_lookup", "in_thread"]

T = TypeVar("T")


def short(text: str, n: int) -> str:
    """`text` on one line, cut to `n` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def none_if_all(value: str | None) -> str | None:
    """A filter value from a picker: 'all' or empty means no filter."""
    return None if value in (None, "", "all") else value


def check_typed(text: str, limit: int, what: str) -> str:
    """`text` if it has at most `limit` characters, else ValueError naming `what`, its length and the limit. The one
    limit on every text a person types in the studio (`studio.max_question_chars`): a question, a query or answer
    typed to act in the policy's place, a pair's edited completions, the annotator's name."""
    if len(text) > limit:
        raise ValueError(f"the {what} has {len(text):,} characters; texts typed in the studio are at most "
                         f"{limit:,} characters long (studio.max_question_chars)")
    return text


def adapter_lookup(svc: Services) -> Callable[[str | None], Any]:
    """name -> the store's Adapter row; None -> the active adapter (or None: the base model)."""

    def lookup(name: str | None):
        store = svc.store_or_none()
        if store is None:
            if name is None:
                return None
            raise FeatureUnavailable("adapters are listed in the store, which could not be opened")
        return store.active_adapter() if name is None else store.get_adapter(name)

    return lookup


def in_thread(fn: Callable[[], T], name: str = "studio-work") -> tuple[threading.Event, dict]:
    """Run `fn` in a daemon thread, so that a streaming handler can report progress and see its Stop flag while it
    works; returns (done event, {"value": ...} or {"error": ...})."""
    box: dict = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name=name, daemon=True).start()
    return done, box
