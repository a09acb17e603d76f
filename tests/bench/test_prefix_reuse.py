"""bench/prefix_reuse.py on hand-made prompt sequences: the unbounded count, the replay of PrefixPool's cropping
(which runs a dropped branch again) and of the copying pool (which keeps it)."""
from __future__ import annotations

import pytest

from bench.prefix_reuse import CopyingPool, replay, unbounded_tokens

A, B, C, D = [1, 2, 3, 4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14]


def test_unbounded_counts_only_what_no_earlier_prompt_shares():
    # A+B: 9 new; A+C: C (3); A+B+D: D (2); A+C again: free; A alone (a prefix of A+B): its last token
    assert unbounded_tokens([A + B, A + C, A + B + D, A + C, A]) == 9 + 3 + 2 + 0 + 1


def test_cropping_pool_runs_a_dropped_branch_again():
    """One prompt family in PrefixPool's way: A+C crops B off the cache, so A+B+D pays for B again."""
    got = replay([A + B, A + C, A + B + D], slots=3, copy_min=None)
    assert got.tokens_run == 9 + 3 + 5 and got.tokens_copied == 0
    assert got.peak_tokens_held == len(A + B + D)  # one slot holds A+B, then A+C, then A+B+D


def test_copying_pool_keeps_the_branch_and_counts_the_copy():
    got = replay([A + B, A + C, A + B + D], slots=3, copy_min=2)
    assert got.tokens_run == 9 + 3 + 2 and got.tokens_copied == len(A)
    assert got.peak_tokens_held == len(A + C) + len(A + B + D)  # the copy's slot and the kept branch
    # below the threshold (B is 3 tokens) it crops like PrefixPool
    assert replay([A + B, A + C, A + B + D], slots=3, copy_min=4).tokens_run == 9 + 3 + 5


def test_copying_pool_frees_the_least_recently_used_other_slot():
    pool = CopyingPool(1, slots=2, copy_min=1)
    first = pool.select(A + B)
    first.ids.extend(A + B)
    other = pool.select([99, 98])
    other.ids.extend([99, 98])
    copy = pool.select(A + C)  # shares A with `first`: copied into the slot `other` held
    assert copy.ids == A and first in pool.entries and other not in pool.entries and pool.copied == len(A)
    with pytest.raises(ValueError):
        CopyingPool(1, slots=1, copy_min=1)
