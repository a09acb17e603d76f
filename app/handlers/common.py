"""Small helpers shared by the handler modules."""
from __future__ import annotations

from typing import Any, Callable

from app.policies import FeatureUnavailable
from app.services import Services

__all__ = ["short", "none_if_all", "adapter_lookup"]


def short(text: str, n: int) -> str:
    """`text` on one line, cut to `n` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def none_if_all(value: str | None) -> str | None:
    """A filter value from a picker: 'all' or empty means no filter."""
    return None if value in (None, "", "all") else value


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
