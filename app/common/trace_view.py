"""A stored episode, read-only, with the Episode view's renderers: the head (question, source, policy, outcome and
links), the steps table with the seven signals, the weight schedule and per-step contributions charts, the passages
of every step and the judge verdicts (overrides applied). Used by the Traces tab and by Evaluate's drill-down.

Episodes of environment methods (studio sessions, rollouts, `evorag eval` of oracle / script / agent) are rebuilt
as `EpisodeRecord`s; other evaluation methods (pipelines, DynaKrag, R²AG, ARENA) show their own trace as stored in
the episode's config. Passage texts come from the episode's data file when the studio may read it; otherwise the
passage ids are shown.
"""
from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence
from urllib.parse import urlencode

import plotly.graph_objects as go

from evorag_core.config import WeightsConfig
from evorag_core.env.scheduler import WeightTable
from evorag_core.env.actions import parse_action
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.errors import EvoRagError
from evorag_core.env.judges import Verdict
from evorag_core.metrics import GRADE_LABELS, grade_verdict
from evorag_core.types import Passage

from app.common import grading_view, views

if TYPE_CHECKING:
    from evorag_core.store import Episode, Judgment

__all__ = ["TraceView", "render_trace", "trace_link", "question_link", "record_of", "method_trace_html"]

log = logging.getLogger(__name__)

@functools.lru_cache(maxsize=128)  # drawn once per combination of these values (Plotly figures are costly)
def _weights_figure(stage: str, schedule: str, preset: str, t_max: int, current: int | None,
                    weights: WeightsConfig, recorded: views.Recorded) -> go.Figure:
    return views.weights_figure(stage, schedule, preset, t_max, current, WeightTable.from_config(weights), recorded)

PassageLookup = Callable[[str], "Mapping[str, Passage] | None"]  # data path -> {pid: Passage} (None: unreadable)


@dataclass(frozen=True)
class TraceView:
    episode_id: int
    head: str  # HTML: question, meta, outcome, links
    steps: str  # HTML table
    weights: go.Figure
    contributions: go.Figure
    passages: str  # HTML: passages of every step
    verdicts: str  # HTML
    link: str  # the trace's own URL (relative when the page's address is unknown)


def trace_link(episode_id: int, base: str = "") -> str:
    return f"{base}?{urlencode({'episode': episode_id})}"


def question_link(data_path: str, question_id: str, base: str = "") -> str:
    return f"{base}?{urlencode({'data': data_path, 'question': question_id})}"


def _pid(value: Any) -> str:
    return str(value.get("pid", "")) if isinstance(value, Mapping) else str(value)


def record_of(episode: Episode, verdicts: Mapping[int, Verdict]) -> EpisodeRecord | None:
    """The stored episode as an EpisodeRecord (overrides applied to the verdicts), or None when its steps are not
    environment actions with signals (a pipeline method's trace)."""
    steps = []
    for s in episode.steps or ():
        arg = s.argument or ""
        try:
            action = parse_action({"action": s.action, "query": arg, "answer": arg})
        except EvoRagError:
            return None
        if not s.signals:
            return None
        steps.append(StepRecord(t=s.t, action=action, passages=tuple(_pid(p) for p in s.passages),
                                signals=dict(s.signals), weights=dict(s.weights), reward=float(s.reward),
                                verdict=verdicts.get(s.t)))
    if not steps:
        return None
    cfg = episode.config or {}
    return EpisodeRecord(
        episode_id=str(cfg.get("episode_key") or episode.id), question_id=episode.question_id,
        dataset=episode.dataset, question=episode.question, stage=episode.stage, schedule=episode.schedule,
        preset=str(cfg.get("preset") or "full"), t_max=int(cfg.get("t_max") or max(len(steps), 1)),
        top_k=int(cfg.get("top_k") or 0), steps=tuple(steps), gold_pids=tuple(cfg.get("gold_pids") or ()),
        truncated=episode.status == "truncated", meta={"policy": episode.policy, "adapter": episode.adapter},
    )


def effective_verdicts(episode: Episode, judgments: Sequence[Judgment]) -> dict[int, Verdict]:
    """Per step: the latest human override, else the latest judge verdict, else the step's own judge verdict."""
    out: dict[int, Verdict] = {}
    for s in episode.steps or ():
        if s.judge_verdict:
            out[s.t] = Verdict(s.judge_verdict == "answerable", "gold")
    for j in sorted(judgments, key=lambda j: (j.is_override, j.id)):
        out[j.t] = Verdict(j.verdict == "answerable", j.judge, who=j.who)
    return out


def _outcome_html(episode: Episode) -> str:
    if episode.status == "running":
        return '<span class="badge running">running</span>'
    if episode.answer is not None:
        outcome = f'answered <b id="evo-trace-answer">{views.esc(episode.answer)}</b>'
    elif episode.refused:
        outcome = "refused"
    else:
        outcome = "no answer" if episode.em is not None else "ended"
    if episode.em is not None:
        verdict = grade_verdict(episode.em, episode.f1 or 0)
        outcome += (f' <span class="badge grade {verdict}" id="evo-trace-grade">{GRADE_LABELS[verdict]}'
                    f" · EM {episode.em:.0f} · F1 {episode.f1 or 0:.2f}</span>")
    return f'<span class="badge done">{views.esc(episode.status)}</span> {outcome}'


