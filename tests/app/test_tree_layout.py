"""app.tabs.r2ag.tree_layout.tidy_layout: no two nodes of a level closer than the gap, parents centred over their children,
children in order, deterministic, and invalid parent lists refused."""
from __future__ import annotations

import random

import pytest

from app.tabs.r2ag.tree_layout import Placed, tidy_layout


def _random_tree(rng: random.Random, n: int, max_children: int = 6) -> list[int | None]:
    """Breadth-first ids (parents before children), as R²AG trees are."""
    parents: list[int | None] = [None]
    frontier = [0]
    while len(parents) < n and frontier:
        nxt = []
        for p in frontier:
            for _ in range(rng.randint(0, max_children)):
                if len(parents) >= n:
                    break
                parents.append(p)
                nxt.append(len(parents) - 1)
        frontier = nxt or ([rng.randrange(len(parents))] if len(parents) < n else [])
    return parents


def _check(parents: list[int | None], placed: list[Placed], gap: float = 1.0) -> None:
    n = len(parents)
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        if p is not None:
            children.setdefault(p, []).append(i)
            assert placed[i].depth == placed[p].depth + 1
    levels: dict[int, list[float]] = {}
    for p in placed:
        levels.setdefault(p.depth, []).append(p.pos)
    for depth, xs in levels.items():  # no overlaps: same-level nodes at least `gap` apart
        xs.sort()
        assert all(b - a >= gap - 1e-9 for a, b in zip(xs, xs[1:])), (depth, xs)
    for p, kids in children.items():  # parent centred over its first and last child; children in order
        assert placed[p].pos == pytest.approx((placed[kids[0]].pos + placed[kids[-1]].pos) / 2)
        assert [placed[k].pos for k in kids] == sorted(placed[k].pos for k in kids)
    assert min(p.pos for p in placed) == 0.0 and len(placed) == n


def test_small_trees_by_hand():
    assert tidy_layout([None]) == [Placed(0.0, 0)]
    assert tidy_layout([]) == []
    # a root with three leaves: leaves 0, 1, 2 and the root over the middle one
    assert tidy_layout([None, 0, 0, 0]) == [Placed(1.0, 0), Placed(0.0, 1), Placed(1.0, 1), Placed(2.0, 1)]
    # a chain stays straight
    assert [p.pos for p in tidy_layout([None, 0, 1, 2])] == [0.0, 0.0, 0.0, 0.0]
    # two subtrees with two leaves each: the second subtree is pushed right of the first one's contour
    placed = tidy_layout([None, 0, 0, 1, 1, 2, 2])
    assert [p.pos for p in placed] == [1.5, 0.5, 2.5, 0.0, 1.0, 2.0, 3.0]


def test_a_deep_subtree_pushes_its_sibling_by_the_contour_not_the_root():
    # node 1 has a wide grandchild level (4 leaves under one child); node 2 is a leaf with a 2-leaf child below
    parents = [None, 0, 0, 1, 3, 3, 3, 3, 2, 8, 8]
    placed = tidy_layout(parents)
    _check(parents, placed)
    level3 = sorted(p.pos for p in placed if p.depth == 3)
    assert level3 == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # packed tight along the contour


def test_random_trees_have_no_overlaps_and_centred_parents():
    rng = random.Random(7)
    for _ in range(200):
        parents = _random_tree(rng, rng.randint(1, 60))
        _check(parents, tidy_layout(parents))
    parents = _random_tree(random.Random(3), 40)
    _check(parents, tidy_layout(parents, gap=2.5), gap=2.5)


def test_deterministic():
    parents = _random_tree(random.Random(11), 50)
    assert tidy_layout(parents) == tidy_layout(list(parents)) == tidy_layout(tuple(parents))


def test_deep_chains_do_not_recurse():
    parents = [None] + list(range(1500))  # deeper than the default recursion limit
    placed = tidy_layout(parents)
    assert placed[-1] == Placed(0.0, 1500)


@pytest.mark.parametrize("parents", [[0], [None, None], [None, 5], [None, 2, 1], [None, 1]])
def test_not_a_tree_is_refused(parents):
    with pytest.raises(ValueError):
        tidy_layout(parents)


def test_gap_must_be_positive():
    with pytest.raises(ValueError, match="gap"):
        tidy_layout([None, 0], gap=0)
