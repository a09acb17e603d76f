"""Layout of the studio: the header and the tabs (each tab's package under `app/tabs/` builds its own). No logic
here: every event calls a tab's handlers and maps its plain result onto components; events are wired through
`app.common.wiring.on`, so an error becomes a one-line message in the page (a toast), never a stack trace, and every
event of the built page checks the user's role (`app.shell.event_roles`).
"""
from __future__ import annotations

import logging

import gradio as gr

from app.common import pickers, roles
from app.common.page_timers import VISIBILITY_JS, PageTimers, Tick
from app.common.services import Services
from app.common.wiring import on, studio_tab
from app.shell import event_roles
from app.tabs.annotate import handlers as annotate_handlers, layout as annotate_tab
from app.tabs.arena import layout as arena_tab
from app.tabs.compare import layout as compare_tab
from app.tabs.dynakrag import layout as dynakrag_tab
from app.tabs.episode import human_handlers, layout as episode_tab
from app.tabs.evaluate import layout as evaluate_tab
from app.tabs.pairs import layout as pairs_tab
from app.tabs.r2ag import layout as r2ag_tab
from app.tabs.traces import layout as traces_tab
from app.tabs.training import handlers as training_handlers, layout as training_tab

__all__ = ["build_ui", "page_header", "HIDE_TABS_JS"]

# the tab buttons a role sees (the handlers refuse the rest on the server: app/common/roles.py). A style rule keyed on each
# button's data-tab-id, not an inline style on the button: Gradio reuses a button element for another tab when the
# tab list changes (it rewrites the text and data-tab-id, not the style), so a button hidden as "Episode" could come
# back labelled "Annotate" and stay hidden
HIDE_TABS_JS = """(role) => {
  if (!role || role === 'admin') return;
  const keep = role === 'reviewer' ? ['annotate', 'review'] : ['annotate'];
  let style = document.getElementById('evo-role-tabs');
  if (!style) {
    style = document.createElement('style');
    style.id = 'evo-role-tabs';
    document.head.appendChild(style);
  }
  style.textContent = 'button[role=tab]' + keep.map((id) => `:not([data-tab-id="${id}"])`).join('')
    + ' { display: none !important; }';
}"""

log = logging.getLogger(__name__)


