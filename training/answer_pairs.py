"""Answer pairs from the store's episodes: the one kind of pair whose DPO round has raised the agent's F1.

A round on trajectory pairs teaches the policy when to stop; what the answer is comes from the reader, and only answer
pairs move it (docs/answers.md, "Learning rounds on answers": on 200 held-out HotpotQA questions a reader round at
lr 1e-3 gave seed-mean F1 +0.035, p 0.04). This module makes those pairs from what a studio already holds: for each
finished episode (rollouts, studio episodes; never an evaluation episode, whose questions are a dev slice) the states
are replayed (`rollout_data.replay_episode`), the agent's reader passages at the state it answered from (`states =
"final"`, the default) or at every state (`"all"`) are read again, and `evorag_core.pairs.reader_pairs` prefers the
candidate closest to the gold answer over a wrong one. The gold comes from the question as registered in the store,
else from the episode's data file. An episode that already gave answer pairs is skipped, so a rerun adds only the new
episodes' pairs. The pairs are stored with source "answer": `evorag train --objective dpo --source answer` (or the
Training tab's pair source) trains on them alone.
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from evorag_core.pairs.reader_pairs import ANSWER_SOURCE, episode_reader_pairs

from training.rollout_data import PassageResolver, episode_data_file, replay_episode

if TYPE_CHECKING:
    from evorag_core.reader.span import SpanReader
    from evorag_core.store import Episode, Store
    from evorag_core.types import Passage

__all__ = ["AnswerPairsReport", "STATES", "make_answer_pairs"]

STATES = ("final", "all")  # which states of an episode are read: the one it answered from, or every one


@dataclass(frozen=True)
class AnswerPairsReport:
    episodes: int  # finished, non-evaluation episodes looked at
    already: int  # of them, skipped: they gave answer pairs before
    no_gold: int  # of them, skipped: their question has no gold answer in the store or the data file
    states: int  # states read
    pair_ids: tuple[int, ...]  # the pairs stored (queued)
    stopped: bool = False  # `stop` was set: the episodes after the last one looked at are left for a rerun
    no_passages: int = 0  # of the states read, those with no passage to read (nothing retrieved, or none stored)


class _Gold:
    """question -> gold answers: the question as registered in the store, else the episode's data file
    (`episode_data_file`), else `default_data`; each file is loaded once. None where neither knows the question or it
    has no answer."""

    def __init__(self, store: Store, default_data: str | None):
        self.store, self.default_data = store, default_data
        self._files: dict[str, dict[str, tuple[str, ...]]] = {}

    def __call__(self, episode: Episode) -> tuple[str, ...] | None:
        try:
            answers = tuple(self.store.get_question(episode.dataset, episode.question_id).answers)
        except KeyError:
            answers = ()
        if answers:
            return answers
        for path in dict.fromkeys(p for p in (episode_data_file(episode), self.default_data) if p):
            answers = self._file(str(path)).get(episode.question_id, ())
            if answers:
                return answers
        return None

    def _file(self, path: str) -> dict[str, tuple[str, ...]]:
        if path not in self._files:
            from evorag_core.data.datasets import load_dataset

            self._files[path] = {q.id: tuple(q.answers) for q in load_dataset(Path(path)).questions}
        return self._files[path]


def make_answer_pairs(store: Store, reader: SpanReader, passages_of: Callable[[object], list[Passage]], *,
                      t_max: int, data: str | None = None, states: str = "final", against: str = "random",
                      max_pairs: int = 1, episode_ids: Sequence[int] = (), limit: int | None = None,
                      on_episode: Callable[[int, int], None] | None = None,
                      hold: Callable[[], AbstractContextManager] = nullcontext,
                      stop: Callable[[], bool] = lambda: False) -> AnswerPairsReport:
    """Answer pairs at the states of the store's finished, non-evaluation episodes (exactly `episode_ids` if given,
    else the `limit` newest, all by default), queued with source "answer"; see the module docstring. `passages_of`
    is the agent's reader passages of a state (`policy.agent.reader_passages` with `policy.reader_passages`);
    `data` names a data file for questions the store does not hold; `on_episode(done, total)` reports progress
    (first with done = 0); `hold()` is entered around each episode's reads (the studio's model lock, with the base
    weights active); `stop()` is asked after each episode: once true, no further one is read (each episode's pairs
    are stored as it is read, so a stopped run loses none, and a rerun skips what it paired)."""
    if states not in STATES:
        raise ValueError(f"states={states!r}: expected one of {STATES}")
    done_before = {p.metadata.get("episode_db_id") for p in store.list_pairs(source=ANSWER_SOURCE, limit=None)}
    if episode_ids:
        listed = [store.get_episode(i) for i in episode_ids]
    else:
        listed = [e for e in store.list_episodes(limit=limit) if e.status != "running" and e.source != "eval"]
    gold_of, resolve = _Gold(store, data), PassageResolver(data, store)
    looked = already = no_gold = read = empty = 0
    ids: list[int] = []
    if on_episode is not None:
        on_episode(0, len(listed))
    for i, listed_episode in enumerate(sorted(listed, key=lambda e: e.id)):
        if i and stop():  # asked after each episode: a run once started reads one, so a Stop never races its start
            return AnswerPairsReport(looked, already, no_gold, read, tuple(ids), stopped=True, no_passages=empty)
        looked += 1
        if listed_episode.id in done_before:
            already += 1
        elif (gold := gold_of(listed_episode)) is None:
            no_gold += 1
        else:
            episode = store.get_episode(listed_episode.id)
            replay = replay_episode(episode, resolve, t_max)
            views = [(s.t, s.view) for s in replay.steps] + [(len(replay.steps) + 1, replay.final_view)]
            if states == "final":  # the state the last step was taken at if it answered (or refused), else the last
                views = views[-2:-1] if replay.terminated else views[-1:]
            read += len(views)
            empty += sum(not passages_of(view) for _, view in views)
            with hold():
                pairs = episode_reader_pairs(episode, views, reader, gold, passages_of, max_pairs=max_pairs,
                                             against=against)
            ids += store.add_pairs(pairs) if pairs else []
        if on_episode is not None:
            on_episode(i + 1, len(listed))
    return AnswerPairsReport(looked, already, no_gold, read, tuple(ids), no_passages=empty)
