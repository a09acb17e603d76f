"""The reasoning-augmented retrieval tree (RRT) and its expansion loop (seed 002 §2, Algorithm 1 at inference).

A tree is rooted at the question. Each iteration expands the current frontier: for every frontier branch the
steering model reads the question and the passages on that branch (root to node) and replies with base queries,
anticipatory (predicted) queries and possibly the stop signal; every query of every frontier branch is retrieved in
ONE batch (top-k each, k = 1 in the paper) and becomes a child node. Top-t selection: only the first `top_t_base`
base and first `top_t_predicted` predicted children of an expansion (the model's own order) may be expanded later,
only if they brought a passage new to the tree, and not after their expansion emitted stop. The next frontier is
the selected children in tree order, at most `max_frontier` of them (a breadth bound; gold is never used for any
decision). The loop ends after `max_iterations` expansions (L_max), or when no branch is left to expand
(`stop_reason` "stop" when every expansion of the last iteration emitted stop, else "exhausted").

Gold pids (when known) only annotate nodes (`gold_hit`, `new_gold`) and score each expansion with the Top-Survivor
rewards (`rewards.expansion_reward`, prior = the tree's pids before the iteration). `prune` marks, bottom-up, every
node that neither retrieved a new gold passage nor leads to one; `pruned_context` is what the kept branches found.
Trees are immutable values and round-trip through JSON (`to_dict` / `Tree.from_dict`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from evorag_core.errors import ConfigError
from evorag_core.types import Passage
from evorag_core.methods.r2ag.parse import Expansion
from evorag_core.methods.r2ag.rewards import R2agReward, RewardWeights, expansion_reward
from evorag_core.methods.r2ag.steering import SteerRequest, Steering

if TYPE_CHECKING:
    from evorag_core.config import R2agConfig
    from evorag_core.retrieval.base import Retriever

__all__ = ["TreeSettings", "Node", "ExpansionRecord", "Tree", "new_tree", "frontier", "expand_once", "grow",
           "prune", "pruned_context", "retrieve_queries"]


@dataclass(frozen=True)
class TreeSettings:
    max_iterations: int = 5
    top_t_base: int = 4
    top_t_predicted: int = 2
    top_k: int = 1
    max_frontier: int = 4

    def __post_init__(self) -> None:
        for name in ("max_iterations", "top_k", "max_frontier"):
            if getattr(self, name) < 1:
                raise ConfigError(f"r2ag.{name} must be >= 1, got {getattr(self, name)}")
        if self.top_t_base < 0 or self.top_t_predicted < 0:
            raise ConfigError("r2ag.top_t_base and r2ag.top_t_predicted must be >= 0")

    @classmethod
    def from_config(cls, cfg: R2agConfig) -> "TreeSettings":
        return cls(cfg.max_iterations, cfg.top_t_base, cfg.top_t_predicted, cfg.top_k, cfg.max_frontier)


@dataclass(frozen=True)
class Node:
    id: int  # creation order: parents before children, breadth-first
    parent: int | None
    depth: int
    kind: str  # root | base | predicted
    query: str
    rank: int  # 1-based position among its expansion's queries of its kind (0: root)
    pids: tuple[str, ...] = ()
    titles: tuple[str, ...] = ()
    new_pids: tuple[str, ...] = ()  # pids first retrieved in the tree by this node
    gold_hit: bool = False  # one of its pids is gold
    new_gold: int = 0  # gold pids first retrieved by this node
    selected: bool = False  # within its expansion's top-t (may be expanded)
    expansion: int | None = None  # index of the expansion that created it
    pruned: bool = False


@dataclass(frozen=True)
class ExpansionRecord:
    index: int
    iteration: int  # 1-based
    node: int  # the expanded node
    text: str  # the steering reply
    parsed: Expansion
    children: tuple[int, ...]
    reward: R2agReward
    truncated: bool = False


@dataclass(frozen=True)
class Tree:
    question: str
    gold: frozenset[str] = frozenset()
    nodes: tuple[Node, ...] = ()
    expansions: tuple[ExpansionRecord, ...] = ()
    iterations: int = 0
    done: bool = False
    stop_reason: str = ""  # "" while growing | stop | exhausted | max_iterations
    question_id: str = ""

    def retrieved(self) -> tuple[str, ...]:
        """Every pid the tree retrieved, in order of first retrieval (breadth-first)."""
        return tuple(pid for node in self.nodes for pid in node.new_pids)

    def path(self, node_id: int) -> list[Node]:
        out: list[Node] = []
        current: int | None = node_id
        while current is not None:
            out.append(self.nodes[current])
            current = self.nodes[current].parent
        return out[::-1]

    def branch_pids(self, node_id: int) -> tuple[str, ...]:
        """The pids on the branch root -> node, de-duplicated in order."""
        seen: dict[str, None] = {}
        for node in self.path(node_id):
            for pid in node.pids:
                seen.setdefault(pid, None)
        return tuple(seen)

    def expanded(self) -> frozenset[int]:
        return frozenset(e.node for e in self.expansions)

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "question_id": self.question_id, "gold": sorted(self.gold),
                "iterations": self.iterations, "done": self.done, "stop_reason": self.stop_reason,
                "nodes": [{**n.__dict__, "pids": list(n.pids), "titles": list(n.titles),
                           "new_pids": list(n.new_pids)} for n in self.nodes],
                "expansions": [{"index": e.index, "iteration": e.iteration, "node": e.node, "text": e.text,
                                "parsed": e.parsed.to_dict(), "children": list(e.children),
                                "reward": e.reward.to_dict(), "truncated": e.truncated} for e in self.expansions]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Tree":
        nodes = tuple(Node(**{**n, "pids": tuple(n["pids"]), "titles": tuple(n["titles"]),
                              "new_pids": tuple(n["new_pids"])}) for n in raw["nodes"])
        expansions = tuple(ExpansionRecord(e["index"], e["iteration"], e["node"], e["text"],
                                           Expansion.from_dict(e["parsed"]), tuple(e["children"]),
                                           R2agReward(**e["reward"]), e["truncated"]) for e in raw["expansions"])
        return cls(raw["question"], frozenset(raw["gold"]), nodes, expansions, raw["iterations"], raw["done"],
                   raw["stop_reason"], raw.get("question_id", ""))


def new_tree(question: str, gold: frozenset[str] = frozenset(), question_id: str = "") -> Tree:
    """A tree holding only its root (the question, nothing retrieved)."""
    return Tree(question, frozenset(gold), (Node(0, None, 0, "root", question, 0, selected=True),),
                question_id=question_id)


def _stopped_nodes(tree: Tree) -> frozenset[int]:
    return frozenset(e.node for e in tree.expansions if e.parsed.stop)


def frontier(tree: Tree, settings: TreeSettings) -> list[Node]:
    """The branches the next iteration expands (see the module docstring)."""
    if tree.done or tree.iterations >= settings.max_iterations:
        return []
    if tree.iterations == 0:
        return [tree.nodes[0]]
    stopped = _stopped_nodes(tree)
    layer = [n for n in tree.nodes if n.depth == tree.iterations and n.selected and n.new_pids
             and n.parent not in stopped]
    return layer[: settings.max_frontier]


def retrieve_queries(retriever: Retriever, queries: Sequence[str], k: int) -> list[tuple[str, ...]]:
    """Top-k pids per query, all queries in one `search_batch` call."""
    if not queries:
        return []
    return [tuple(h.pid for h in hits) for hits in retriever.search_batch(list(queries), k)]


def expand_once(tree: Tree, steering: Steering, retriever: Retriever, passages: Mapping[str, Passage],
                settings: TreeSettings, weights: RewardWeights | None = None) -> Tree:
    """One iteration: expand every frontier branch; a finished tree comes back marked `done`."""
    weights = weights or RewardWeights(top_t_base=settings.top_t_base, top_t_predicted=settings.top_t_predicted)
    todo = frontier(tree, settings)
    if not todo:
        return _finish(tree, settings)
    requests = [SteerRequest(tree.question, tuple(passages[p] for p in tree.branch_pids(n.id) if p in passages))
                for n in todo]
    proposals = steering.propose(requests)
    if len(proposals) != len(requests):
        raise ValueError(f"steering {steering.name!r} returned {len(proposals)} replies for {len(requests)} requests")
    flat = [q for prop in proposals for _, q in prop.expansion.queries]
    results = iter(retrieve_queries(retriever, flat, settings.top_k))
    prior = frozenset(tree.retrieved())
    seen = set(prior)
    nodes, expansions = list(tree.nodes), list(tree.expansions)
    for parent, prop in zip(todo, proposals):
        exp = prop.expansion
        index = len(expansions)
        children, by_kind = [], {"base": [], "predicted": []}
        for kind, query in exp.queries:
            pids = next(results)
            new = tuple(p for p in pids if p not in seen)
            seen.update(new)
            rank = len(by_kind[kind]) + 1
            by_kind[kind].append(pids)
            top_t = settings.top_t_base if kind == "base" else settings.top_t_predicted
            node = Node(len(nodes), parent.id, parent.depth + 1, kind, query, rank, pids,
                        tuple(passages[p].title if p in passages else p for p in pids), new,
                        any(p in tree.gold for p in pids), sum(p in tree.gold for p in new),
                        rank <= top_t and not exp.stop, index)
            nodes.append(node)
            children.append(node.id)
        reward = expansion_reward(by_kind["base"], by_kind["predicted"], prior, tree.gold, stop=exp.stop,
                                  has_think=exp.has_think, well_formed=exp.well_formed, truncated=prop.truncated,
                                  weights=weights)
        expansions.append(ExpansionRecord(index, tree.iterations + 1, parent.id, prop.text, exp, tuple(children),
                                          reward, prop.truncated))
    grown = replace(tree, nodes=tuple(nodes), expansions=tuple(expansions), iterations=tree.iterations + 1)
    return grown if frontier(grown, settings) else _finish(grown, settings)


def _finish(tree: Tree, settings: TreeSettings) -> Tree:
    if tree.done:
        return tree
    last = [e for e in tree.expansions if e.iteration == tree.iterations]
    if tree.iterations >= settings.max_iterations:
        reason = "max_iterations"
    elif last and all(e.parsed.stop for e in last):
        reason = "stop"
    else:
        reason = "exhausted"
    return replace(tree, done=True, stop_reason=reason)


def grow(tree: Tree, steering: Steering, retriever: Retriever, passages: Mapping[str, Passage], settings: TreeSettings,
         weights: RewardWeights | None = None) -> Tree:
    """Expand until done (at most `max_iterations` iterations)."""
    while not tree.done:
        tree = expand_once(tree, steering, retriever, passages, settings, weights)
    return tree


def prune(tree: Tree) -> Tree:
    """Mark (bottom-up) every node that retrieved no new gold passage and has no kept descendant; the root stays."""
    keep = {0}
    for node in tree.nodes:
        current: int | None = node.id if node.new_gold > 0 else None
        while current is not None and current not in keep:
            keep.add(current)
            current = tree.nodes[current].parent
    nodes = tuple(replace(n, pruned=n.id not in keep) for n in tree.nodes)
    return replace(tree, nodes=nodes)


def pruned_context(tree: Tree) -> tuple[str, ...]:
    """The gold pids found by the kept branches, in order of retrieval (the next training iteration's context)."""
    kept = prune(tree)
    return tuple(p for n in kept.nodes if not n.pruned for p in n.new_pids if p in tree.gold)
