"""The page's timers: one ticks at a time, only while someone can see what it refreshes, and slowly while nothing runs.

A studio tab left open polled the server every 2 s from each timer (the header's, the Training tab's two events,
DynaKrag's), whatever tab was shown and even in a background browser tab: the Training tab sent 180 requests a minute
and cost the browser ~37 % of a core (bench/results/studio_idle.json). Now:

- each tab with live parts has one timer (`PageTimers.for_tab`), active only while its tab is selected; its tick is
  one event that refreshes the header too (the shell's `Tick`), so while that tab is shown the header's own timer
  stops: one timer, one request per tick;
- every timer stops while the browser tab is hidden (the page's `visibilitychange`: hidden -> stopped; shown again
  -> the timer of the selected tab, or the header's, resumes, and its next tick brings the page up to date);
- a timer ticks every `slow_s` while nothing its tick follows runs, every `fast_s` while something does (a round or
  an evaluation queued or running, the warm-up, a DynaKrag training round): each tick says whether it is busy and
  the interval follows (an update only when it changes). The periods are `[studio] timer_fast_s / timer_slow_s`
  (FAST_SECONDS, SLOW_SECONDS by default).

The page reports visibility by clicking one of two hidden buttons (`#evo-page-hidden`, `#evo-page-shown`) from a
listener installed once at page load (`VISIBILITY_JS`); the server answers with each timer's `active` state. Which
timers run for a (tab, visible) pair is the pure function `active_timers`, the interval the pure `interval_for`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import gradio as gr

from app.common.wiring import on

__all__ = ["FAST_SECONDS", "SLOW_SECONDS", "PageTimers", "Tick", "VISIBILITY_JS", "active_timers", "interval_for"]

FAST_SECONDS = 2.0  # while something the tick follows runs (the default of studio.timer_fast_s)
SLOW_SECONDS = 5.0  # while nothing does (studio.timer_slow_s)

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


@dataclass(frozen=True)
class Tick:
    """What a timer tick refreshes: `fn(request, *inputs)` -> (a value for each of `outputs`, busy), busy meaning
    that something the tick follows is running (the timer then ticks at the fast rate)."""

    fn: Callable[..., tuple[tuple, bool]]
    inputs: list
    outputs: list


def active_timers(owners: list[str | None], tab: str | None, visible: bool) -> list[bool]:
    """Whether each timer runs: `owners[i]` is the tab id of timer i (None: the page's shell, the header). A tab's
    timer runs while the page is visible and its tab is selected; the shell's while the page is visible and the
    selected tab has no timer of its own (a tab's tick refreshes the header too)."""
    return [visible and (owner == tab if owner is not None else tab not in owners) for owner in owners]


def interval_for(busy: bool, fast_s: float = FAST_SECONDS, slow_s: float = SLOW_SECONDS) -> float:
    return fast_s if busy else slow_s


@dataclass
class PageTimers:
    """The page's timers, whose they are and what their ticks refresh; `wire` (once every tab is built) connects the
    ticks, tab switches and visibility. `fast_s` / `slow_s`: the busy and idle periods."""

    fast_s: float = FAST_SECONDS
    slow_s: float = SLOW_SECONDS
    owners: list[str | None] = field(default_factory=list)
    timers: list[gr.Timer] = field(default_factory=list)
    ticks: list[Tick | None] = field(default_factory=list)
    shell: Tick | None = None

    def for_shell(self, tick: Tick) -> gr.Timer:
        """The page's own timer (the header's `tick`): ticks while the page is visible and the selected tab has no
        timer of its own."""
        self.shell = tick
        return self._add(None, gr.Timer(self.slow_s), None)

    def for_tab(self, tab_id: str, tick: Tick) -> gr.Timer:
        """A timer of tab `tab_id` (create it inside the tab) whose ticks run `tick` and the header's: ticks only
        while that tab is selected and visible."""
        return self._add(tab_id, gr.Timer(self.slow_s, active=False), tick)

    def _add(self, owner: str | None, timer: gr.Timer, tick: Tick | None) -> gr.Timer:
        self.owners.append(owner)
        self.timers.append(timer)
        self.ticks.append(tick)
        return timer

    def wire(self, tabs: gr.Tabs, tab_ids: dict[str, str], first_tab: str) -> None:
        """Connect each timer to its tick (one event: the header's tick, then the tab's), and `tabs`' selection
        (`tab_ids`: each tab's label -> id) and the page's visibility to the timers; `first_tab` is the tab the page
        opens on."""
        if self.shell is None:
            raise ValueError("PageTimers.wire: for_shell(tick) was never called")
        for timer, tick in zip(self.timers, self.ticks):
            self._wire_tick(timer, [self.shell] if tick is None else [self.shell, tick], self.fast_s, self.slow_s)
        self._wire_switches(tabs, tab_ids, first_tab)

    @staticmethod
    def _wire_tick(timer: gr.Timer, parts: list[Tick], fast_s: float, slow_s: float) -> None:
        """One event per tick: each part's outputs, then the timer's interval (sent only when it changes)."""
        sizes = [len(p.inputs) for p in parts]

        def tick(request: gr.Request, interval: float | None, *values: Any) -> tuple:
            out: list[Any] = []
            busy = False
            start = 0
            for part, size in zip(parts, sizes):
                got, part_busy = part.fn(request, *values[start:start + size])
                out += got
                busy = busy or part_busy
                start += size
            wanted = interval_for(busy, fast_s, slow_s)
            return (*out, gr.Timer(value=wanted) if interval != wanted else gr.skip())

        inputs = [timer, *(b for p in parts for b in p.inputs)]
        outputs = [*(b for p in parts for b in p.outputs), timer]
        # show_progress_on=[timer]: no output is marked pending while a tick runs. Marked pending (even with
        # show_progress="hidden"), each output's status tracker runs a requestAnimationFrame loop for its elapsed-time
        # counter: the Training tab's 16 outputs drove ~83 frames/s of an idle page (bench/studio_idle.py)
        on(timer.tick, tick, inputs, outputs, quiet=True, show_progress="hidden", show_progress_on=[timer],
           concurrency_limit=None, trigger_mode="once", api_visibility="private")  # never stacked with the next tick

    def _wire_switches(self, tabs: gr.Tabs, tab_ids: dict[str, str], first_tab: str) -> None:
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
