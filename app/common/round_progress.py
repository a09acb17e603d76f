"""How a training round's progress reads in the studio: its phase among load -> prepare -> train -> save -> register,
step i/N, the time since it started and an ETA from the measured step times; plus whole-step axes for its charts.

Pure functions of a `Round` row (as the worker's heartbeat last wrote it) and the current time:

    phase_of(round)               -> "queued" | "setup" | "load" | ... | "register" | the final status
    eta_seconds(progress, ...)    -> seconds left: mean measured step time x steps left, minus the time since the
                                     step was reported (so it counts down until the next step), or None
    progress_html(round, now)     -> the progress box (escaped; no text from the round is trusted)
    integer_steps(fig, last_step) -> the figure with x ticks on whole steps only
    log_html(round, lines, last)  -> the round's log panel: its newest stored lines, oldest first (escaped)
"""
from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import plotly.graph_objects as go

from evorag_core.objectives import EVALUATE_JOB, OBJECTIVES

from app.common.views import esc

if TYPE_CHECKING:
    from evorag_core.store import Round

__all__ = ["PHASES", "EVALUATE_PHASES", "phases_of", "phase_labels", "phase_of", "seconds_per_step", "eta_seconds", "elapsed_seconds", "duration",
           "progress_html", "integer_steps", "log_html"]

# The worker's phase names (training/job.py `phase`, "train" from the step reports) and how people read them.
PHASES: tuple[tuple[str, str], ...] = (
    ("load", "loading model"), ("prepare", "preparing data"), ("train", "training"), ("save", "saving adapter"),
    ("register", "registering"),
)
# Gated promotion's evaluation job (objective "evaluate") reports "evaluate <side>" after each question
EVALUATE_PHASES: tuple[tuple[str, str], ...] = (("load", "loading"), ("evaluate", "evaluating"))
# How the last two phases read for an objective whose product is not an adapter (registry `artifact`).
_ARTIFACT_LABELS = {"controller": {"save": "saving controller", "register": "installing controller"}}
_FINAL = ("succeeded", "failed", "cancelled")

STYLE = (
    "<style>.evo-phases{display:flex;gap:6px;margin:6px 0;flex-wrap:wrap;font-size:.85rem}"
    ".evo-phase{padding:2px 10px;border-radius:10px;background:#eceff1;color:#607d8b}"
    ".evo-phase.done{background:#e8f5e9;color:#2e7d32}.evo-phase.done::before{content:'✓ '}"
    ".evo-phase.current{background:#1976d2;color:#fff;font-weight:600}"
    ".evo-phase.stopped{background:#ffebee;color:#c62828;font-weight:600}.evo-phase.stopped::before{content:'■ '}"
    ".evo-progress-times{font-size:.85rem;color:#546e7a;margin-top:4px}</style>"
)


def phase_of(r: Round) -> str:
    """The round's phase: its final status once finished, "queued" before a worker claims it, else the phase its
    worker last reported ("setup" before the first one)."""
    if r.status in _FINAL or r.status == "queued":
        return r.status
    return str((r.progress or {}).get("phase") or "setup")


def seconds_per_step(progress: Mapping[str, Any]) -> float | None:
    """Mean measured seconds per optimiser step so far (training time / steps), or None before the first step."""
    step, elapsed = progress.get("step"), progress.get("elapsed_s")
    if not step or elapsed is None:
        return None
    return float(elapsed) / float(step)


def eta_seconds(progress: Mapping[str, Any], heartbeat_at: datetime | None, now: datetime) -> float | None:
    """Seconds left in training: seconds/step x steps left as of the last step report, less the time since that
    report (`progress["at"]`, epoch seconds, written by the worker with each step; else the heartbeat's time). The
    heartbeat is rewritten every few seconds without a new step, so counting from it froze the ETA on slow steps."""
    per_step, total, step = seconds_per_step(progress), progress.get("total"), progress.get("step")
    if per_step is None or not total:
        return None
    left = per_step * max(float(total) - float(step), 0.0)
    at = progress.get("at")
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        left -= max(now.timestamp() - float(at), 0.0)
    elif heartbeat_at is not None:
        left -= max((now - heartbeat_at).total_seconds(), 0.0)
    return max(left, 0.0)


def elapsed_seconds(r: Round, now: datetime) -> float | None:
    """Seconds since the round started (until it finished, for a finished round); None if it never started."""
    if r.started_at is None:
        return None
    end = r.finished_at if r.finished_at is not None and r.status in _FINAL else now
    return max((end - r.started_at).total_seconds(), 0.0)


