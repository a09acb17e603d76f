"""A tidy layout for rooted trees (Reingold–Tilford style), as a pure function: `tidy_layout(parents)`.

Each node gets a breadth position (`pos`) and its depth. Subtrees are laid out bottom-up; the subtrees of a node's
children are placed in order, each pushed just far enough from the ones before it that no two nodes on the same
level come closer than `gap` (compared level by level along the subtrees' contours); a parent sits exactly midway
between its first and its last child; leaves are `gap` apart. The result is shifted so that the smallest position
is 0. It depends only on `parents` (children in the order of their ids), so the same tree always gets the same
layout.

The plain contour comparison is O(n · depth) per placement — fine for the studio's trees (tens of nodes), and with
no threads or threading pointers to get wrong.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["Placed", "tidy_layout"]


@dataclass(frozen=True)
class Placed:
    pos: float  # position across the levels (0 = the first leaf side)
    depth: int  # 0 = root


def tidy_layout(parents: Sequence[int | None], gap: float = 1.0) -> list[Placed]:
    """Positions for nodes 0..n-1 given each node's parent index (None for the single root).

    Raises ValueError when `parents` is not a tree (no root or several roots, a parent out of range, a cycle)."""
    n = len(parents)
    if n == 0:
        return []
    if gap <= 0:
        raise ValueError(f"gap must be > 0, got {gap}")
    roots = [i for i, p in enumerate(parents) if p is None]
    if len(roots) != 1:
        raise ValueError(f"a tree has exactly one root, got {len(roots)}")
    children: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parents):
        if p is not None:
            if not 0 <= p < n or p == i:
                raise ValueError(f"node {i} has an invalid parent {p}")
            children[p].append(i)
    depth = [0] * n
    order, stack = [], [roots[0]]  # pre-order, iterative (no recursion limit)
    seen = [False] * n
    while stack:
        v = stack.pop()
        if seen[v]:
            raise ValueError("the parents contain a cycle")
        seen[v] = True
        order.append(v)
        for c in reversed(children[v]):
            depth[c] = depth[v] + 1
            stack.append(c)
    if len(order) != n:
        raise ValueError("some nodes are not reachable from the root (a cycle)")

    # bottom-up: each subtree's offsets relative to its root, and its contour (min, max offset per level below it)
    rel: list[float] = [0.0] * n  # a node's offset from its parent
    contour: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    for v in reversed(order):
        kids = children[v]
        if not kids:
            contour[v] = [(0.0, 0.0)]
            continue
        merged: list[tuple[float, float]] = []  # contour of the children placed so far (offsets from child 0)
        offsets: list[float] = []
        for c in kids:
            shift = 0.0
            if merged:
                shift = max(merged[lvl][1] - contour[c][lvl][0] + gap
                            for lvl in range(min(len(merged), len(contour[c]))))
            offsets.append(shift)
            for lvl, (lo, hi) in enumerate(contour[c]):
                if lvl < len(merged):
                    merged[lvl] = (min(merged[lvl][0], lo + shift), max(merged[lvl][1], hi + shift))
                else:
                    merged.append((lo + shift, hi + shift))
        centre = (offsets[0] + offsets[-1]) / 2
        for c, off in zip(kids, offsets):
            rel[c] = off - centre
        contour[v] = [(0.0, 0.0)] + [(lo - centre, hi - centre) for lo, hi in merged]

    absolute = [0.0] * n
    for v in order:  # pre-order: parents before children
        p = parents[v]
        absolute[v] = 0.0 if p is None else absolute[p] + rel[v]
    low = min(absolute)
    return [Placed(round(a - low, 9), d) for a, d in zip(absolute, depth)]
