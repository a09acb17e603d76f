"""Layout of the studio: the header and the tabs (each tab module builds its own). No logic here: every event calls
a function of `handlers` and maps its plain result onto components; events are wired through `app.wiring.on`, so an
error becomes a one-line message in the page (a toast), never a stack trace, and every event of the built page checks
the user's role (`app.event_roles`).
"""
from __future__ import annotations

import logging

import gradio as gr

from evorag_core.env.scheduler import STAGES
from evorag_core.store.records import PAIR_SOURCES, PAIR_STATUSES

from app import (annotate_tab, arena_tab, compare_tab, dynakrag_tab, episode_tab, event_roles, handlers, r2ag_tab,
                 roles, traces_tab, training_tab, views)
from app.episode_tab import Reload
from app.handlers import annotate as annotate_handlers
from app.page_timers import VISIBILITY_JS, PageTimers
from app.services import Services
from app.wiring import EXAMPLE_SCRIPT, on

__all__ = ["build_ui", "page_header", "HIDE_TABS_JS"]

# the tab buttons a role sees (the handlers refuse the rest on the server: app/roles.py). A style rule keyed on each
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
        # (app.event_roles.check_roles, at the end; app.roles.TAB_ACTIONS)
        timers = PageTimers()  # each ticks only while what it refreshes can be seen
        with gr.Tabs() as tabs:
            with gr.Tab("Episode", id="episode") as tab_episode:
                episode = episode_tab.build_tab(svc, annotator, demo)
            with gr.Tab("Pairs", id="pairs") as tab_pairs:
                pairs_reload = _pairs_tab(svc, demo)
            with gr.Tab("Training", id="training") as tab_training:
                training = training_tab.build_tab(svc, episode.policy_dd, tab_training, timers)
            with gr.Tab("Compare", id="compare") as tab_compare:
                compare = compare_tab.build_tab(svc)
            with gr.Tab("Evaluate", id="evaluate") as tab_eval:
                _eval_tab(svc).wire(tab_eval.select)
            with gr.Tab("R²AG tree", id="r2ag") as tab_r2ag:
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

        def tick(last, request: gr.Request):
            """The header and the Episode tab's pairs count (an admin's), sent only when they changed."""
            role = roles.user_role(svc, request)
            fresh = (page_header(svc, request, role), handlers.pairs_count_html(svc) if role == "admin" else "")
            sent = tuple(new if new != old else gr.skip() for new, old in zip(fresh, last or ("", "")))
            return (*sent, fresh)

        timer = timers.for_shell()
        on(timer.tick, tick, header_shown, [header, episode.pairs_count, header_shown], quiet=True,
           show_progress="hidden", concurrency_limit=None, trigger_mode="once", api_visibility="private")

        def on_load(request: gr.Request):
            user = getattr(request, "username", None) if request is not None else None
            box = gr.Textbox(value=user, interactive=False) if user else gr.Textbox()
            role = roles.user_role(svc, request)
            admin = role == "admin"
            shown = [gr.Tab(visible=admin) for _ in admin_tabs]  # the page shows what the role may do ...
            review = gr.Tab(visible=roles.allowed(svc, request, "review"))
            picked = gr.Tabs() if admin else gr.Tabs(selected="annotate")  # ... the handlers refuse the rest
            return (page_header(svc, request, role), box, gr.Dropdown(choices=handlers.policy_options(svc)),
                    handlers.pairs_count_html(svc), *shown, review, picked, role)

        role_box = gr.Textbox(visible="hidden", elem_id="evo-role")
        loaded = on(demo.load, on_load, None, [header, annotator, episode.policy_dd, episode.pairs_count,
                                               *admin_tabs, annotation.review, tabs, role_box],
                    api_visibility="private")
        # Gradio 6.31 keeps a tab's button when an update hides the tab: the page hides the buttons itself
        loaded.then(None, role_box, None, js=HIDE_TABS_JS, api_visibility="private")
        # the timers tick only for the selected tab of a visible page (app/page_timers.py)
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
        return handlers.header_status(svc)
    return annotate_handlers.member_header(svc, roles.session_user(request) or roles.LOCAL_USER, role)


