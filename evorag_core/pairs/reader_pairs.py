"""Answer pairs: preferences between the reader's own candidate answers at one state, ranked by the outcome signal.

Why (issue 22): the trajectory pairs of `rollout.py` differ in what the policy does - search on, answer now - and a
round trained on them learned exactly that: fewer steps or searching to the budget (docs/answers.md),
F1 never higher. What the answer is comes from the reader, which no pair touched. An answer pair holds the state
fixed and varies only the answer: at a state of a stored episode whose passages are read, the reader's candidates
(the spans of `reader/span.py`, or yes / no) are scored by `ans` against the gold (`env.signals.answer_score`,
(EM + F1) / 2), and the best one is preferred over the reader's highest-ranked candidates that score clearly less.
The prompt is the reader's prompt (`SpanReader.prompt`, ChatML ending with the assistant opener) and a completion is the
bare span, as the reader scores it (the trainer appends the end-of-turn token the reader scores it with), so a DPO
round on these pairs moves log P(span | reader prompt): the LM score of the span reader, decisive with
`answer.ranker = "lm"` and one feature among many with the learned ranker.

Which wrong candidates a pair rejects (`against`): "top", the reader's highest-ranked ones (the default: the picks
that cost it the answer), or "random", a uniform draw among all of them (seeded by the question, so a rerun builds
the same pairs). A round on "top" pairs learned "not the base reader's own pick" and gained no F1 on unseen questions
(docs/answers.md); "random" pairs ask the model to rank the right span above the candidate set
as a whole, as the learned ranker's conditional logit does.

No pair is built where no candidate scores at least `min_best` (nothing right to prefer), or where the reader's
candidates include nothing `min_gap` below the best.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from evorag_core.env.signals import answer_score
from evorag_core.reader.span import SpanReader
from evorag_core.store.records import NewPair
from evorag_core.types import Passage

if TYPE_CHECKING:
    from evorag_core.env.state import AgentView
    from evorag_core.store.records import Episode

__all__ = ["ReaderPair", "reader_pairs", "state_reader_pairs", "episode_reader_pairs", "READER_PAIR", "ANSWER_SOURCE",
           "AGAINST"]

READER_PAIR = "reader"  # metadata["kind"] of a stored answer pair
ANSWER_SOURCE = "answer"  # its source (evorag_core.store.records.PAIR_SOURCES): `--source answer` trains on them
AGAINST = ("top", "random")  # which wrong candidates a pair rejects (see the module docstring)


@dataclass(frozen=True)
class ReaderPair:
    """One preference between two candidate answers under the reader prompt. Ranks are the reader's (0 = its pick)."""

    prompt: str
    chosen: str
    rejected: str
    chosen_score: float  # answer_score against the gold
    rejected_score: float
    chosen_rank: int
    rejected_rank: int


def reader_pairs(reader: SpanReader, question: str, passages: Sequence[Passage], gold: Sequence[str], *,
                 max_pairs: int = 2, min_gap: float = 0.5, min_best: float = 0.5,
                 against: str = "top") -> list[ReaderPair]:
    """The answer pairs at one state: the best-scoring candidate against up to `max_pairs` of the candidates scoring
    at least `min_gap` less - the reader's highest-ranked ones, or a seeded random draw of them (`against`; see the
    module docstring). The rejected ones are listed in the reader's order."""
    if against not in AGAINST:
        raise ValueError(f"against={against!r}: expected one of {AGAINST}")
    if not passages or not gold:
        return []
    (first,) = reader.read(question, passages)
    if first.kind == "refusal":
        return []
    ranked = sorted(reader.last_scores.items(), key=lambda kv: -kv[1])
    scored = [(text, answer_score(text, gold), rank) for rank, (text, _) in enumerate(ranked)]
    best = max(scored, key=lambda s: (s[1], -s[2]))
    if best[1] < min_best:
        return []
    prompt = reader.prompt(question, passages)
    worse = [s for s in scored if s[1] <= best[1] - min_gap]
    if against == "random" and len(worse) > max_pairs:
        drawn = random.Random(zlib.crc32(question.encode())).sample(range(len(worse)), max_pairs)
        worse = [worse[i] for i in sorted(drawn)]
    worse = worse[:max_pairs]
    return [ReaderPair(prompt, best[0], text, best[1], score, best[2], rank) for text, score, rank in worse]


def state_reader_pairs(reader: SpanReader, question: str, passages: Sequence[Passage], gold: Sequence[str],
                       metadata: dict[str, Any], *, stage: str | None = None, max_pairs: int = 2,
                       min_gap: float = 0.5, min_best: float = 0.5, against: str = "top") -> list[NewPair]:
    """The answer pairs at one state as store records: `metadata` (where the state comes from: at least
    `question_id`) is copied into each pair's, next to the kind, the two scores and ranks and the passage ids."""
    out: list[NewPair] = []
    for pair in reader_pairs(reader, question, passages, gold, max_pairs=max_pairs, min_gap=min_gap,
                             min_best=min_best, against=against):
        meta: dict[str, Any] = {
            "kind": READER_PAIR, **metadata, "score_chosen": pair.chosen_score, "score_rejected": pair.rejected_score,
            "rank_chosen": pair.chosen_rank, "rank_rejected": pair.rejected_rank, "against": against,
            "passages": [p.pid for p in passages],
        }
        out.append(NewPair(pair.prompt, pair.chosen, pair.rejected, source=ANSWER_SOURCE,
                           margin=pair.chosen_score - pair.rejected_score, stage=stage, metadata=meta))
    return out


def episode_reader_pairs(episode: Episode, views: Iterable[tuple[int, AgentView]], reader: SpanReader,
                         gold: Sequence[str], passages_of: Callable[[AgentView], list[Passage]], *,
                         max_pairs: int = 2, min_gap: float = 0.5, min_best: float = 0.5,
                         against: str = "top") -> list[NewPair]:
    """The answer pairs of a stored episode's states (`views`: (t, the state before step t), e.g. from
    `training.rollout_data.replay_episode`), each state's reader passages by `passages_of` (the agent's
    `reader_passages`); a state whose passages repeat an earlier one's adds nothing. Ready for `Store.add_pairs`."""
    out: list[NewPair] = []
    seen: set[tuple[str, ...]] = set()
    for t, view in views:
        passages = passages_of(view)
        key = tuple(p.pid for p in passages)
        if not passages or key in seen:
            continue
        seen.add(key)
        out += state_reader_pairs(reader, view.question, passages, gold,
                                  {"episode_db_id": episode.id, "question_id": episode.question_id, "t": t},
                                  stage=episode.stage, max_pairs=max_pairs, min_gap=min_gap, min_best=min_best,
                                  against=against)
    return out
