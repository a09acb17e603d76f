"""R²AG's retrieval tree as a plotly tree diagram, and the detail of one node, as pure renderers.

`tree_figure(tree, show_pruning, selected)`: one marker per node (a query and its top-1 passage; the root is the
question), laid out by `tree_layout.tidy_layout` left to right (depth = iteration), edges as elbows. Node classes,
each with its own colour and a legend entry: root, gold hit (the node's own passage is gold — only that node, not its
subtree), kept / pruned (with `show_pruning`: pruned nodes are grey, with labels still at >= 4.5:1 contrast on the
background) or "no gold hit" (without); nodes whose expansion emitted stop are squares ("stop" in the legend). Node
points carry their node id as `customdata` (the studio's click handler reads it); hover shows the query and the
passage title; labels are the passage titles, shortened to fit their column. `selected` draws a ring round a node.

`node_detail_html(tree, node_id, passage)`: kind, query, top-1 passage (title and text), flags, and the reward terms
of the expansion that created the node and of the node's own expansion (`rewards.R2agReward`).
`node_choices(tree)`: (label, id) pairs for a node picker. Every text from data or a model is escaped.
"""
from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass

import plotly.graph_objects as go

from evorag_core.methods.r2ag.tree import ExpansionRecord, Node, Tree, prune
from evorag_core.types import Passage

from app.tabs.r2ag.tree_layout import tidy_layout

__all__ = ["BACKGROUND", "ROOT", "GOLD", "KEPT", "PRUNED", "PLAIN", "STOP", "STYLES", "NodeStyle", "node_class",
           "stopped_nodes", "tree_figure", "node_detail_html", "node_choices", "contrast_ratio", "NODE_META",
           "ROW_PX", "PLOT_PX"]

BACKGROUND = "#ffffff"
ROOT, GOLD, KEPT, PRUNED, PLAIN = "root (question)", "gold hit", "kept", "pruned", "no gold hit"
STOP = "stop (its expansion ended the branch)"
NODE_META = "r2ag-nodes"  # `meta` of the traces that hold the nodes (one point per node)
ROW_PX = 36  # vertical pixels per row of the layout
PLOT_PX = 820  # the width the labels are shortened for (the figure's column at a 1500 px wide window)
CHAR_PX = 7.0  # an average character of the 12 px label font


@dataclass(frozen=True)
class NodeStyle:
    fill: str
    line: str
    text: str  # label colour (>= 4.5:1 on BACKGROUND)
    symbol: str = "circle"
    size: int = 15


STYLES: dict[str, NodeStyle] = {
    ROOT: NodeStyle("#37474f", "#1c262b", "#1c262b", "diamond", 18),
    GOLD: NodeStyle("#ffb300", "#6d4c00", "#5d4300", "circle", 17),
    KEPT: NodeStyle("#64b5f6", "#0d47a1", "#0d3570"),
    PLAIN: NodeStyle("#64b5f6", "#0d47a1", "#0d3570"),
    PRUNED: NodeStyle("#e4e4e4", "#8a8a8a", "#5f5f5f"),
}
STOP_SYMBOL = "square"
SELECTED_RING = "#d81b60"


