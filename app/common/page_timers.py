"""The page's timers tick only while someone can see what they refresh.

A studio tab left open polled the server every 2 s from each timer (the header's, the Training tab's, DynaKrag's),
whatever tab was shown and even in a background browser tab: over an hour the page grew slow and the server spent a
steady share of a core on pages nobody looked at. Now:

- a tab's timer (`PageTimers.for_tab`) starts inactive and ticks only while its tab is the selected one (the tab's
  own `select` event still refreshes it at once when it is opened);
- every timer stops while the browser tab is hidden (the page's `visibilitychange`: hidden -> stopped; shown again
  -> the header's timer and the selected tab's resume, and their next tick brings them up to date).

The page reports visibility by clicking one of two hidden buttons (`#evo-page-hidden`, `#evo-page-shown`) from a
listener installed once at page load (`VISIBILITY_JS`); the server answers with each timer's `active` state. Which
timers run for a (tab, visible) pair is the pure function `active_timers`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import gradio as gr

from app.common.wiring import TIMER_SECONDS, on

__all__ = ["PageTimers", "VISIBILITY_JS", "active_timers"]

# installed once per page: a click on the matching hidden button whenever the browser tab is hidden or shown again
VISIBILITY_JS = """() => {
  if (window.__evoVisibility) return;
  window.__evoVisibility = true;
  document.addEventListener('visibilitychange', () => {
    const id = document.visibilityState === 'hidden' ? 'evo-page-hidden' : 'evo-page-shown';
    const el = document.getElementById(id);
    (el && el.tagName === 'BUTTON' ? el : el && el.querySelector('button'))?.click();
  });
}"""


def active_timers(owners: list[str | None], tab: str | None, visible: bool) -> list[bool]:
    """Whether each timer runs: `owners[i]` is the tab id of timer i (None: the page's shell, e.g. the header);
    a shell timer runs while the page is visible, a tab's timer while it is visible and its tab is selected."""
    return [visible and (owner is None or owner == tab) for owner in owners]


@dataclass
class PageTimers:
    """The page's timers and whose they are; `wire` (once every tab is built) connects tab switches and visibility."""

    owners: list[str | None] = field(default_factory=list)
    timers: list[gr.Timer] = field(default_factory=list)

    def for_shell(self) -> gr.Timer:
        """A timer of the page itself (the header): ticks whenever the page is visible."""
        return self._add(None, gr.Timer(TIMER_SECONDS))

    def for_tab(self, tab_id: str) -> gr.Timer:
        """A timer of tab `tab_id` (create it inside the tab): ticks only while that tab is selected and visible."""
        return self._add(tab_id, gr.Timer(TIMER_SECONDS, active=False))

    def _add(self, owner: str | None, timer: gr.Timer) -> gr.Timer:
        self.owners.append(owner)
        self.timers.append(timer)
        return timer

    def wire(self, tabs: gr.Tabs, tab_ids: dict[str, str], first_tab: str) -> None:
        """Connect `tabs`' selection (`tab_ids`: each tab's label -> id) and the page's visibility to the timers;
        `first_tab` is the tab the page opens on."""
        state = gr.State({"tab": first_tab, "visible": True})
        hidden = gr.Button(visible="hidden", elem_id="evo-page-hidden")
        shown = gr.Button(visible="hidden", elem_id="evo-page-shown")
        owners = list(self.owners)

        def update(now: dict | None, **change: object) -> tuple:
            now = {"tab": first_tab, "visible": True, **(now or {}), **change}
            return (*(gr.Timer(active=a) for a in active_timers(owners, now["tab"], now["visible"])), now)

        def on_select(now: dict | None, evt: gr.SelectData) -> tuple:
            return update(now, **({"tab": tab_ids[str(evt.value)]} if str(evt.value) in tab_ids else {}))

        outputs = [*self.timers, state]
        common = dict(quiet=True, show_progress="hidden", api_visibility="private", queue=False)
        on(tabs.select, on_select, state, outputs, **common)
        on(hidden.click, lambda now: update(now, visible=False), state, outputs, **common)
        on(shown.click, lambda now: update(now, visible=True), state, outputs, **common)