def duration(seconds: float) -> str:
    """42 s, 3 min 05 s, 1 h 02 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def phases_of(objective: str) -> tuple[tuple[str, str], ...]:
    """The phases a job of `objective` goes through: a training round's five, or an evaluation job's two."""
    return EVALUATE_PHASES if objective == EVALUATE_JOB else PHASES


def phase_labels(objective: str) -> dict[str, str]:
    """Phase name -> how it reads for a round of `objective` (DynaKrag saves and installs a controller)."""
    known = OBJECTIVES.get(objective)
    return {**dict(phases_of(objective)),
            **_ARTIFACT_LABELS.get(known.artifact if known is not None else "adapter", {})}


def _phase_strip(phase: str, stopped_at: str | None, labels: dict[str, str],
                 phases: tuple[tuple[str, str], ...] = PHASES) -> str:
    """The phases as chips: done, current (or where a failed/cancelled round stopped), to come. A phase may carry
    a detail after a space ("evaluate r3-dpo"): its first word places it."""
    order = {name: i for i, (name, _) in enumerate(phases)}
    at = order.get((stopped_at or phase).split(" ", 1)[0])
    items = []
    for i, (name, _) in enumerate(phases):
        label = labels[name]
        if phase == "succeeded" or (at is not None and i < at):
            cls = "done"
        elif at is not None and i == at:
            cls = "stopped" if stopped_at else "current"
        else:
            cls = "todo"
        items.append(f'<span class="evo-phase {cls}" data-phase="{name}">{esc(label)}</span>')
    return f'<div class="evo-phases">{"".join(items)}</div>'


def progress_html(r: Round, now: datetime) -> str:
    """The progress box of round `r`: title and status, the phase chips, a bar of the training steps, and the
    elapsed time and ETA (see the module docstring)."""
    prog = dict(r.progress or {})
    phase = phase_of(r)
    labels = phase_labels(r.objective)
    step, total = prog.get("step"), prog.get("total")
    unit = "question" if r.objective == EVALUATE_JOB else "step"  # an evaluation job counts questions (both sides)
    count = f" · {unit} {int(step or 0)}/{int(total)}" if total else ""
    if phase == "queued":
        status = "waiting for a worker" if r.status_label == "queued" else r.status_label
    elif r.status == "running":
        key, _, detail = phase.partition(" ")
        label = labels.get(key, "starting") + (f" {detail}" if detail else "")
        status = f"{r.status_label} · {label}"
        if r.status_label == "cancelling":
            status = f"cancelling · stops at the next step ({label})"
    else:
        status = r.status_label
    times = []
    elapsed = elapsed_seconds(r, now)
    if elapsed is not None:
        times.append(("took " if r.status in _FINAL else "elapsed ") + duration(elapsed))
    per_step = seconds_per_step(prog)
    if r.status == "running" and phase.split(" ", 1)[0] in ("train", "evaluate"):
        eta = eta_seconds(prog, r.heartbeat_at, now)
        times.append(f"ETA {duration(eta)} ({per_step:.2g} s/step)" if eta is not None and per_step is not None
                     else "ETA after the first step")
    elif per_step is not None:
        times.append(f"{per_step:.2g} s/step")
    stopped = prog.get("phase") if r.status in ("failed", "cancelled") else None  # where its worker stopped
    frac = 0.0 if not total else max(0.0, min(1.0, float(step or 0) / float(total)))
    if r.status == "succeeded":
        frac = 1.0
    return (
        f'{STYLE}<div class="evo-progress" data-status="{esc(r.status)}" data-phase="{esc(phase)}">'
        f'<div class="evo-progress-label">{esc(f"Round #{r.id} ({r.objective})")} — <b>{esc(status)}</b>'
        f'{esc(count)}</div>{_phase_strip(phase, stopped, labels, phases_of(r.objective))}'
        f'<div class="evo-bar"><div class="evo-fill {esc(r.status)}" style="width:{frac * 100:.1f}%"></div></div>'
        f'<div class="evo-progress-times">{esc(" · ".join(times))}</div></div>'
    )


def integer_steps(fig: go.Figure, last_step: float | None) -> go.Figure:
    """Ticks on whole steps only (1, 2, 3 ... or every k-th step for long rounds), never 1.2, 1.4."""
    last = max(float(last_step or 1), 1.0)
    fig.update_xaxes(tickmode="linear", tick0=0, dtick=max(1, math.ceil(last / 10)), tickformat="d")
    return fig


def log_html(r: Any, lines: Sequence[Any], last_seq: int) -> str:
    """The log panel of round `r`: `lines` (its newest stored lines, oldest first; `last_seq` the newest's number) as
    `time level message` rows; a gap in their numbers (lines the store left out of a long round) as one row saying
    how many, and a note where earlier lines are not shown. Times are UTC."""
    title = f"Round #{r.id} ({r.objective}) log"
    if not lines:
        empty = ("waiting for a worker to claim the round" if r.status == "queued"
                 else "no lines stored for this round")
        body = f'<div class="evo-log-empty">{esc(empty)}</div>'
        count = ""
    else:
        rows = []
        if lines[0].seq > 1:
            rows.append(f'<div class="evo-log-gap">… lines 1–{lines[0].seq - 1} not shown: '
                        f'<code>evorag rounds log {r.id}</code> prints them all (the store keeps the first and the '
                        f'newest lines of a long round) …</div>')
        previous = lines[0].seq - 1
        for line in lines:
            if line.seq > previous + 1:
                rows.append(f'<div class="evo-log-gap">… {line.seq - previous - 1} lines left out …</div>')
            previous = line.seq
            level = str(line.level)
            rows.append(
                f'<div class="evo-log-line {esc(level.lower())}" data-seq="{line.seq}">'
                f'<span class="evo-log-time" title="{esc(line.created_at.isoformat())}">'
                f'{esc(line.created_at.strftime("%H:%M:%S"))}</span>'
                f'<span class="evo-log-level">{esc(level)}</span><span class="evo-log-msg">{esc(line.message)}</span>'
                f'</div>')
        body = "".join(rows)
        count = f" · {last_seq} line{'s' if last_seq != 1 else ''}"
    return (f'<div class="evo-log" data-round="{r.id}" data-last-seq="{last_seq}">'
            f'<div class="evo-log-head">{esc(title)}{esc(count)} · <span class="evo-log-status">{esc(r.status_label)}'
            f'</span> · times in UTC</div><div class="evo-log-lines">{body}</div></div>')
