"""The R²AG tab's tree diagram (app.tabs.r2ag.figure) and handlers (app.tabs.r2ag.handlers).

The figure tests grow a small tree by hand (a fixed steering, a lookup-table retriever, gold g1 and g2):
question -> a, b, c (base), d (predicted, gold g1); a -> e (gold g2), h (g1 again: a gold hit, not new); b's
expansion emits stop; c -> f; d -> k (not gold). Pruning keeps root, a, d, e (the nodes that found new gold, and
their ancestors)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from evorag_core.config import load_config
from evorag_core.methods.r2ag import TreeSettings, expand_once, new_tree, parse_expansion
from evorag_core.methods.r2ag.steering import Proposal
from evorag_core.types import Passage
from tests.app.test_studio_activation import tiny  # noqa: F401 - the tiny random model
from tests.paths import DEMO

from app.tabs.r2ag.figure import (BACKGROUND, GOLD, KEPT, NODE_META, PLAIN, PRUNED, ROOT, STOP, STYLES, contrast_ratio,
                             node_choices, node_detail_html, tree_figure)

PASSAGES = {pid: Passage(pid, title, f"Text of {title}.") for pid, title in
            [("g1", "Gold One"), ("g2", "Gold Two"), ("x0", "Other Zero"), ("x1", "Other One"), ("x2", "Other Two"),
             ("x4", "Other <Four> & co"), ("x5", "Other Five")]}
TABLE = {"a": "x0", "b": "x1", "c": "x2", "d": "g1", "e": "g2", "h": "g1", "f": "x4", "k": "x5"}


def _reply(base=(), predicted=(), stop=False):
    lines = ["<think>t</think>", *(f"<base-Q>{q}</base-Q>" for q in base)]
    if stop:
        lines.append("<base-Q>stop retrieval</base-Q>")
    lines += [f"<predicted-Q>{q}</predicted-Q>" for q in predicted] or ["<predicted-Q>none</predicted-Q>"]
    return "\n".join(lines)


class _Steering:
    name = "fixed"

    def __init__(self, replies):
        self.replies = list(replies)

    def propose(self, requests):
        return [Proposal(t, parse_expansion(t)) for t in (self.replies.pop(0) for _ in requests)]


class _Retriever:
    def search_batch(self, queries, k):
        return [[SimpleNamespace(pid=TABLE[q])] for q in queries]


@pytest.fixture(scope="module")
def tree():
    settings = TreeSettings(max_iterations=2)
    steering = _Steering([_reply(["a", "b", "c"], ["d"]), _reply(["e", "h"]), _reply(stop=True), _reply(["f"]),
                         _reply(["k"])])
    t = new_tree("Which <one>?", frozenset({"g1", "g2"}), "q1")
    t = expand_once(t, steering, _Retriever(), PASSAGES, settings)
    t = expand_once(t, steering, _Retriever(), PASSAGES, settings)
    assert [n.query for n in t.nodes] == ["Which <one>?", "a", "b", "c", "d", "e", "h", "f", "k"]
    assert t.done and [e.node for e in t.expansions] == [0, 1, 2, 3, 4] and t.expansions[2].parsed.stop
    return t


def _node_traces(fig):
    return [tr for tr in fig.data if tr.meta == NODE_META]


def _ids(fig, name):
    return {i for tr in _node_traces(fig) if tr.name == name for i in tr.customdata}


def _legend(fig):
    return [tr.name for tr in fig.data if tr.showlegend is not False and tr.x == (None,)]


def test_one_point_per_node(tree):
    for show in (False, True):
        fig = tree_figure(tree, show)
        ids = [i for tr in _node_traces(fig) for i in tr.customdata]
        assert sorted(ids) == list(range(len(tree.nodes)))
        assert all(len(tr.x) == len(tr.y) == len(tr.customdata) == len(tr.hovertext) for tr in _node_traces(fig))
        assert len(fig.layout.annotations) == len(tree.nodes)  # one label per node


def test_gold_nodes_are_marked_one_by_one_not_their_subtree(tree):
    fig = tree_figure(tree)
    assert _ids(fig, GOLD) == {4, 5, 6}  # d, e, h (already found); not k (d's non-gold child)
    assert _ids(fig, PLAIN) == {1, 2, 3, 7, 8} and _ids(fig, ROOT) == {0}
    gold = next(tr for tr in _node_traces(fig) if tr.name == GOLD)
    assert gold.marker.color == STYLES[GOLD].fill
    bold = [a.text for a in fig.layout.annotations if a.text.startswith("<b>")]
    assert sorted(bold) == ["<b>Gold One</b>", "<b>Gold One</b>", "<b>Gold Two</b>"]


def test_pruned_nodes_are_grey_and_legible(tree):
    fig = tree_figure(tree, show_pruning=True)
    assert _ids(fig, KEPT) == {1}  # a: no gold itself, but e below it found new gold
    assert _ids(fig, PRUNED) == {2, 3, 7, 8}  # b, c, f, k: no new gold at or below them (h is gold: marked gold)
    pruned = next(tr for tr in _node_traces(fig) if tr.name == PRUNED)
    assert pruned.marker.color == STYLES[PRUNED].fill == "#e4e4e4"
    labels = {a.text: a.font.color for a in fig.layout.annotations}
    assert labels["Other Five"] == STYLES[PRUNED].text
    for style in STYLES.values():  # every label colour reads at >= 4.5:1 (WCAG AA) on the background
        assert contrast_ratio(style.text, BACKGROUND) >= 4.5
    assert contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast_ratio("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)
    faded = [tr for tr in fig.data if tr.name == "pruned edges"]
    assert len(faded) == 1 and faded[0].line.dash == "dot"


def test_stop_nodes_have_their_own_symbol(tree):
    fig = tree_figure(tree, show_pruning=True)
    symbols = {i: s for tr in _node_traces(fig) for i, s in zip(tr.customdata, tr.marker.symbol)}
    assert symbols[2] == "square"  # b's expansion emitted stop
    assert symbols[0] == "diamond" and {symbols[i] for i in (1, 3, 4, 5, 6, 7, 8)} == {"circle"}


def test_legend_entries(tree):
    assert _legend(tree_figure(tree, show_pruning=True)) == [ROOT, GOLD, KEPT, PRUNED, STOP]
    assert _legend(tree_figure(tree)) == [ROOT, GOLD, PLAIN, STOP]
    assert _legend(tree_figure(new_tree("q?"))) == [ROOT, GOLD, PLAIN, STOP]  # shown before any node is in them
    fig = tree_figure(tree)
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y >= 1.0 and fig.layout.margin.t >= 40


def test_hover_has_query_and_title_escaped(tree):
    fig = tree_figure(tree)
    hover = {i: h for tr in _node_traces(fig) for i, h in zip(tr.customdata, tr.hovertext)}
    assert "query: f" in hover[7] and "Other &lt;Four&gt; &amp; co" in hover[7] and "<Four>" not in hover[7]
    assert "Which &lt;one&gt;?" in hover[0] and "gold hit (1 new)" in hover[4]
    assert "gold hit (already found)" in hover[6] and "already retrieved" in hover[6]
    assert "stop" in hover[2]


def test_selected_node_is_ringed_and_layout_is_a_tidy_tree(tree):
    fig = tree_figure(tree, selected=5)
    ring = [tr for tr in fig.data if tr.name == "selected"]
    assert len(ring) == 1 and ring[0].x == (2,)
    assert not [tr for tr in tree_figure(tree).data if tr.name == "selected"]
    xy = {i: (x, y) for tr in _node_traces(fig) for i, x, y in zip(tr.customdata, tr.x, tr.y)}
    assert xy[0][0] == 0 and {xy[i][0] for i in (1, 2, 3, 4)} == {1} and {xy[i][0] for i in (5, 6, 7, 8)} == {2}
    assert xy[0][1] == pytest.approx((xy[1][1] + xy[4][1]) / 2)  # the root midway between its first and last child
    assert len({xy[i] for i in xy}) == len(xy)
    assert tree_figure(tree, selected=5).to_json() == fig.to_json()  # deterministic


def test_node_detail(tree):
    text = node_detail_html(tree, 5, PASSAGES["g2"])
    assert "base" in text and ">e<" in text and "Gold Two" in text and "Text of Gold Two." in text
    assert "Created by: expansion 2 (of node #1, iteration 2)" in text and "R_MH" in text and "R_AP" in text
    assert "badge gold" in text
    root = node_detail_html(tree, 0)
    assert "question (root)" in root and "Which &lt;one&gt;?" in root and "Expanded in: expansion 1" in root
    stop = node_detail_html(tree, 2, PASSAGES["x1"], show_pruning=True)
    assert "emitted stop" in stop and "pruned" in stop
    assert "&lt;Four&gt;" in node_detail_html(tree, 7, PASSAGES["x4"]) and "predicted" in node_detail_html(tree, 4)
    assert "gold hit (already found)" in node_detail_html(tree, 6, PASSAGES["g1"])
    assert "Click a node" in node_detail_html(tree, None) and "Click a node" in node_detail_html(tree, 99)
    choices = node_choices(tree)
    assert len(choices) == len(tree.nodes) and choices[5] == ("#5 base query #1: e → Gold Two", "5")


def test_parse_node():
    from app.tabs.r2ag.handlers import parse_node

    assert parse_node("12") == 12 and parse_node("3@1700000000") == 3 and parse_node(4) == 4
    assert parse_node(None) is None and parse_node("") is None and parse_node("x") is None


# -- the handlers, over the demo data and the scripted steering ---------------------------------------------------

@pytest.fixture(scope="module")
def studio(session_home, tmp_path_factory):
    from app.common.services import Services

    services = Services(load_config(), session_home, data_path=DEMO,
                        db_url=f"sqlite:///{tmp_path_factory.mktemp('r2ag_db') / 'studio.db'}")
    yield services
    services.close()


def test_studio_tree_steps_one_expansion_at_a_time(studio):
    """demo-002 with the scripted steering: start (root only), one expansion (three base children, all three gold
    hits, the duplicate marked, the expansion's R = 0.720), then to the end; with 'Show pruning' the branches without
    new gold are greyed; a selected node stays selected and shows its passage."""
    from app.tabs.r2ag.handlers import run_tree, select_node, show_tree, start_tree, step_tree

    view, sess = start_tree(studio, str(DEMO), "demo-002", "scripted", 3)
    assert "iteration 0/3" in view.status and "No expansions yet" in view.rewards and view.nodes == [
        (view.nodes[0][0], "0")] and view.selected is None
    view, sess = step_tree(studio, sess)
    assert sess.tree.iterations == 1 and "iteration 1/3" in view.status and "gold found 2/2" in view.status
    assert _ids(view.figure, GOLD) == {1, 2, 3} and view.rewards.count("<tr>") == 2  # header + one expansion
    picked = select_node(studio, sess, False, "3")
    assert picked.selected == 3 and "already retrieved" in picked.detail and "R</th>" in picked.detail
    rt = studio.runtime(str(DEMO))
    pid = sess.tree.nodes[3].pids[0]
    passage = next(p for p in rt.corpus_for(rt.dataset.get("demo-002")).passages if p.pid == pid)
    assert "0.720" in picked.detail and "Caddock River" in picked.detail and passage.text[:40] in picked.detail
    view, sess = run_tree(studio, sess, False, "3")
    assert sess.tree.done and "done (" in view.status and view.selected == 3 and len(view.nodes) == len(sess.tree.nodes)
    greyed = show_tree(studio, sess, True)
    assert _ids(greyed.figure, PRUNED) and not _ids(view.figure, PRUNED)
    assert show_tree(studio, None, True) is None
    again, same = step_tree(studio, sess)  # a finished tree stays as it is
    assert same.tree == sess.tree
    with pytest.raises(ValueError, match="start a tree"):
        step_tree(studio, None)
    with pytest.raises(ValueError, match="no node"):
        select_node(studio, sess, False, "999")
    with pytest.raises(ValueError, match="steering"):
        start_tree(studio, str(DEMO), "demo-002", "oracle")


def test_growing_streams_each_expansion_and_a_stop_keeps_the_last_finished_tree(studio):
    """Scripted steering on demo-002: Expand once yields the tree after one iteration; to the end, the tree is done;
    with the Stop flag set before anything ran, the tree is the one it was (no iteration half-kept)."""
    import threading

    from app.tabs.r2ag.handlers import grow_tree, start_tree

    _, sess = start_tree(studio, str(DEMO), "demo-002", "scripted", 3)
    once = [u for u in grow_tree(studio, sess, threading.Event(), to_end=False, poll=0.01) if u.session is not None]
    assert len(once) == 1 and once[0].session.tree.iterations == 1 and "Expanded 1 iteration" in once[0].status
    end = [u for u in grow_tree(studio, once[0].session, threading.Event(), to_end=True, poll=0.01) if u.session]
    assert end[-1].session.tree.done and "the tree is done" in end[-1].status
    stop = threading.Event()
    stop.set()
    stopped = list(grow_tree(studio, once[0].session, stop, to_end=True, poll=0.01))
    assert stopped[-1].stopped and "Stopped" in stopped[-1].status and "keeps its 1 finished" in stopped[-1].status
    assert stopped[-1].session == once[0].session
    finished = list(grow_tree(studio, end[-1].session, threading.Event(), to_end=True))
    assert "The tree is done" in finished[-1].status and finished[-1].session == end[-1].session


def test_stopping_lm_steering_interrupts_its_decode_and_discards_the_expansion(tiny, tmp_path, hold_at):  # noqa: F811
    """The tiny random model steers with a 1500-token budget, its call held open by the test hold point `r2ag:steer`
    until the Stop (so the expansion cannot end first, however slow the machine): the stream ends at the next tick
    with the tree unchanged, and the decode was interrupted before its first token, not run to its end in the
    background (the backend counts no generated token once the expansion's thread has ended)."""
    import threading

    from app.common.services import Services
    from app.tabs.r2ag.handlers import grow_tree, start_tree
    from evorag_core.config import apply_overrides

    cfg = apply_overrides(load_config(), {"policy.model": str(tiny), "policy.device": "cpu", "policy.threads": 1,
                                          "r2ag.max_new_tokens": 1500})
    services = Services(cfg, tmp_path / "home", data_path=DEMO, db_url=f"sqlite:///{tmp_path / 's.db'}")
    try:
        backend, _ = services.policies.backend_for("lm:base")  # loaded: the first ticks are the steering's
        before = backend.tokens_generated
        hold_at("r2ag:steer")
        _, sess = start_tree(services, str(DEMO), "demo-002", "lm", 2)
        stop = threading.Event()
        run = grow_tree(services, sess, stop, to_end=True, poll=0.05)
        first = next(run)
        assert "the policy model steers" in first.status and first.session is None
        stop.set()
        rest = list(run)
        assert rest[-1].stopped and rest[-1].session == sess and rest[-1].session.tree.iterations == 0
        for thread in threading.enumerate():
            if thread.name == "r2ag-expand":
                thread.join(120)
        assert backend.tokens_generated == before  # interrupted: nothing of the decode was finished
    finally:
        services.close()