def _luminance(colour: str) -> float:
    value = colour.lstrip("#")
    channels = [int(value[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two #rrggbb colours (1 to 21)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def stopped_nodes(tree: Tree) -> frozenset[int]:
    """The nodes whose own expansion emitted the stop signal."""
    return frozenset(e.node for e in tree.expansions if e.parsed.stop)


def node_class(tree: Tree, node: Node, show_pruning: bool) -> str:
    """root > gold hit > pruned > kept (with pruning shown) / no gold hit (without). `node.pruned` is read as it is:
    pass a tree through `prune` first."""
    if node.kind == "root":
        return ROOT
    if node.gold_hit and tree.gold:
        return GOLD
    if show_pruning:
        return PRUNED if node.pruned else KEPT
    return PLAIN


def _esc(text: object) -> str:
    return html.escape(str(text), quote=False)


def _short(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: max(1, chars - 1)].rstrip() + "…"


def _kind_label(node: Node) -> str:
    return "question" if node.kind == "root" else f"{node.kind} query #{node.rank}"


def _title(node: Node) -> str:
    if node.kind == "root":
        return ""
    return node.titles[0] if node.titles else "nothing retrieved"


def _flags(tree: Tree, node: Node, stopped: frozenset[int], show_pruning: bool) -> list[str]:
    flags = []
    if node.kind != "root":
        if node.gold_hit and tree.gold:
            flags.append(f"gold hit ({node.new_gold} new)" if node.new_gold else "gold hit (already found)")
        if not node.new_pids:
            flags.append("already retrieved")
        elif not node.selected:
            flags.append("outside top-t: not expanded")
    if node.id in stopped:
        flags.append("stop")
    if show_pruning and node.pruned:
        flags.append("pruned")
    return flags


def _hover(tree: Tree, node: Node, stopped: frozenset[int], show_pruning: bool) -> str:
    query = "<br>".join(_esc(line) for line in textwrap.wrap(node.query, 70)[:4]) or "(empty)"
    lines = [f"<b>#{node.id} {_esc(_kind_label(node))}</b>", f"query: {query}"]
    if node.kind != "root":
        lines.append(f"top-1: <i>{_esc(_short(_title(node), 80))}</i>")
    flags = _flags(tree, node, stopped, show_pruning)
    if flags:
        lines.append(" · ".join(flags))
    return "<br>".join(lines)


def _label(node: Node, chars: int) -> str:
    if node.kind == "root":
        return _short("Q: " + node.query, chars)
    return _short(_title(node), chars)


def tree_figure(tree: Tree, show_pruning: bool = False, selected: int | None = None,
                plot_px: int = PLOT_PX) -> go.Figure:
    """The tree diagram (see the module docstring)."""
    shown = prune(tree) if show_pruning else tree
    nodes = shown.nodes
    placed = tidy_layout([n.parent for n in nodes])
    x = [p.depth for p in placed]
    y = [-p.pos for p in placed]
    depth = max(x)
    span = max(p.pos for p in placed)  # rows - 1 (positions may fall between rows)
    stopped = stopped_nodes(shown)
    columns = depth + 1
    chars = int(min(34, max(8, 0.8 * plot_px / columns / CHAR_PX)))
    fig = go.Figure()

    # edges: parent -> a vertical bus just before the child column -> child (drawn under the nodes and labels)
    for faded in (False, True):
        ex: list[float | None] = []
        ey: list[float | None] = []
        for node in nodes[1:]:
            if (show_pruning and node.pruned) != faded:
                continue
            p = node.parent
            bus = x[p] + 0.86
            ex += [x[p], bus, bus, x[node.id], None]
            ey += [y[p], y[p], y[node.id], y[node.id], None]
        if ex:
            fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                                     name="pruned edges" if faded else "edges",
                                     line=dict(color="#c4c4c4" if faded else "#7d8b93", width=1.4,
                                               dash="dot" if faded else "solid")))

    classes = [node_class(shown, n, show_pruning) for n in nodes]
    order = [ROOT, GOLD, KEPT, PRUNED] if show_pruning else [ROOT, GOLD, PLAIN]
    for cls in order:
        members = [n for n, c in zip(nodes, classes) if c == cls]
        style = STYLES[cls]
        # the legend: one entry per class, always shown (even when no node is in it yet)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=cls, legendgroup=cls, hoverinfo="skip",
                                 marker=dict(color=style.fill, symbol=style.symbol, size=13,
                                             line=dict(color=style.line, width=2))))
        if not members:
            continue
        fig.add_trace(go.Scatter(
            x=[x[n.id] for n in members], y=[y[n.id] for n in members], mode="markers", name=cls,
            legendgroup=cls, showlegend=False, meta=NODE_META, customdata=[n.id for n in members],
            hovertext=[_hover(shown, n, stopped, show_pruning) for n in members], hoverinfo="text",
            marker=dict(color=style.fill, size=style.size, line=dict(color=style.line, width=2),
                        symbol=[STOP_SYMBOL if n.id in stopped and n.kind != "root" else style.symbol
                                for n in members])))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=STOP, legendgroup="stop", hoverinfo="skip",
                             marker=dict(color="#ffffff", symbol=STOP_SYMBOL, size=13,
                                         line=dict(color="#37474f", width=2))))
    if selected is not None and 0 <= selected < len(nodes):
        fig.add_trace(go.Scatter(x=[x[selected]], y=[y[selected]], mode="markers", name="selected",
                                 showlegend=False, hoverinfo="skip",
                                 marker=dict(symbol="circle-open", size=27, color=SELECTED_RING,
                                             line=dict(width=3, color=SELECTED_RING))))

    for node, cls in zip(nodes, classes):
        style = STYLES[cls]
        label = _esc(_label(node, chars))
        fig.add_annotation(x=x[node.id], y=y[node.id], text=f"<b>{label}</b>" if cls == GOLD else label,
                           showarrow=False,
                           xanchor="left", xshift=16, yanchor="middle", align="left",
                           bgcolor="rgba(255,255,255,0.88)", borderpad=1,
                           font=dict(size=12, color=style.text))

    fig.update_layout(
        template="plotly_white", paper_bgcolor=BACKGROUND, plot_bgcolor=BACKGROUND,
        height=max(300, int((span + 1.4) * ROW_PX) + 84), margin=dict(l=12, r=12, t=48, b=36),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0, font=dict(size=13)),
        hoverlabel=dict(bgcolor="#ffffff", font=dict(size=13, color="#1a1a1a"), align="left"),
        font=dict(size=12, color="#1a1a1a"), clickmode="event", dragmode=False,
    )
    fig.update_xaxes(range=[-0.15, depth + 0.95], tickvals=list(range(columns)),
                     ticktext=["question"] + [f"iteration {d}" for d in range(1, columns)], showgrid=False,
                     zeroline=False, fixedrange=True, tickfont=dict(size=12, color="#37474f"))
    fig.update_yaxes(range=[-span - 0.7, 0.7], visible=False, fixedrange=True)
    return fig


