"""Studio tab: the R²AG retrieval tree (layout and wiring; the handlers and the view are in `app.r2ag_view`).

Expand once / Expand to the end stream a status line while an expansion runs and the tree after each one; Stop sets
the session's flag, which the running stream reads at its next tick (0.5 s): the expansion in progress is interrupted
(its steering decode stops before the next token) and discarded, the page says Stopped and shows the tree after the
last finished expansion. gr.Plot (Gradio 6.31) has no point-selection event, so a small script forwards plotly's click
on a node to a hidden textbox (`evo-r2ag-clicked`) whose change selects the node.
"""
from __future__ import annotations

import threading

import gradio as gr

from evorag_core.methods.r2ag.tree import new_tree

from app.episode_tab import Reload
from app.handlers import data_choices, load_data
from app.r2ag_figure import node_detail_html
from app.r2ag_view import STEERING_CHOICES, grow_tree, select_node, show_tree, start_tree
from app.services import Services
from app.views import empty_figure, message_html
from app.wiring import on

__all__ = ["CLICK_JS", "build_tab"]

_stop_flags: dict[str, threading.Event] = {}  # browser session -> its running expansion's Stop flag


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or ""


# plotly's click on a node point -> the hidden textbox #evo-r2ag-clicked ("<node id>@<time>", so that clicking the
# same node again is still a change). Installed once; it re-attaches whenever the plot's div lost the listener.
CLICK_JS = """() => {
  if (window.__evoR2agPoll) return;
  const handler = (ev) => {
    const pt = ((ev && ev.points) || []).find((p) => p.data && p.data.meta === 'r2ag-nodes');
    const box = document.querySelector('#evo-r2ag-clicked textarea, #evo-r2ag-clicked input');
    if (!pt || !box) return;
    box.value = String(pt.customdata) + '@' + Date.now();
    box.dispatchEvent(new Event('input', {bubbles: true}));
  };
  window.__evoR2agPoll = setInterval(() => {
    const div = document.querySelector('#evo-r2ag-figure .js-plotly-plot');
    if (!div || typeof div.on !== 'function') return;
    const has = div._ev && typeof div._ev.listeners === 'function'
      ? div._ev.listeners('plotly_click').includes(handler) : div.__evoR2ag === handler;
    if (!has) { div.on('plotly_click', handler); div.__evoR2ag = handler; }
  }, 300);
}"""


def build_tab(svc: Services) -> Reload:
    """The tab's layout and wiring (inside a `gr.Tab`); returns how it reloads its data (the data files offered)
    when selected (`episode_tab.Reload`)."""
    state = gr.State(None)
    busy = gr.State(False)  # an expansion is streaming (Stop has something to stop)
    with gr.Row():
        files = data_choices(svc)
        data_dd = gr.Dropdown(choices=files, value=files[0][1], label="Data file", allow_custom_value=True, scale=2)
        first = load_data(svc, files[0][1]).questions
        question_dd = gr.Dropdown(choices=first, value=first[0][1] if first else None, label="Question", scale=3,
                                  elem_id="evo-r2ag-question")
        steering_dd = gr.Dropdown(list(STEERING_CHOICES), value="scripted", label="Steering", scale=1,
                                  elem_id="evo-r2ag-steering")
        iterations = gr.Number(value=svc.cfg.r2ag.max_iterations, precision=0, minimum=1, maximum=10,
                               label="L_max", scale=1, elem_id="evo-r2ag-tab-iterations")
    with gr.Row():
        start_btn = gr.Button("Start tree", variant="primary", elem_id="evo-r2ag-start")
        step_btn = gr.Button("Expand once", elem_id="evo-r2ag-step")
        run_btn = gr.Button("Expand to the end", elem_id="evo-r2ag-run")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="evo-r2ag-stop")
        pruning = gr.Checkbox(value=False, label="Show pruning", elem_id="evo-r2ag-pruning")
    progress = gr.HTML(elem_id="evo-r2ag-progress")
    status = gr.Markdown(elem_id="evo-r2ag-status")
    with gr.Row():
        with gr.Column(scale=3, min_width=480):
            figure = gr.Plot(empty_figure("R²AG retrieval tree", "start a tree to see it"), show_label=False,
                             elem_id="evo-r2ag-figure")
        with gr.Column(scale=2, min_width=320):
            node_dd = gr.Dropdown(choices=[], value=None, label="Node (or click one in the tree)",
                                  elem_id="evo-r2ag-node")
            detail = gr.HTML(node_detail_html(new_tree(""), None), elem_id="evo-r2ag-detail")
            clicked = gr.Textbox(visible="hidden", elem_id="evo-r2ag-clicked")
    rewards_box = gr.HTML(elem_id="evo-r2ag-rewards")
    outputs = [figure, rewards_box, status, node_dd, detail, state]

    def unpack(pair):
        view, session = pair
        value = None if view.selected is None else str(view.selected)
        return (view.figure, view.rewards, view.status, gr.Dropdown(choices=view.nodes, value=value), view.detail,
                session)

    def shown(view):
        return (gr.skip(),) * 2 if view is None else (view.figure, view.detail)

    on(data_dd.change, lambda path: gr.Dropdown(choices=load_data(svc, path).questions, value=None), data_dd,
       question_dd, api_visibility="private")
    on(start_btn.click, lambda p, q, s, n: ("", *unpack(start_tree(svc, p, q, s, n))),
       [data_dd, question_dd, steering_dd, iterations], [progress, *outputs])

    def growing(to_end: bool):
        def stream(sess, show, node, request: gr.Request):
            flag = _stop_flags[_session(request)] = threading.Event()
            try:
                for up in grow_tree(svc, sess, flag, to_end=to_end, show_pruning=show, selected=node):
                    if up.view is None:
                        yield (up.status, *(gr.skip(),) * len(outputs), True)
                    else:
                        yield (up.status, *unpack((up.view, up.session)), not up.stopped)
                    if up.stopped:
                        return
            finally:
                flag.set()
            yield (*(gr.skip(),) * (len(outputs) + 1), False)  # done: Stop has nothing to stop any more

        return stream

    def on_stop(was_running, request: gr.Request):
        flag = _stop_flags.get(_session(request))
        if not was_running or flag is None or flag.is_set():
            return message_html("Nothing is expanding.", "info")
        flag.set()  # the running stream ends itself with the stopped view
        return gr.skip()

    streamed = [progress, *outputs, busy]
    on(step_btn.click, growing(False), [state, pruning, node_dd], streamed, show_progress="minimal")
    on(run_btn.click, growing(True), [state, pruning, node_dd], streamed, show_progress="minimal")
    on(stop_btn.click, on_stop, busy, progress, api_visibility="private", show_progress="hidden")
    on(pruning.change, lambda sess, show, node: shown(show_tree(svc, sess, show, node)), [state, pruning, node_dd],
       [figure, detail])
    on(node_dd.input, lambda sess, show, node: shown(select_node(svc, sess, show, node)), [state, pruning, node_dd],
       [figure, detail])

    def clicked_node(sess, show, value):
        if not value:
            return gr.skip(), gr.skip(), gr.skip()
        view = select_node(svc, sess, show, value)
        return view.figure, view.detail, gr.Dropdown(value=str(view.selected))

    on(clicked.change, clicked_node, [state, pruning, clicked], [figure, detail, node_dd], api_visibility="private")
    for installed_on in (start_btn.click, figure.change):  # installs the click forwarder (once per page)
        installed_on(None, None, None, js=CLICK_JS, api_visibility="private")

    return Reload(lambda: gr.Dropdown(choices=data_choices(svc)), [], [data_dd])