def build_ui(svc: Services) -> gr.Blocks:
    with gr.Blocks(title="EVO-RAG Studio", fill_width=True, analytics_enabled=False) as demo:
        with gr.Row(equal_height=True):
            gr.Markdown("# EVO-RAG Studio", elem_id="evo-title")
            header = gr.HTML(elem_id="evo-header")
            annotator = gr.Textbox(label="Annotator", placeholder="your name", scale=0, min_width=180,
                                   elem_id="evo-annotator")
        # every event checks the user's role on the server against the tab its components sit in
        # (app.shell.event_roles.check_roles, at the end; app.common.roles.TAB_ACTIONS)
        # each ticks only while what it refreshes can be seen
        timers = PageTimers(fast_s=svc.cfg.studio.timer_fast_s, slow_s=svc.cfg.studio.timer_slow_s)
        with gr.Tabs() as tabs:
            with studio_tab("Episode", id="episode") as tab_episode:
                episode = episode_tab.build_tab(svc, annotator, demo)
            with studio_tab("Pairs", id="pairs") as tab_pairs:
                pairs_reload = pairs_tab.build_tab(svc, demo)
            with studio_tab("Training", id="training") as tab_training:
                training = training_tab.build_tab(svc, episode.policy_dd, tab_training, timers)
            with studio_tab("Compare", id="compare") as tab_compare:
                compare = compare_tab.build_tab(svc)
            with studio_tab("Evaluate", id="evaluate") as tab_eval:
                evaluate_tab.build_tab(svc).wire(tab_eval.select)
            with studio_tab("R²AG tree", id="r2ag") as tab_r2ag:
                r2ag_tab.build_tab(svc).wire(tab_r2ag.select)
            tab_dynakrag = dynakrag_tab.build_tab(svc, timers)
            tab_arena = arena_tab.build_tab(svc)
            tab_traces = traces_tab.build_tab(svc, demo, tabs)
            annotation = annotate_tab.build_tabs(svc, annotator, demo)
        admin_tabs = [tab_episode, tab_pairs, tab_training, tab_compare, tab_eval, tab_r2ag, tab_dynakrag, tab_arena,
                      tab_traces]
        # every tab reloads its data when selected, and the Pairs tab after the Episode tab queues pairs
        episode.reload.wire(tab_episode.select)
        compare_inputs = [compare.policy_a, compare.policy_b, compare.question]
        on(tab_compare.select, lambda data, q: compare_tab.on_select(svc, data, q),
           [compare.data, compare.question], compare_inputs, api_visibility="private")
        on(training.compare.click, lambda name, data, q: (gr.Tabs(selected="compare"),
                                                          *compare_tab.preset_for_adapter(svc, name, data, q)),
           [training.adapter, compare.data, compare.question], [tabs, *compare_inputs], api_visibility="private")
        pairs_reload.wire(tab_pairs.select)
        for queued in episode.pair_events:
            pairs_reload.wire(queued.then)

        header_shown = gr.State(("", ""))

        def tick(request: gr.Request, last) -> tuple[tuple, bool]:
            """The header and the Episode tab's pairs count (an admin's), sent only when they changed; busy while
            the warm-up or (for an admin) a round runs."""
            role = roles.user_role(svc, request)
            admin = role == "admin"
            fresh = (page_header(svc, request, role), human_handlers.pairs_count_html(svc) if admin else "")
            sent = tuple(new if new != old else gr.skip() for new, old in zip(fresh, last or ("", "")))
            busy = bool(svc.warm_status) or (admin and training_handlers.rounds_active(svc))
            return (*sent, fresh), busy

        timers.for_shell(Tick(tick, [header_shown], [header, episode.pairs_count, header_shown]))

        def on_load(request: gr.Request):
            user = getattr(request, "username", None) if request is not None else None
            box = gr.Textbox(value=user, interactive=False) if user else gr.Textbox()
            role = roles.user_role(svc, request)
            admin = role == "admin"
            shown = [gr.Tab(visible=admin) for _ in admin_tabs]  # the page shows what the role may do ...
            review = gr.Tab(visible=roles.allowed(svc, request, "review"))
            picked = gr.Tabs() if admin else gr.Tabs(selected="annotate")  # ... the handlers refuse the rest
            return (page_header(svc, request, role), box, gr.Dropdown(choices=pickers.policy_options(svc)),
                    human_handlers.pairs_count_html(svc), *shown, review, picked, role)

        role_box = gr.Textbox(visible="hidden", elem_id="evo-role")
        loaded = on(demo.load, on_load, None, [header, annotator, episode.policy_dd, episode.pairs_count,
                                               *admin_tabs, annotation.review, tabs, role_box],
                    api_visibility="private")
        # Gradio 6.31 keeps a tab's button when an update hides the tab: the page hides the buttons itself
        loaded.then(None, role_box, None, js=HIDE_TABS_JS, api_visibility="private")
        # the timers tick only for the selected tab of a visible page (app/common/page_timers.py)
        timers.wire(tabs, {t.label: t.id for t in (*admin_tabs, annotation.annotate, annotation.review)},
                    first_tab="episode")
        loaded.then(None, None, None, js=VISIBILITY_JS, api_visibility="private")
        first_fn, first_in, first_out = annotation.first_item
        on(loaded.then, first_fn, first_in, first_out, api_visibility="private")
    return event_roles.check_roles(demo, svc)


def page_header(svc: Services, request: gr.Request | None, role: str) -> str:
    """The header for the session's user of `role`: an admin's shows the live adapter, pairs, rounds and worker; an
    annotator's or reviewer's only their name, role and own progress."""
    if role == "admin":
        return training_handlers.header_status(svc)
    return annotate_handlers.member_header(svc, roles.session_user(request) or roles.LOCAL_USER, role)