def _head(episode: Episode, gold: Sequence[str], link: str, episode_link: str) -> str:
    ret = "–" if episode.total_return is None else f"{episode.total_return:+.3f}"
    src = views.esc(episode.source or "unknown")
    run = f" · run <b>{views.esc(episode.run)}</b>" if episode.run else ""
    data = views.esc(episode.data_path or episode.dataset)
    gold_txt = ", ".join(gold) if gold else "unknown"
    open_q = (f' · <a id="evo-trace-question-link" href="{views.esc(episode_link)}" target="_blank">open this question '
              "in the Episode tab</a>") if episode_link else ""
    return (
        f'<div class="evo-status" id="evo-trace-head" data-episode="{episode.id}">'
        f'<div class="evo-q">{views.esc(episode.question)}</div>'
        f'<div class="evo-meta">trace <b>#{episode.id}</b> · <span class="badge source-{src}">{src}</span>{run} · '
        f"{views.esc(episode.created_at.strftime('%Y-%m-%d %H:%M:%S'))} UTC</div>"
        f'<div class="evo-meta">question <code>{views.esc(episode.question_id)}</code> of {views.esc(episode.dataset)}'
        f' (<span class="evo-path">{data}</span>) · gold answer: {views.esc(gold_txt)}</div>'
        f'<div class="evo-meta">policy: <b>{views.esc(episode.policy)}</b> · adapter: '
        f'{views.esc(episode.adapter or "none")} · {views.esc(episode.stage)} / {views.esc(episode.schedule)} · '
        f"{episode.n_steps if episode.n_steps is not None else len(episode.steps or ())} steps</div>"
        f'<div class="evo-meta">{_outcome_html(episode)} · return <b id="evo-trace-return">{ret}</b></div>'
        f'<div class="evo-meta evo-trace-links">link to this trace: <a id="evo-trace-link" href="{views.esc(link)}">'
        f"{views.esc(link)}</a>{open_q}</div></div>"
    )


def _passages_html(record: EpisodeRecord | None, episode: Episode, by_pid: Mapping[str, Passage] | None,
                   gold_known: bool) -> str:
    """Each step's passages under a heading naming the step; the final answer's source passage marked."""
    blocks = []
    for s in episode.steps or ():
        pids = [_pid(p) for p in s.passages]
        if not pids:
            continue
        found = [by_pid.get(pid) if by_pid else None for pid in pids]
        passages = [p or Passage(pid, "(text not available: the data file is not readable here)", "")
                    for p, pid in zip(found, pids)]
        arg = f" “{s.argument}”" if s.argument else ""
        source = None
        if record is not None and record.answer is not None:
            source = grading_view.source_index(record.answer, passages)
        gold = record.gold_pids if record is not None else ()
        blocks.append(views.passages_html(passages, gold, gold_known and bool(gold), f"t = {s.t}: {s.action}{arg}",
                                          source, record.answer if record is not None else None))
    return "".join(blocks) or '<div class="evo-empty">No passages were retrieved in this trace.</div>'


def method_trace_html(trace: Sequence[Mapping[str, Any]], extras: Mapping[str, Any], gold: Sequence[str],
                      by_pid: Mapping[str, Passage] | None, anchor: str) -> str:
    """The trace of a non-environment method: DynaKrag's controller trace, ARENA's cited answer, else one row per
    trace entry."""
    if extras.get("arena"):
        from app.common.arena_view import render_arena_answer

        arena = extras["arena"]
        refs = [by_pid[pid] for pid in arena.get("references", []) if by_pid and pid in by_pid]
        return render_arena_answer(refs, arena.get("text", ""), gold_ids=arena.get("gold_ids", ()),
                                   gold_answers=tuple(gold), anchor=anchor)
    if trace and all(isinstance(t, Mapping) and "valid" in t for t in trace):
        from app.common.dynakrag_view import trace_html

        return trace_html(trace)
    rows = [[t.get("t", i + 1) if isinstance(t, Mapping) else i + 1, json.dumps(t, ensure_ascii=False, default=str)]
            for i, t in enumerate(trace)]
    return views.table_html(["step", "trace"], rows, table_id="evo-trace-steps", empty="This method records no trace.")


def render_trace(episode: Episode, judgments: Sequence[Judgment], *, by_pid: Mapping[str, Passage] | None,
                 gold: Sequence[str], base: str = "", weights: WeightsConfig = WeightsConfig()) -> TraceView:
    """The read-only view of a stored episode (loaded with its steps) and its judgments; the schedule chart's lines
    follow `weights` (the studio's [weights]), its markers the weights each step was scored with."""
    record = record_of(episode, effective_verdicts(episode, judgments))
    link = trace_link(episode.id, base)
    qlink = question_link(episode.data_path, episode.question_id, base) if episode.data_path else ""
    head = _head(episode, gold, link, qlink)
    passages = _passages_html(record, episode, by_pid, bool(gold) or bool(record and record.gold_pids))
    if record is not None:
        current = min(len(record.steps), record.t_max)
        return TraceView(episode.id, head, views.steps_table(record).replace('id="evo-steps"', 'id="evo-trace-steps"'),
                         _weights_figure(record.stage, record.schedule, record.preset, record.t_max, current,
                                         weights, views.recorded_weights(record)),
                         views.contributions_figure(record), passages, views.verdicts_html(record), link)
    cfg = episode.config or {}
    trace = cfg.get("trace")
    if trace is None:  # stored steps without signals: show them as the trace
        trace = [{"t": s.t, "action": s.action, "argument": s.argument} for s in episode.steps or ()]
    body = method_trace_html(trace, cfg.get("extras") or {}, gold, by_pid, f"trace-{episode.id}")
    note = views.empty_figure("Signal contributions w·r per step", "this method's steps carry no reward signals")
    return TraceView(episode.id, head, body, views.empty_figure("Weight schedule", "no schedule: not an environment "
                     "episode"), note, passages, views.verdicts_html(None), link)
