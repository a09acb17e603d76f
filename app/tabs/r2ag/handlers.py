"""Studio tab: an R²AG retrieval tree grown one expansion at a time, like an EVO-RAG episode is stepped.

The tree is drawn as a tree diagram (`r2ag_figure.tree_figure`: plotly, a tidy layout, one marker per node = a query
and its top-1 passage): gold hits are marked node by node, branches that pruning removes are greyed (with "Show
pruning"), stop nodes are squares, and a legend names each mark. Clicking a node (or picking it in the "Node" list,
which the click keeps in step) shows its detail beside the figure: query kind, query, top-1 passage (title and
text) and the reward terms of its expansions. The expansions' rewards are also listed in a table below.

Handlers take and return plain values (`TreeSession`, `TreeView`), testable without a browser; the figure and the
detail are pure renderers (`app.tabs.r2ag.figure`, every text from data or a model escaped); `app.tabs.r2ag.layout` is the layout.
Steering: "scripted" (no model) or "lm" (the studio's policy LM, base weights, under the provider's lock).
`grow_tree` (the page's Expand once / Expand to the end) runs each expansion in a worker thread and yields a status
line while it runs (the LM's steering takes seconds per iteration) and the view after it; its Stop flag interrupts
the steering's decode before its next token and discards that expansion, so the tree is the one after the last
finished expansion (each expansion is one immutable `Tree`): nothing half-grown is kept.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterator, Sequence

import plotly.graph_objects as go

from evorag_core.lm.base import interruptible
from evorag_core.methods.r2ag.method import TreeBuilder
from evorag_core.methods.r2ag.rewards import RewardWeights
from evorag_core.methods.r2ag.scripted import ScriptedSteering
from evorag_core.methods.r2ag.steering import LMSteering, Proposal, SteerRequest
from evorag_core.methods.r2ag.tree import Tree, TreeSettings, expand_once, new_tree
from evorag_core.types import Passage
from evorag_core import test_hooks

from app.common.handlers import in_thread
from app.common.views import esc, message_html
from app.tabs.r2ag.figure import node_choices, node_detail_html, tree_figure

if TYPE_CHECKING:
    from app.common.policies import PolicyProvider
    from app.common.services import Services
    from evorag_core.config import R2agConfig

__all__ = ["STEERING_CHOICES", "TreeSession", "TreeView", "TreeUpdate", "rewards_html", "tree_status", "parse_node",
           "start_tree", "step_tree", "run_tree", "grow_tree", "show_tree", "select_node"]

STEERING_CHOICES = ("scripted", "lm")

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
    """The studio's shared policy LM (base weights) as steering, each call under the provider's lock; a set `stop`
    event interrupts its decode (GenerationInterrupted). Each call passes the test hold point `r2ag:steer`
    (`evorag_core.test_hooks`: off unless a test names it)."""

    name = "lm"

    def __init__(self, provider: PolicyProvider, cfg: R2agConfig, stop: threading.Event | None = None) -> None:
        self.provider, self.inner = provider, LMSteering.from_config(provider._get_backend(), cfg)
        self.stop = stop or threading.Event()

    def propose(self, requests: Sequence[SteerRequest]) -> list[Proposal]:
        with self.provider.lock, interruptible(self.inner.backend, self.stop):
            self.provider.use(None)
            test_hooks.hold("r2ag:steer", self.stop)
            return self.inner.propose(requests)


def _builder(svc: Services, data_path: str | None, steering: str, stop: threading.Event | None = None
             ) -> TreeBuilder:
    rt = svc.runtime(data_path)
    cfg = rt.cfg.r2ag
    if steering not in STEERING_CHOICES:
        raise ValueError(f"steering must be one of {', '.join(STEERING_CHOICES)}, got {steering!r}")
    steer = ScriptedSteering() if steering == "scripted" else _LockedSteering(svc.policies, cfg, stop)
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


def _expand(svc: Services, session: TreeSession, stop: threading.Event | None = None) -> TreeSession:
    """One expansion of every frontier branch (one retrieval batch)."""
    rt = svc.runtime(session.data_path or None)
    builder = _builder(svc, session.data_path or None, session.steering, stop)
    corpus = rt.corpus_for(rt.dataset.get(session.question_id))
    tree = expand_once(session.tree, builder.steering, builder.retriever_for(corpus), builder.passages(corpus),
                       session.settings, RewardWeights.from_config(rt.cfg.r2ag))
    return replace(session, tree=tree)


def step_tree(svc: Services, session: TreeSession | None, show_pruning: bool = False,
              selected: str | int | None = None) -> tuple[TreeView, TreeSession]:
    """One expansion of every frontier branch (one retrieval batch); the selected node stays selected."""
    if session is None:
        raise ValueError("start a tree first")
    if session.tree.done:
        return _view(svc, session, show_pruning, selected), session
    session = _expand(svc, session)
    return _view(svc, session, show_pruning, selected), session


def run_tree(svc: Services, session: TreeSession | None, show_pruning: bool = False,
             selected: str | int | None = None) -> tuple[TreeView, TreeSession]:
    """Expand until the tree is done."""
    view, session = step_tree(svc, session, show_pruning, selected)
    while not session.tree.done:
        view, session = step_tree(svc, session, show_pruning, selected)
    return view, session


@dataclass(frozen=True)
class TreeUpdate:
    status: str  # HTML status line while an expansion runs, or what happened
    view: TreeView | None  # None: the tree is unchanged since the last update
    session: TreeSession | None
    stopped: bool = False


def grow_tree(svc: Services, session: TreeSession | None, stop: threading.Event, *, to_end: bool,
              show_pruning: bool = False, selected: str | int | None = None, poll: float = 0.5
              ) -> Iterator[TreeUpdate]:
    """Expand once (`to_end` False) or until the tree is done, streaming progress; see the module docstring."""
    if session is None:
        raise ValueError("start a tree first")
    loading = svc.policies.pending_load("lm:base") if session.steering == "lm" else ""
    started, done_here = time.perf_counter(), 0
    while not session.tree.done:
        iteration = f"iteration {session.tree.iterations + 1}/{session.settings.max_iterations}"
        done, box = in_thread(lambda s=session: _expand(svc, s, stop), "r2ag-expand")
        began = time.perf_counter()
        while not done.wait(poll):
            if stop.is_set():
                break
            who = "the policy model steers" if session.steering == "lm" else "scripted steering"
            wait = f" ({loading})" if loading else ""
            yield TreeUpdate(message_html(f"Expanding {iteration}: {who}{wait}… {time.perf_counter() - began:.0f} s",
                                          "info"), None, None)
        if stop.is_set():
            kept = f"the tree keeps its {session.tree.iterations} finished iteration(s)"
            yield TreeUpdate(message_html(f"Stopped: {iteration} was interrupted and discarded; {kept}.", "warn"),
                             _view(svc, session, show_pruning, selected), session, stopped=True)
            return
        if "error" in box:
            raise box["error"]
        session, loading, done_here = box["value"], "", done_here + 1
        note = (f"Expanded {done_here} iteration(s) in {time.perf_counter() - started:.1f} s"
                + ("; the tree is done." if session.tree.done else "."))
        yield TreeUpdate(message_html(note, "ok" if session.tree.done else "info"),
                         _view(svc, session, show_pruning, selected), session)
        if not to_end:
            return
    if not done_here:
        yield TreeUpdate(message_html("The tree is done: start another to grow it again.", "info"),
                         _view(svc, session, show_pruning, selected), session)


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
