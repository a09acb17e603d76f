"""`app.common.page_timers`: which of the page's timers tick for a selected tab and visibility, and how fast, as the
built studio wires them, at the default periods and at the config's (the browser side is
tests/app/test_page_timers_browser.py)."""
from __future__ import annotations

import gradio as gr
import pytest
from gradio.helpers import special_args

from app.common.page_timers import FAST_SECONDS, SLOW_SECONDS, active_timers, interval_for
from app.common.services import Services
from app.shell.ui import build_ui
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import ConfigError
from tests.paths import DEMO

OWNERS = [None, "training", "dynakrag"]  # the header's timer, the Training tab's, DynaKrag's
SKIP = type(gr.skip())


def test_one_timer_ticks_at_a_time_the_selected_tabs_or_else_the_headers():
    """A tab's tick refreshes the header too: while Training or DynaKrag is shown the header's own timer stops."""
    assert active_timers(OWNERS, "episode", True) == [True, False, False]
    assert active_timers(OWNERS, "training", True) == [False, True, False]
    assert active_timers(OWNERS, "dynakrag", True) == [False, False, True]


def test_nothing_ticks_on_a_hidden_page():
    for tab in ("episode", "training", "dynakrag", None):
        assert active_timers(OWNERS, tab, False) == [False] * len(OWNERS)


def test_slow_unless_something_runs():
    assert interval_for(False) == SLOW_SECONDS >= 5.0
    assert interval_for(True) == FAST_SECONDS < SLOW_SECONDS


@pytest.fixture()
def built(tmp_path):
    svc = Services(load_config(), tmp_path, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    yield svc, build_ui(svc)
    svc.close()


def _tick_events(demo: gr.Blocks) -> dict[gr.Timer, object]:
    """Each timer of the page -> the event its tick runs (exactly one each)."""
    found: dict[gr.Timer, list] = {}
    for fn in demo.fns.values():
        for target, name in fn.targets:
            if name == "tick":
                found.setdefault(demo.blocks[target], []).append(fn)
    assert all(len(events) == 1 for events in found.values()), "a timer with more than one tick event"
    return {timer: events[0] for timer, events in found.items()}


def _tick(event, interval: float) -> tuple:
    """Run a tick event as Gradio does (its request inserted), the page's timer at `interval`, each other input at
    its default (states: a fresh page)."""
    values = [interval, *(b.value for b in event.inputs[1:])]
    args, _, _, _ = special_args(event.fn, values, request=gr.Request(username=None))
    return event.fn(*args)


def test_an_idle_training_tab_polls_at_the_slow_rate_and_a_queued_round_speeds_it_up(built):
    """The Training tab's timer as wired: created at SLOW_SECONDS; a tick with no round queued or running answers
    nothing for a page already at the slow rate and SLOW_SECONDS for one at the fast rate; once a round is queued,
    FAST_SECONDS. The same for the header's timer; every tick's last output is its own timer."""
    svc, demo = built
    ticks = _tick_events(demo)
    assert len(ticks) == 3  # the header's, the Training tab's, DynaKrag's: one event each
    by_tab = {_tab_of(t): t for t in ticks}
    assert set(by_tab) == {None, "training", "dynakrag"}
    training, header = by_tab["training"], by_tab[None]
    for timer in ticks:
        assert timer.value == SLOW_SECONDS and ticks[timer].inputs[0] is timer and ticks[timer].outputs[-1] is timer
    assert training is not header and not training.active and header.active

    assert isinstance(_tick(ticks[training], SLOW_SECONDS)[-1], SKIP)  # idle, already slow: nothing sent
    slowed = _tick(ticks[training], FAST_SECONDS)[-1]
    assert isinstance(slowed, gr.Timer) and slowed.value == SLOW_SECONDS
    svc.store().enqueue_round("dpo", {"pairs": 1})
    for timer in (training, header):
        hurried = _tick(ticks[timer], SLOW_SECONDS)[-1]
        assert isinstance(hurried, gr.Timer) and hurried.value == FAST_SECONDS
        assert isinstance(_tick(ticks[timer], FAST_SECONDS)[-1], SKIP)


def _tab_of(block) -> str | None:
    """The id of the tab `block` sits in (None: the page's shell)."""
    while block is not None and not isinstance(block, gr.Tab):
        block = getattr(block, "parent", None)
    return block.id if block is not None else None


def test_the_periods_are_the_configs(tmp_path):
    """`[studio] timer_fast_s / timer_slow_s`: every timer is created at the slow period and hurried to the fast one
    once a round is queued; an idle period shorter than the busy one is refused."""
    cfg = apply_overrides(load_config(), {"studio.timer_fast_s": 0.5, "studio.timer_slow_s": 1.5})
    svc = Services(cfg, tmp_path, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    try:
        ticks = _tick_events(build_ui(svc))
        assert [t.value for t in ticks] == [1.5, 1.5, 1.5]
        svc.store().enqueue_round("dpo", {"pairs": 1})
        assert {_tick(event, 1.5)[-1].value for event in ticks.values()} == {0.5}
    finally:
        svc.close()
    with pytest.raises(ConfigError, match=r"studio.timer_slow_s \(1.0\) must be at least studio.timer_fast_s"):
        apply_overrides(load_config(), {"studio.timer_slow_s": 1.0})
