"""Preference-pair handlers: the filtered table with counts, editing, discarding and restoring a pair, and answer
pairs made from the stored episodes (training/answer_pairs.py)."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from evorag_core import test_hooks
from evorag_core.env.scheduler import STAGES

from app.common import views
from app.common.handlers import check_typed, none_if_all, short
from app.common.services import Services
from app.tabs.pairs.view import prompt_html

__all__ = ["PairsView", "pairs_view", "pair_fields", "edit_pair", "discard_pair", "restore_pair", "answer_pairs"]


@dataclass(frozen=True)
class PairsView:
    table: str
    counts: str
    ids: list[tuple[str, int]]


def pairs_view(svc: Services, source: str | None = None, status: str | None = None, annotator: str | None = None,
               stage: str | None = None, limit: int = 200) -> PairsView:
    """Pairs matching the filters ('all' or empty: no filter), with counts by source, status, annotator and stage."""
    store = svc.store()
    filters = {"source": none_if_all(source), "status": none_if_all(status),
               "annotator": none_if_all(annotator.strip() if annotator else None), "stage": none_if_all(stage)}
    rows = store.list_pairs(**filters, limit=limit)
    table = views.table_html(
        ["id", "source", "status", "annotator", "stage", "margin", "chosen", "rejected", "created"],
        [[p.id, p.source, p.status, p.annotator or "", p.stage or "", p.margin if p.margin is not None else "",
          short(p.chosen, 60), short(p.rejected, 60), p.created_at.strftime("%Y-%m-%d %H:%M")] for p in rows],
        table_id="evo-pairs", empty="No pairs match these filters.",
    )
    active = {k: v for k, v in filters.items() if v is not None}
    counts = "".join(views.counts_html(f"by {g}", store.count_pairs(g, **active))
                     for g in ("source", "status", "annotator", "stage"))
    total = sum(store.count_pairs("status", **active).values())
    counts = f'<div class="evo-counts"><span class="evo-h">matching pairs</span> <b id="evo-pair-total">{total}</b></div>' + counts
    return PairsView(table, counts, [(f"#{p.id} {p.status} {short(p.chosen, 40)}", p.id) for p in rows])


def pair_fields(svc: Services, pair_id: int | None) -> tuple[str, str, str, str]:
    """(the prompt as a conversation (HTML, `view.prompt_html`), chosen, rejected, stage) of a pair, for the edit
    form."""
    if pair_id is None:
        return prompt_html(""), "", "", ""
    p = svc.store().get_pair(int(pair_id))
    return prompt_html(p.prompt), p.chosen, p.rejected, p.stage or ""


def edit_pair(svc: Services, pair_id: int | None, chosen: str, rejected: str, stage: str) -> str:
    """Store the typed completions (each within studio.max_question_chars) and stage (a curriculum stage, or empty
    for none) of a pair."""
    if pair_id is None:
        raise ValueError("choose a pair to edit")
    limit = svc.cfg.studio.max_question_chars
    chosen = check_typed(chosen.strip(), limit, "chosen completion")
    rejected = check_typed(rejected.strip(), limit, "rejected completion")
    if not chosen or not rejected:
        raise ValueError("chosen and rejected must not be empty")
    if chosen == rejected:
        raise ValueError("chosen and rejected must differ")
    stage = stage.strip()
    if stage and stage not in STAGES:
        raise ValueError(f"the stage is one of {', '.join(STAGES)}, or empty for none; got {stage[:40]!r}")
    p = svc.store().update_pair(int(pair_id), chosen=chosen, rejected=rejected, stage=stage or None)
    return f"Pair #{p.id} saved."


def discard_pair(svc: Services, pair_id: int | None) -> str:
    if pair_id is None:
        raise ValueError("choose a pair to discard")
    p = svc.store().discard_pair(int(pair_id))
    return f"Pair #{p.id} discarded (kept in the database, never trained on)."


def restore_pair(svc: Services, pair_id: int | None) -> str:
    if pair_id is None:
        raise ValueError("choose a pair to restore")
    p = svc.store().restore_pair(int(pair_id))
    return f"Pair #{p.id} is queued again."


def answer_pairs(svc: Services, states: str = "final", on_episode: Callable[[int, int], None] | None = None,
                 stop: threading.Event | None = None) -> str:
    """Queue answer pairs (source "answer") from the stored episodes not paired yet, read by the base model's reader
    (`training.answer_pairs.make_answer_pairs`; `states`: "final" or "all"). The model is held one episode at a
    time, so other sessions' steps go on in between; `stop` (the tab's Stop) ends the run after the episode being
    read, keeping the pairs queued so far."""
    from evorag_core.policy.agent import reader_passages
    from evorag_core.reader.answers import Reader
    from training.answer_pairs import make_answer_pairs

    from app.common.policies import BASE

    cfg = svc.cfg
    backend, _ = svc.policies.backend_for(BASE)
    reader = Reader(backend, cfg.answer, cfg.policy.passage_chars).span
    if reader is None:
        raise ValueError('answer pairs need the span reader: answer.mode = "span" in the config')

    stop = stop if stop is not None else threading.Event()

    @contextmanager
    def base_model() -> Iterator[None]:
        with svc.policies.lock:
            svc.policies.use(None)
            test_hooks.hold("pairs:answers", stop)  # off unless a test names it (evorag_core/test_hooks.py)
            yield

    report = make_answer_pairs(svc.store(), reader, lambda v: reader_passages(v, cfg.policy.reader_passages),
                               t_max=cfg.env.t_max, states=states, on_episode=on_episode, hold=base_model,
                               stop=stop.is_set)
    if report.stopped:
        return (f"Stopped after {_n(report.episodes, 'episode')}: {_n(len(report.pair_ids), 'answer pair')} queued. "
                "Make answer pairs again to go on (paired episodes are skipped).")
    if not report.episodes:
        return "No stored episode to read: run episodes (Episode tab, or rollouts) first; evaluation runs are not used."
    return (f"Queued {_n(len(report.pair_ids), 'answer pair')} from {_n(report.states, 'state')} of "
            f"{_n(report.episodes, 'episode')} ({report.already} paired before, {report.no_gold} without a gold "
            f"answer, {report.no_passages} with no passage to read). Train them with a DPO round whose pair source "
            "is 'answer'.")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
