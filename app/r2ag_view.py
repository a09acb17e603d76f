"""Studio tab: an R²AG retrieval tree grown one expansion at a time, like an EVO-RAG episode is stepped.

Nodes show their query and the title of the passage they retrieved; gold hits are highlighted, branches that
pruning removes are greyed (with "Show pruning"), branches outside the top-t are marked "not expanded", and each
expanded node carries its expansion's reward (R and its parts R_MH, R_JH, R_AP, R_f, or why it was zeroed).

Handlers take and return plain values (`TreeSession`, `TreeView`), testable without a browser; `tree_html` and
`rewards_html` are pure renderers (every text from data or a model is escaped); `build_tab(svc)` is the layout.
Steering: "scripted" (no model) or "lm" (the studio's policy LM, base weights, under the provider's lock).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from evorag_core.methods.r2ag.method import TreeBuilder
from evorag_core.methods.r2ag.rewards import RewardWeights
from evorag_core.methods.r2ag.scripted import ScriptedSteering
from evorag_core.methods.r2ag.steering import LMSteering, Proposal, SteerRequest
from evorag_core.methods.r2ag.tree import Node, Tree, TreeSettings, expand_once, new_tree, prune

from app.episode_tab import Reload
from app.views import esc
from app.wiring import on

if TYPE_CHECKING:
    from app.policies import PolicyProvider
    from app.services import Services
    from evorag_core.config import R2agConfig

__all__ = ["STEERING_CHOICES", "TreeSession", "TreeView", "tree_html", "rewards_html", "tree_status",
           "start_tree", "step_tree", "run_tree", "show_tree", "build_tab"]

STEERING_CHOICES = ("scripted", "lm")
STYLE = (
    "<style>.r2ag-tree ul{list-style:none;margin:0 0 0 1.2em;padding:0;border-left:1px dashed #bbb}"
    ".r2ag-tree li{margin:2px 0;padding:1px 4px}.r2ag-gold{background:#d9f7d9;font-weight:600}"
    ".r2ag-pruned{opacity:.45;color:#777}.r2ag-kind{font-size:.8em;color:#555}.r2ag-reward{font-size:.8em;color:#333}"
    ".r2ag-off{font-size:.8em;color:#a60}</style>"
)


@dataclass(frozen=True)
class TreeSession:
    data_path: str
    question_id: str
    steering: str
    settings: TreeSettings
    tree: Tree


@dataclass(frozen=True)
class TreeView:
    tree: str  # HTML
    rewards: str  # HTML table, one row per expansion
    status: str


def _reward_text(tree: Tree, node: Node) -> str:
    exp = next((e for e in tree.expansions if e.node == node.id), None)
    if exp is None:
        return ""
    r = exp.reward
    parts = f"MH {r.multi_hit:.2f} · JH {r.joint_hit:.0f} · AP {r.average_precision:.2f} · f {r.format:.2f}"
    why = f" zeroed: {r.zeroed}" if r.zeroed else ""
    stop = " · stop" if exp.parsed.stop else ""
    return f" <span class='r2ag-reward'>[expansion {exp.index + 1}: R = {r.total:.3f} ({parts}){stop}{why}]</span>"


def _node_html(tree: Tree, node: Node, children: dict[int, list[Node]], show_pruning: bool) -> str:
    classes = ["r2ag-gold" if node.gold_hit and tree.gold else "", "r2ag-pruned" if show_pruning and node.pruned else ""]
    title = ", ".join(node.titles) or "nothing retrieved"
    kind = "question" if node.kind == "root" else f"{node.kind} #{node.rank}"
    head = f"<span class='r2ag-kind'>{esc(kind)}</span> {esc(node.query)}"
    if node.kind != "root":
        head += f" → <i>{esc(title)}</i>"
        if not node.new_pids:
            head += " <span class='r2ag-off'>(already retrieved)</span>"
        elif not node.selected:
            head += " <span class='r2ag-off'>(outside top-t: not expanded)</span>"
    head += _reward_text(tree, node)
    kids = "".join(_node_html(tree, c, children, show_pruning) for c in children.get(node.id, []))
    sub = f"<ul>{kids}</ul>" if kids else ""
    return f"<li class='{' '.join(c for c in classes if c)}'>{head}{sub}</li>"


def tree_html(tree: Tree, show_pruning: bool = False) -> str:
    """The tree as nested lists; with `show_pruning`, the branches pruning removes are greyed."""
    shown = prune(tree) if show_pruning else tree
    children: dict[int, list[Node]] = {}
    for node in shown.nodes[1:]:
        children.setdefault(node.parent, []).append(node)
    return f"{STYLE}<div class='r2ag-tree'><ul>{_node_html(shown, shown.nodes[0], children, show_pruning)}</ul></div>"


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


def _view(session: TreeSession, show_pruning: bool) -> TreeView:
    return TreeView(tree_html(session.tree, show_pruning), rewards_html(session.tree),
                    tree_status(session.tree, session.settings))


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
    return _view(session, False), session


def step_tree(svc: Services, session: TreeSession | None, show_pruning: bool = False) -> tuple[TreeView, TreeSession]:
    """One expansion of every frontier branch (one retrieval batch)."""
    if session is None:
        raise ValueError("start a tree first")
    if session.tree.done:
        return _view(session, show_pruning), session
    rt = svc.runtime(session.data_path or None)
    builder = _builder(svc, session.data_path or None, session.steering)
    corpus = rt.corpus_for(rt.dataset.get(session.question_id))
    tree = expand_once(session.tree, builder.steering, builder.retriever_for(corpus), builder.passages(corpus),
                       session.settings, RewardWeights.from_config(rt.cfg.r2ag))
    session = replace(session, tree=tree)
    return _view(session, show_pruning), session


def run_tree(svc: Services, session: TreeSession | None, show_pruning: bool = False) -> tuple[TreeView, TreeSession]:
    """Expand until the tree is done."""
    view, session = step_tree(svc, session, show_pruning)
    while not session.tree.done:
        view, session = step_tree(svc, session, show_pruning)
    return view, session


def show_tree(session: TreeSession | None, show_pruning: bool) -> TreeView:
    if session is None:
        return TreeView("<p>Start a tree.</p>", "", "")
    return _view(session, show_pruning)


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
    tree_box = gr.HTML(elem_id="evo-r2ag-tree")
    rewards_box = gr.HTML(elem_id="evo-r2ag-rewards")
    outputs = [tree_box, rewards_box, status, state]

    def unpack(pair):
        view, session = pair
        return view.tree, view.rewards, view.status, session

    on(data_dd.change, lambda path: gr.Dropdown(choices=load_data(svc, path).questions, value=None), data_dd,
       question_dd, api_visibility="private")
    on(start_btn.click, lambda p, q, s, n: unpack(start_tree(svc, p, q, s, n)),
       [data_dd, question_dd, steering_dd, iterations], outputs)
    on(step_btn.click, lambda sess, show: unpack(step_tree(svc, sess, show)), [state, pruning], outputs)
    on(run_btn.click, lambda sess, show: unpack(run_tree(svc, sess, show)), [state, pruning], outputs)
    on(pruning.change, lambda sess, show: (lambda v: (v.tree, v.rewards, v.status))(show_tree(sess, show)),
       [state, pruning], [tree_box, rewards_box, status])

    return Reload(lambda: gr.Dropdown(choices=data_choices(svc)), [], [data_dd])
