"""Studio tab: the R²AG retrieval tree (layout and wiring; the handlers and the view are in `app.tabs.r2ag.handlers`).

Expand once / Expand to the end stream a status line while an expansion runs and the tree after each one; Stop sets
the session's flag, which the running stream reads at its next tick (0.5 s): the expansion in progress is interrupted
(its steering decode stops before the next token) and discarded, the page says Stopped and shows the tree after the
last finished expansion. gr.Plot (Gradio 6.31) has no point-selection event, so a small script forwards plotly's click
on a node to a hidden textbox (`evo-r2ag-clicked`) whose change selects the node.
"""
from __future__ import annotations

import threading

from types import SimpleNamespace

import gradio as gr

from evorag_core.methods.r2ag.tree import new_tree

from app.common.pickers import data_choices, load_data
from app.common.services import Services
from app.common.views import empty_figure, message_html
from app.common.wiring import Reload, on
from app.tabs.r2ag.figure import node_detail_html
from app.tabs.r2ag.handlers import STEERING_CHOICES, grow_tree, select_node, show_tree, start_tree
from app.common.session import session_key as _session

__all__ = ["CLICK_JS", "build_tab"]

_stop_flags: dict[str, threading.Event] = {}  # browser session -> its running expansion's Stop flag


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
    when selected (`app.common.wiring.Reload`)."""
    c = SimpleNamespace(state=gr.State(None), busy=gr.State(False))  # busy: an expansion is streaming (Stop can stop)
    _controls(svc, c)
    _tree_panels(c)
    return _wire(svc, c)


def _controls(svc: Services, c: SimpleNamespace) -> None:
    """Data file, question, steering, L_max; Start / Expand once / Expand to the end / Stop, Show pruning."""
    with gr.Row():
        files = data_choices(svc)
        c.data_dd = gr.Dropdown(choices=files, value=files[0][1], label="Data file", allow_custom_value=True, scale=2)
        first = load_data(svc, files[0][1]).questions
        c.question_dd = gr.Dropdown(choices=first, value=first[0][1] if first else None, label="Question", scale=3,
                                  elem_id="evo-r2ag-question")
        c.steering_dd = gr.Dropdown(list(STEERING_CHOICES), value="scripted", label="Steering", scale=1,
                                  elem_id="evo-r2ag-steering")
        c.iterations = gr.Number(value=svc.cfg.r2ag.max_iterations, precision=0, minimum=1, maximum=10,
                               label="L_max", scale=1, elem_id="evo-r2ag-tab-iterations")
    with gr.Row():
        c.start_btn = gr.Button("Start tree", variant="primary", elem_id="evo-r2ag-start")
        c.step_btn = gr.Button("Expand once", elem_id="evo-r2ag-step")
        c.run_btn = gr.Button("Expand to the end", elem_id="evo-r2ag-run")
        c.stop_btn = gr.Button("Stop", variant="stop", elem_id="evo-r2ag-stop")
        c.pruning = gr.Checkbox(value=False, label="Show pruning", elem_id="evo-r2ag-pruning")


def _tree_panels(c: SimpleNamespace) -> None:
    """The progress and status lines, the tree figure, the picked node's detail, the rewards."""
    c.progress = gr.HTML(elem_id="evo-r2ag-progress")
    c.status = gr.Markdown(elem_id="evo-r2ag-status")
    with gr.Row():
        with gr.Column(scale=3, min_width=480):
            c.figure = gr.Plot(empty_figure("R²AG retrieval tree", "start a tree to see it"), show_label=False,
                             elem_id="evo-r2ag-figure")
        with gr.Column(scale=2, min_width=320):
            c.node_dd = gr.Dropdown(choices=[], value=None, label="Node (or click one in the tree)",
                                  elem_id="evo-r2ag-node")
            c.detail = gr.HTML(node_detail_html(new_tree(""), None), elem_id="evo-r2ag-detail")
            c.clicked = gr.Textbox(visible="hidden", elem_id="evo-r2ag-clicked")
    c.rewards_box = gr.HTML(elem_id="evo-r2ag-rewards")


def _wire(svc: Services, c: SimpleNamespace) -> Reload:
    """Start, expand (streamed) and Stop; Show pruning, a node picked or clicked; the question list follows the data file."""
    c.outputs = [c.figure, c.rewards_box, c.status, c.node_dd, c.detail, c.state]

    def unpack(pair):
        view, session = pair
        value = None if view.selected is None else str(view.selected)
        return (view.figure, view.rewards, view.status, gr.Dropdown(choices=view.nodes, value=value), view.detail,
                session)

    def shown(view):
        return (gr.skip(),) * 2 if view is None else (view.figure, view.detail)

    on(c.data_dd.change, lambda path: gr.Dropdown(choices=load_data(svc, path).questions, value=None), c.data_dd,
       c.question_dd, api_visibility="private")
    on(c.start_btn.click, lambda p, q, s, n: ("", *unpack(start_tree(svc, p, q, s, n))),
       [c.data_dd, c.question_dd, c.steering_dd, c.iterations], [c.progress, *c.outputs])

    def growing(to_end: bool):
        def stream(sess, show, node, request: gr.Request):
            flag = _stop_flags[_session(request)] = threading.Event()
            try:
                for up in grow_tree(svc, sess, flag, to_end=to_end, show_pruning=show, selected=node):
                    if up.view is None:
                        yield (up.status, *(gr.skip(),) * len(c.outputs), True)
                    else:
                        yield (up.status, *unpack((up.view, up.session)), not up.stopped)
                    if up.stopped:
                        return
            finally:
                flag.set()
            yield (*(gr.skip(),) * (len(c.outputs) + 1), False)  # done: Stop has nothing to stop any more

        return stream

    def on_stop(was_running, request: gr.Request):
        flag = _stop_flags.get(_session(request))
        if not was_running or flag is None or flag.is_set():
            return message_html("Nothing is expanding.", "info")
        flag.set()  # the running stream ends itself with the stopped view
        return gr.skip()

    c.streamed = [c.progress, *c.outputs, c.busy]
    on(c.step_btn.click, growing(False), [c.state, c.pruning, c.node_dd], c.streamed, show_progress="minimal")
    on(c.run_btn.click, growing(True), [c.state, c.pruning, c.node_dd], c.streamed, show_progress="minimal")
    on(c.stop_btn.click, on_stop, c.busy, c.progress, api_visibility="private", show_progress="hidden")
    on(c.pruning.change, lambda sess, show, node: shown(show_tree(svc, sess, show, node)), [c.state, c.pruning, c.node_dd],
       [c.figure, c.detail])
    on(c.node_dd.input, lambda sess, show, node: shown(select_node(svc, sess, show, node)), [c.state, c.pruning, c.node_dd],
       [c.figure, c.detail])

    def clicked_node(sess, show, value):
        if not value:
            return gr.skip(), gr.skip(), gr.skip()
        view = select_node(svc, sess, show, value)
        return view.figure, view.detail, gr.Dropdown(value=str(view.selected))

    on(c.clicked.change, clicked_node, [c.state, c.pruning, c.clicked], [c.figure, c.detail, c.node_dd], api_visibility="private")
    for installed_on in (c.start_btn.click, c.figure.change):  # installs the click forwarder (once per page)
        installed_on(None, None, None, js=CLICK_JS, api_visibility="private")
    return Reload(lambda: gr.Dropdown(choices=data_choices(svc)), [], [c.data_dd])