def _reward_rows(record: ExpansionRecord, role: str) -> str:
    r = record.reward
    cells = [("R", f"{r.total:.3f}"), ("R_MH", f"{r.multi_hit:.2f}"), ("R_JH", f"{r.joint_hit:.0f}"),
             ("R_AP", f"{r.average_precision:.3f}"), ("R_f", f"{r.format:.2f}")]
    head = (f"{role}: expansion {record.index + 1} (of node #{record.node}, iteration {record.iteration})"
            + (" · emitted stop" if record.parsed.stop else "") + (f" · zeroed: {r.zeroed}" if r.zeroed else ""))
    tds = "".join(f"<td class='num'>{_esc(v)}</td>" for _, v in cells)
    ths = "".join(f"<th>{_esc(k)}</th>" for k, _ in cells)
    return (f"<div class='evo-h r2ag-detail-reward-head'>{_esc(head)}</div>"
            f"<table class='evo-table r2ag-detail-reward'><thead><tr>{ths}</tr></thead><tbody><tr>{tds}</tr>"
            f"</tbody></table>")


def node_detail_html(tree: Tree, node_id: int | None, passage: Passage | None = None,
                     show_pruning: bool = False) -> str:
    """The detail panel of one node; `passage` is its top-1 `Passage` (title, text) when known."""
    if node_id is None or not 0 <= node_id < len(tree.nodes):
        return "<div class='evo-empty'>Click a node in the tree (or pick one above) to see its detail.</div>"
    shown = prune(tree) if show_pruning else tree
    node = shown.nodes[node_id]
    stopped = stopped_nodes(shown)
    kind = {"root": "question (root)", "base": "base", "predicted": "predicted"}.get(node.kind, node.kind)
    parts = [f"<div class='r2ag-detail' data-node='{node.id}'>",
             f"<div class='evo-h'>Node #{node.id} · {_esc(_kind_label(node))}</div>",
             f"<div><b>Query kind:</b> <span class='r2ag-detail-kind'>{_esc(kind)}</span></div>",
             f"<div><b>Query:</b> <span class='r2ag-detail-query'>{_esc(node.query)}</span></div>"]
    flags = _flags(shown, node, stopped, show_pruning)
    if flags:
        parts.append(f"<div><b>Marks:</b> {_esc(' · '.join(flags))}</div>")
    if node.kind != "root":
        title = passage.title if passage is not None else _title(node)
        pid = node.pids[0] if node.pids else ""
        text = _esc(_short(passage.text, 1500)) if passage is not None else "<i>(passage text not available)</i>"
        gold = " <span class='badge gold'>gold</span>" if pid and pid in tree.gold else ""
        parts.append(f"<div class='evo-h'>Top-1 passage{gold}</div>"
                     f"<div class='r2ag-detail-passage'><b class='r2ag-detail-title'>{_esc(title)}</b>"
                     f" <span class='evo-meta'>({_esc(pid or 'nothing retrieved')})</span>"
                     f"<p>{text if pid else ''}</p></div>")
    created = next((e for e in tree.expansions if e.index == node.expansion), None)
    own = next((e for e in tree.expansions if e.node == node.id), None)
    if created is not None:
        parts.append(_reward_rows(created, "Created by"))
    if own is not None:
        parts.append(_reward_rows(own, "Expanded in"))
    if created is None and own is None:
        parts.append("<div class='evo-empty'>No expansion yet: no reward terms.</div>")
    parts.append("</div>")
    return "".join(parts)


def node_choices(tree: Tree) -> list[tuple[str, str]]:
    """(label, node id as text) for every node, in id order."""
    out = []
    for node in tree.nodes:
        if node.kind == "root":
            what = _short(node.query, 50)
        else:
            what = f"{_short(node.query, 36)} → {_short(_title(node), 30)}"
        out.append((f"#{node.id} {_kind_label(node)}: {what}", str(node.id)))
    return out
