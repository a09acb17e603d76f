"""Studio tab: an R²AG retrieval tree grown one expansion at a time, like an EVO-RAG episode is stepped.

The tree is drawn as a tree diagram (`r2ag_figure.tree_figure`: plotly, a tidy layout, one marker per node = a query
and its top-1 passage): gold hits are marked node by node, branches that pruning removes are greyed (with "Show
pruning"), stop nodes are squares, and a legend names each mark. Clicking a node (or picking it in the "Node" list,
which the click keeps in step) shows its detail beside the figure: query kind, query, top-1 passage (title and
text) and the reward terms of its expansions. The expansions' rewards are also listed in a table below.

Handlers take and return plain values (`TreeSession`, `TreeView`), testable without a browser; the figure and the
detail are pure renderers (`app.r2ag_figure`, every text from data or a model escaped); `build_tab(svc)` is the
layout. gr.Plot (Gradio 6.31) has no point-selection event, so a small script forwards plotly's click on a node to a
hidden textbox (`evo-r2ag-clicked`) whose change selects the node.
Steering: "scripted" (no model) or "lm" (the studio's policy LM, base weights, under the provider's lock).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

import plotly.graph_objects as go

from evorag_core.methods.r2ag.method import TreeBuilder
from evorag_core.methods.r2ag.rewards import RewardWeights
from evorag_core.methods.r2ag.scripted import ScriptedSteering
from evorag_core.methods.r2ag.steering import LMSteering, Proposal, SteerRequest
from evorag_core.methods.r2ag.tree import Tree, TreeSettings, expand_once, new_tree
from evorag_core.types import Passage

from app.episode_tab import Reload
from app.r2ag_figure import node_choices, node_detail_html, tree_figure
from app.views import empty_figure, esc
from app.wiring import on

if TYPE_CHECKING:
    from app.policies import PolicyProvider
    from app.services import Services
    from evorag_core.config import R2agConfig

__all__ = ["STEERING_CHOICES", "CLICK_JS", "TreeSession", "TreeView", "rewards_html", "tree_status", "parse_node",
           "start_tree", "step_tree", "run_tree", "show_tree", "select_node", "build_tab"]

STEERING_CHOICES = ("scripted", "lm")

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


@dataclass(frozen=True)
class TreeSession:
    data_path: str
    question_id: str
    steering: str
    settings: TreeSettings
    tree: Tree


@dataclass(frozen=True)
class TreeView:
    figure: go.Figure  # the tree diagram
    rewards: str  # HTML table, one row per expansion
    status: str
    nodes: list[tuple[str, str]]  # the node picker's (label, id) choices
    selected: int | None  # the node whose detail is shown
    detail: str  # HTML: the selected node's detail


def parse_node(value: object) -> int | None:
    """A node id from the picker ("12") or the click box ("12@1700000000000"); None for anything else."""
    if value is None or value == "":
        return None
    text = str(value).split("@", 1)[0].strip()
    return int(text) if text.isdigit() else None


def rewards_html(tree: Tree) -> str:
    if not tree.expansions:
        return "<p>No expansions yet.</p>"
    head = "".join(f"<th>{h}</th>" for h in ("#", "iteration", "node", "base", "predicted", "stop", "R", "R_MH",
                                              "R_JH", "R_AP", "R_f", "zeroed", "malformed"))
    rows = []
    for e in tree.expansions:
        r, p = e.reward, e.parsed
        cells = [str(e.index + 1), str(e.iteration), str(e.node), "; ".join(p.base), "; ".join(p.predicted),
                 "yes" if p.stop else "", f"{r.total:.3f}", f"{r.multi_hit:.2f}", f"{r.joint_hit:.0f}",
                 f"{r.average_precision:.3f}", f"{r.format:.2f}", r.zeroed, str(p.malformed)]
        rows.append("<tr>" + "".join(f"<td title='{esc(e.text)}'>{esc(c)}</td>" for c in cells) + "</tr>")
    return f"<table class='r2ag-rewards'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def tree_status(tree: Tree, settings: TreeSettings) -> str:
    found = len(tree.gold & set(tree.retrieved()))
    gold = f", gold found {found}/{len(tree.gold)}" if tree.gold else ""
    state = f"done ({tree.stop_reason})" if tree.done else "growing"
    return (f"iteration {tree.iterations}/{settings.max_iterations}, {len(tree.expansions)} expansions, "
            f"{len(tree.retrieved())} passages{gold}; {state}")


class _LockedSteering:
    """The studio's shared policy LM (base weights) as steering, each call under the provider's lock."""

    name = "lm"

    def __init__(self, provider: PolicyProvider, cfg: R2agConfig) -> None:
        self.provider, self.inner = provider, LMSteering.from_config(provider._get_backend(), cfg)

    def propose(self, requests: Sequence[SteerRequest]) -> list[Proposal]:
        with self.provider.lock:
            self.provider.use(None)
            return self.inner.propose(requests)


def _builder(svc: Services, data_path: str | None, steering: str) -> TreeBuilder:
    rt = svc.runtime(data_path)
    cfg = rt.cfg.r2ag
    if steering not in STEERING_CHOICES:
        raise ValueError(f"steering must be one of {', '.join(STEERING_CHOICES)}, got {steering!r}")
    steer = ScriptedSteering() if steering == "scripted" else _LockedSteering(svc.policies, cfg)
    return TreeBuilder(steer, cfg, rt.corpus_for, lambda corpus: rt.retrieval.retriever_for(corpus, cfg.retriever))


def _passage(svc: Services, session: TreeSession, node_id: int | None) -> Passage | None:
    """The top-1 passage of a node, looked up in the question's corpus (None for the root or nothing retrieved)."""
    if node_id is None or not 0 <= node_id < len(session.tree.nodes) or not session.tree.nodes[node_id].pids:
        return None
    rt = svc.runtime(session.data_path or None)
    pid = session.tree.nodes[node_id].pids[0]
    corpus = rt.corpus_for(rt.dataset.get(session.question_id))
    return next((p for p in corpus.passages if p.pid == pid), None)


