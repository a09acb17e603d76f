"""Preference examples: a pair becomes (prompt, chosen, rejected, per-signal targets); the candidate text with its observation; splits by question."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, Union


from evorag_core.errors import ConfigError
from evorag_core.env.signals import SIGNAL_NAMES

if TYPE_CHECKING:
    from evorag_core.store import NewPair, Pair

PairLike = Union["Pair", "NewPair", Mapping[str, Any]]  # a store pair, a queued pair or an export record (pairs/io.py)

@dataclass(frozen=True)
class PreferenceExample:
    """One pair: `chosen` has the larger total return; `deltas[k]` = G^(k)(chosen) - G^(k)(rejected)."""

    prompt: str
    chosen: str
    rejected: str
    margin: float
    deltas: Mapping[str, float]
    group: str  # split key: the question id (pairs of one question never straddle the split)


def _as_pair(item: PairLike) -> Pair | NewPair:
    """Store `Pair`s and `NewPair`s as they are; an export record (a mapping, pair_io's format) as a `NewPair`."""
    if isinstance(item, Mapping):
        from evorag_core.pairs.io import new_pair_from_record

        return new_pair_from_record(item)
    return item


def candidate_text(completion: str, observation: str | None) -> str:
    """The candidate part of x: the reply line, then what it retrieved (if anything; see the module docstring)."""
    return f"{completion}\n{observation}" if observation else completion


def examples_from_pairs(pairs: Iterable[PairLike], min_margin: float,
                        observation: bool = True) -> tuple[list[PreferenceExample], int]:
    """Examples from store `Pair`s / `NewPair`s or export records that carry per-signal returns (metadata
    `signals_chosen` / `signals_rejected`) and have margin >= `min_margin`. Returns (examples, skipped); human
    pairs without per-signal returns are skipped (nothing to train the heads on). With `observation`, each side
    is `candidate_text(reply, the branch's recorded observation)`."""
    out: list[PreferenceExample] = []
    skipped = 0
    for item in pairs:
        pair = _as_pair(item)
        meta = pair.metadata or {}
        sc, sr = meta.get("signals_chosen"), meta.get("signals_rejected")
        if not sc or not sr or pair.margin is None or pair.margin < min_margin:
            skipped += 1
            continue
        deltas = {k: float(sc.get(k, 0.0)) - float(sr.get(k, 0.0)) for k in SIGNAL_NAMES}
        group = str(meta.get("question_id") or pair.prompt)
        chosen, rejected = pair.chosen, pair.rejected
        if observation:
            chosen = candidate_text(chosen, (meta.get("chosen_branch") or {}).get("observation"))
            rejected = candidate_text(rejected, (meta.get("rejected_branch") or {}).get("observation"))
        out.append(PreferenceExample(pair.prompt, chosen, rejected, float(pair.margin), deltas, group))
    return out, skipped


def split_examples(examples: Sequence[PreferenceExample], holdout: float,
                   seed: int) -> tuple[list[PreferenceExample], list[PreferenceExample]]:
    """(train, eval) with about `holdout` of the groups (questions) held out; deterministic in `seed`."""
    if not 0.0 < holdout < 1.0:
        raise ConfigError(f"preference.holdout must be in (0, 1), got {holdout}")
    groups = sorted({e.group for e in examples})
    random.Random(seed).shuffle(groups)
    n_eval = min(max(1, round(holdout * len(groups))), len(groups) - 1) if len(groups) > 1 else 0
    held = set(groups[:n_eval])
    return [e for e in examples if e.group not in held], [e for e in examples if e.group in held]


# -- the frozen encoder ------------------------------------------------------------------------------------------