def _pairs_tab(svc: Services, demo: gr.Blocks) -> Reload:
    with gr.Row():
        source = gr.Dropdown(["all", *PAIR_SOURCES], value="all", label="Source", elem_id="evo-f-source")
        status = gr.Dropdown(["all", *PAIR_STATUSES], value="all", label="Status", elem_id="evo-f-status")
        annot = gr.Textbox(label="Annotator", placeholder="all", elem_id="evo-f-annotator")
        stage = gr.Dropdown(["all", *STAGES], value="all", label="Stage", elem_id="evo-f-stage")
        refresh = gr.Button("Refresh", elem_id="evo-pairs-refresh", scale=0, min_width=120)
    counts = gr.HTML(elem_id="evo-pair-counts")
    table = gr.HTML(elem_id="evo-pairs-box")
    with gr.Accordion("Edit or discard a pair", open=True):
        with gr.Row():
            pair_dd = gr.Dropdown(label="Pair", choices=[], elem_id="evo-pair-pick", scale=1)
            pair_stage = gr.Textbox(label="Stage", scale=1)
        prompt = gr.Textbox(label="Prompt (state)", lines=4, max_lines=12, interactive=False)
        with gr.Row():
            chosen = gr.Textbox(label="Chosen (preferred)", lines=2)
            rejected = gr.Textbox(label="Rejected", lines=2)
        with gr.Row():
            save = gr.Button("Save edit", elem_id="evo-pair-save")
            discard = gr.Button("Discard", variant="stop", elem_id="evo-pair-discard")
            restore = gr.Button("Restore", elem_id="evo-pair-restore")
        edit_msg = gr.HTML()

    filters = [source, status, annot, stage]

    def show(*f):
        view = handlers.pairs_view(svc, *f)
        return view.counts, view.table, gr.Dropdown(choices=view.ids)

    outs = [counts, table, pair_dd]
    on(refresh.click, show, filters, outs)
    for f in (source, status, stage):
        on(f.input, show, filters, outs)
    on(annot.submit, show, filters, outs)
    on(demo.load, show, filters, outs, api_visibility="private")
    on(pair_dd.input, lambda i: handlers.pair_fields(svc, i), pair_dd, [prompt, chosen, rejected, pair_stage])

    def act(fn):
        def run(pid, c, r, s, request: gr.Request, *f):
            roles.require(svc, request, "queue")
            msg = fn(pid, c, r, s)
            return (views.message_html(msg, "ok"), *show(*f))
        return run

    on(save.click, act(lambda pid, c, r, s: handlers.edit_pair(svc, pid, c, r, s)),
       [pair_dd, chosen, rejected, pair_stage, *filters], [edit_msg, *outs])
    on(discard.click, act(lambda pid, c, r, s: handlers.discard_pair(svc, pid)),
       [pair_dd, chosen, rejected, pair_stage, *filters], [edit_msg, *outs])
    on(restore.click, act(lambda pid, c, r, s: handlers.restore_pair(svc, pid)),
       [pair_dd, chosen, rejected, pair_stage, *filters], [edit_msg, *outs])
    return Reload(show, filters, outs)


def _eval_tab(svc: Services) -> Reload:
    runs = gr.State({})
    with gr.Row():
        files = handlers.data_choices(svc)
        data_dd = gr.Dropdown(choices=files, value=files[0][1], label="Data file", allow_custom_value=True, scale=2)
        method = gr.Dropdown(handlers.eval_method_options(svc), value="oracle", label="Method", scale=2,
                             elem_id="evo-eval-method")
        start = gr.Number(value=0, precision=0, minimum=0, label="From question #", scale=1)
        count = gr.Number(value=10, precision=0, minimum=1, label="How many", scale=1, elem_id="evo-eval-count")
        run_btn = gr.Button("Run evaluation", variant="primary", scale=1, elem_id="evo-eval-run")
    script = gr.Code(EXAMPLE_SCRIPT, language="json", label="Script (for the script method)", lines=4, visible=False,
                     elem_id="evo-eval-script")
    summary = gr.HTML(handlers.eval_summary({}), elem_id="evo-eval-summary-box")
    gr.Markdown("### Paired bootstrap between two runs")
    with gr.Row():
        run_a = gr.Dropdown(label="Run A", choices=[])
        run_b = gr.Dropdown(label="Run B", choices=[])
        resamples = gr.Number(value=10_000, precision=0, minimum=100, label="Resamples")
        compare = gr.Button("Compare", scale=0, min_width=120, elem_id="evo-compare")
    boot = gr.HTML(elem_id="evo-bootstrap-box")
    gr.Markdown("### Per-question drill-down")
    with gr.Row():
        run_pick = gr.Dropdown(label="Run", choices=[], elem_id="evo-eval-run-pick")
        q_pick = gr.Dropdown(label="Question", choices=[], elem_id="evo-eval-question")
        open_btn = gr.Button("Open trace", scale=0, min_width=120)
    trace_head = gr.HTML()
    trace_steps = gr.HTML(elem_id="evo-trace-box")
    trace_plot = gr.Plot(views.empty_figure("Signal contributions w·r per step", "open a trace to see it"),
                         label="Contributions")

    def on_run(state, data, m, scr, s, c, progress=gr.Progress()):
        def report(done: int, total: int, res) -> None:
            progress((done, total), desc=f"{res.question_id}: EM {res.em:.0f}")

        new_runs, run = handlers.run_eval(svc, state, data, m, scr or "", s, c, report)
        names = list(new_runs)
        return (new_runs, handlers.eval_summary(new_runs), gr.Dropdown(choices=names, value=names[0]),
                gr.Dropdown(choices=names, value=names[-1]), gr.Dropdown(choices=names, value=run.name),
                gr.Dropdown(choices=handlers.eval_questions(new_runs, run.name), value=None))

    method.change(lambda m: gr.Code(visible=m == "script"), method, script, api_visibility="private")
    on(run_btn.click, on_run, [runs, data_dd, method, script, start, count],
       [runs, summary, run_a, run_b, run_pick, q_pick])
    on(compare.click, lambda st, a, b, n: handlers.compare_runs(st, a, b, n), [runs, run_a, run_b, resamples], boot)
    on(run_pick.input, lambda st, name: gr.Dropdown(choices=handlers.eval_questions(st, name), value=None),
       [runs, run_pick], q_pick)
    on(open_btn.click, lambda st, name, q: handlers.drill_down(svc, st, name, q), [runs, run_pick, q_pick],
       [trace_head, trace_steps, trace_plot])
    on(q_pick.input, lambda st, name, q: handlers.drill_down(svc, st, name, q), [runs, run_pick, q_pick],
       [trace_head, trace_steps, trace_plot])

    def reload():
        """On select: the data files (uploads) and the methods (new adapters) offered."""
        return (gr.Dropdown(choices=handlers.data_choices(svc)),
                gr.Dropdown(choices=handlers.eval_method_options(svc)))

    return Reload(reload, [], [data_dd, method])