def _view(svc: Services, session: TreeSession, show_pruning: bool, selected: str | int | None = None) -> TreeView:
    node = parse_node(selected)
    if node is not None and node >= len(session.tree.nodes):
        node = None
    tree = session.tree
    return TreeView(tree_figure(tree, show_pruning, node), rewards_html(tree), tree_status(tree, session.settings),
                    node_choices(tree), node,
                    node_detail_html(tree, node, _passage(svc, session, node), show_pruning))


def start_tree(svc: Services, data_path: str | None, question_id: str, steering: str = "scripted",
               max_iterations: int | None = None) -> tuple[TreeView, TreeSession]:
    """A tree holding only the question (gold from the data annotates it; it steers nothing)."""
    rt = svc.runtime(data_path)
    if not question_id:
        raise ValueError("pick a question first")
    question = rt.dataset.get(question_id)
    if steering not in STEERING_CHOICES:
        raise ValueError(f"steering must be one of {', '.join(STEERING_CHOICES)}, got {steering!r}")
    settings = TreeSettings.from_config(rt.cfg.r2ag)
    if max_iterations:
        settings = replace(settings, max_iterations=int(max_iterations))
    gold = rt.corpus_for(question).gold_for(question)
    session = TreeSession(str(data_path or ""), question_id, steering, settings,
                          new_tree(question.question, gold, question.id))
    return _view(svc, session, False), session


def step_tree(svc: Services, session: TreeSession | None, show_pruning: bool = False,
              selected: str | int | None = None) -> tuple[TreeView, TreeSession]:
    """One expansion of every frontier branch (one retrieval batch); the selected node stays selected."""
    if session is None:
        raise ValueError("start a tree first")
    if session.tree.done:
        return _view(svc, session, show_pruning, selected), session
    rt = svc.runtime(session.data_path or None)
    builder = _builder(svc, session.data_path or None, session.steering)
    corpus = rt.corpus_for(rt.dataset.get(session.question_id))
    tree = expand_once(session.tree, builder.steering, builder.retriever_for(corpus), builder.passages(corpus),
                       session.settings, RewardWeights.from_config(rt.cfg.r2ag))
    session = replace(session, tree=tree)
    return _view(svc, session, show_pruning, selected), session


def run_tree(svc: Services, session: TreeSession | None, show_pruning: bool = False,
             selected: str | int | None = None) -> tuple[TreeView, TreeSession]:
    """Expand until the tree is done."""
    view, session = step_tree(svc, session, show_pruning, selected)
    while not session.tree.done:
        view, session = step_tree(svc, session, show_pruning, selected)
    return view, session


def show_tree(svc: Services, session: TreeSession | None, show_pruning: bool,
              selected: str | int | None = None) -> TreeView | None:
    """The view of the current tree (after "Show pruning" or a node selection); None before a tree is started."""
    if session is None:
        return None
    return _view(svc, session, show_pruning, selected)


def select_node(svc: Services, session: TreeSession | None, show_pruning: bool, value: str | int | None) -> TreeView:
    """The view with the node `value` ("12" from the picker, "12@time" from a click) selected."""
    if session is None:
        raise ValueError("start a tree first")
    node = parse_node(value)
    if node is None or node >= len(session.tree.nodes):
        raise ValueError(f"no node {value!r} in the tree")
    return _view(svc, session, show_pruning, node)


def build_tab(svc: Services) -> Reload:
    """The tab's layout and wiring (inside a `gr.Tab`); returns how it reloads its data (the data files offered)
    when selected (`episode_tab.Reload`)."""
    import gradio as gr

    from app.handlers import data_choices, load_data

    state = gr.State(None)
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
        pruning = gr.Checkbox(value=False, label="Show pruning", elem_id="evo-r2ag-pruning")
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
    on(start_btn.click, lambda p, q, s, n: unpack(start_tree(svc, p, q, s, n)),
       [data_dd, question_dd, steering_dd, iterations], outputs)
    on(step_btn.click, lambda sess, show, node: unpack(step_tree(svc, sess, show, node)), [state, pruning, node_dd],
       outputs)
    on(run_btn.click, lambda sess, show, node: unpack(run_tree(svc, sess, show, node)), [state, pruning, node_dd],
       outputs)
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
