"""`app.common.page_timers.active_timers`: which of the page's timers tick for a selected tab and visibility (the browser
side is tests/app/test_studio_browser.py::test_timers_tick_only_for_the_selected_tab_of_a_visible_page)."""
from __future__ import annotations

from app.common.page_timers import active_timers

OWNERS = [None, "training", "training", "dynakrag"]  # the header's, the Training tab's two events' timer, DynaKrag's


def test_the_shell_ticks_while_visible_a_tab_only_while_selected():
    assert active_timers(OWNERS, "episode", True) == [True, False, False, False]
    assert active_timers(OWNERS, "training", True) == [True, True, True, False]
    assert active_timers(OWNERS, "dynakrag", True) == [True, False, False, True]


def test_nothing_ticks_on_a_hidden_page():
    for tab in ("episode", "training", "dynakrag", None):
        assert active_timers(OWNERS, tab, False) == [False] * len(OWNERS)
