"""Human labels of the annotation queue into preference pairs: pure functions.

A ranking is a list of tiers of candidate indices (0-based), best first; candidates of one tier are tied. The
studio's keys build it: the candidates picked in order (1-9) are tiers of one, the ones left unpicked form the next
tier, and one marked worst (Shift+1-9) a last tier - so picking only the best says "best over all the others",
picking all gives a full order. A refusal label rescores its stored step (`rescored_refusal`).

The rule: every candidate is preferred over each candidate of every lower tier (never over one of its own tier), so
a full order of K candidates gives K(K-1)/2 pairs, a best-only pick K-1 and a tie none. Two candidates with the same
completion text make no pair. Each pair has source `human`, the annotator, the item id and the item's agreement.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evorag_core.env.scheduler import step_reward
from evorag_core.env.signals import refusal_value
from evorag_core.store.records import NewPair, Step

__all__ = ["HUMAN", "tiers_from_picks", "check_ranking", "ranking_pairs", "pairs_for_label", "rescored_refusal"]

HUMAN = "human"  # the pair source (evorag_core.store.records.PAIR_SOURCES)


def tiers_from_picks(picks: Sequence[int], k: int, worst: int | None = None) -> list[list[int]]:
    """The ranking the keys made: each pick (0-based, in the order picked) a tier of its own, then the unpicked ones
    as one tier, then `worst` (the candidate marked worst) alone at the bottom. So best-only, best and worst,
    worst-only and a full order are all rankings. ValueError for a pick out of range or picked twice, a worst that is
    also picked, or neither a pick nor a worst."""
    if not picks and worst is None:
        raise ValueError("pick at least the best candidate (keys 1-9) or mark the worst (Shift+1-9), or mark a tie")
    if len(set(picks)) != len(picks) or any(not 0 <= p < k for p in picks):
        raise ValueError(f"picks must be distinct candidates 1..{k}; got {[p + 1 for p in picks]}")
    if worst is not None and (not 0 <= worst < k or worst in picks):
        raise ValueError(f"the worst must be a candidate 1..{k} that is not also picked; got {worst + 1}")
    rest = [i for i in range(k) if i not in picks and i != worst]
    return [[p] for p in picks] + ([rest] if rest else []) + ([[worst]] if worst is not None else [])


def check_ranking(ranking: Sequence[Sequence[int]], k: int) -> list[list[int]]:
    """`ranking` as lists, if its tiers are non-empty and hold each of the K candidates exactly once."""
    tiers = [[int(i) for i in tier] for tier in ranking]
    flat = [i for tier in tiers for i in tier]
    if any(not tier for tier in tiers) or sorted(flat) != list(range(k)):
        raise ValueError(f"a ranking holds each of the {k} candidates exactly once, in non-empty tiers; got {tiers}")
    return tiers


def ranking_pairs(tiers: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(preferred, rejected) index pairs of a ranking: each candidate over each one in a lower tier."""
    return [(a, b) for i, upper in enumerate(tiers) for lower in tiers[i + 1:] for a in upper for b in lower]


def pairs_for_label(payload: Mapping[str, Any], item_id: int, annotator: str, tiers: Sequence[Sequence[int]],
                    agreement: float | None, *, resolved_by: str | None = None) -> list[NewPair]:
    """The preference pairs of one ranking of a preference item (`payload`: prompt, candidates with their
    completions and, when scored, branch returns). The margin is the branch-return difference when both are known."""
    candidates = payload["candidates"]
    out = []
    for a, b in ranking_pairs(tiers):
        ca, cb = candidates[a], candidates[b]
        if ca["completion"] == cb["completion"]:
            continue
        ra, rb = ca.get("branch_return"), cb.get("branch_return")
        meta = {"annotation_item": item_id, "agreement": agreement, "candidates": [a, b],
                "tiers": [list(t) for t in tiers], **{k: payload[k] for k in _CONTEXT if payload.get(k) is not None}}
        if resolved_by is not None:
            meta["resolved_by"] = resolved_by
        out.append(NewPair(
            prompt=payload["prompt"], chosen=ca["completion"], rejected=cb["completion"], source=HUMAN,
            annotator=annotator, margin=None if ra is None or rb is None else float(ra) - float(rb),
            stage=payload.get("stage"), metadata=meta,
        ))
    return out


_CONTEXT = ("question_id", "dataset", "episode_db_id", "t")


def rescored_refusal(step: Step, answerable: bool) -> tuple[dict[str, float], float]:
    """A stored step's signals and reward under a person's verdict: a REFUSE's `ref` becomes the refusal value of
    that verdict (as the Episode tab's override recomputes it), and R_t the weighted sum under the step's own
    weights; any other step keeps its signals and reward (the verdict is only recorded)."""
    signals = dict(step.signals)
    if step.action != "REFUSE":
        return signals, float(step.reward)
    signals["ref"] = refusal_value(answerable)
    return signals, step_reward(signals, step.weights)
