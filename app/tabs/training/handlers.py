"""Training handlers: queue a round for the worker (checked against the pairs or episodes there are), follow its
progress and history, cancel it, list and activate adapters, and the page header's live status."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import plotly.graph_objects as go

from evorag_core.adapters.role import POLICY
from evorag_core.errors import EvoRagError
from evorag_core.objectives import EVALUATE_JOB, OBJECTIVES as OBJECTIVES_ALL
from evorag_core.store.records import ROUND_KL_KEYS

from app.common import round_progress, views, training_fields as tf
from app.common.handlers import none_if_all, short
from app.common.services import Services
from app.tabs.training import promotion as promotion
from app.common.rounds import (OBJECTIVES, Launch, available, cancel_round,
                                launch_job)

if TYPE_CHECKING:
    from evorag_core.store import Round

__all__ = [
    "OBJECTIVES",
    "KL_ESTIMATORS",
    "KEY_METRICS",
    "MAX_CHARTS",
    "ChartHistory",
    "MAX_CHART_POINTS",
    "TrainingView",
    "Launch",
    "launch",
    "launch_job",
    "launch_round",
    "available",
    "availability_text",
    "cancel_round",
    "training_view",
    "LOG_NEWEST",
    "LOG_LINES_SHOWN",
    "log_round_id",
    "round_log",
    "activate_adapter",
    "use_base_model",
    "round_ended",
    "rounds_active",
    "header_status",
]

MAX_CHARTS = max(len(o.charts) for o in OBJECTIVES_ALL.values())  # the tab's metric chart slots
KL_ESTIMATORS = tf.KL_ESTIMATORS
LOG_NEWEST = "newest"  # the log panel's default pick: follow the newest round
LOG_LINES_SHOWN = 500  # the log panel shows a round's newest lines; `evorag rounds log ID` prints them all


MAX_CHART_POINTS = 600  # points a page keeps per chart; past it every second point is dropped (the curve's shape stays)


@dataclass
class ChartHistory:
    """What one page has seen of its newest round's progress: a running round reports only its latest step, so the
    page keeps the earlier ones for its loss, KL and metric charts (until the round records its own history). One
    per browser page (the Training tab's gr.State), never shared between pages; only the newest round's points are
    kept, at most MAX_CHART_POINTS per chart."""

    round_id: int | None = None
    losses: list[tuple[float, float]] = field(default_factory=list)  # (step, loss)
    kl: list[dict[str, float]] = field(default_factory=list)  # {step, kl, kl_k2, kl_k3}
    steps: list[dict[str, float]] = field(default_factory=list)  # {step, metric...}

    def follow(self, round_id: int) -> ChartHistory:
        """Start over when the newest round is another one; returns self."""
        if round_id != self.round_id:
            self.round_id, self.losses, self.kl, self.steps = round_id, [], [], []
        return self

    def bound(self) -> None:
        for points in (self.losses, self.kl, self.steps):
            while len(points) > MAX_CHART_POINTS:
                points[:] = points[:-1:2] + points[-1:]  # every second point, and the newest


@dataclass(frozen=True)
class TrainingView:
    progress: str  # HTML progress bar of the newest round
    loss: go.Figure
    rounds: str  # HTML history table
    adapters: str  # HTML table with metrics
    adapter_names: list[str]
    live: str  # active adapter name or "base model"
    loss_key: tuple = ()  # (round id, loss points): equal keys mean an identical loss figure
    kl: go.Figure | None = None  # per-step KL of the newest round (k2 and k3 where it logs both)
    kl_key: tuple = ()  # (round id, KL rows): equal keys mean an identical KL figure
    kl_visible: bool = False  # the KL panel is shown only for objectives that log a per-step KL (not DPO)
    cancellable: list[tuple[str, int]] = field(default_factory=list)  # (label, id) of queued and running rounds
    newest_id: int | None = None  # the newest round (the log panel follows it unless one is picked)
    log_choices: list[tuple[str, str]] = field(default_factory=list)  # the log panel's round picker
    loss_visible: bool = True  # hidden for objectives that log no loss (DynaKrag) unless one was reported
    charts: tuple[tuple[go.Figure, bool], ...] = ()  # MAX_CHARTS (figure, shown): the newest round's own metrics
    charts_key: tuple = ()  # equal keys mean identical charts
    live_why: str = ""  # why the live model is live (promoted / forced with its reason / activated ...)
    curve: go.Figure | None = None  # held-out learning curve over the promotion reports
    curve_key: tuple = ()  # the reports drawn: equal keys mean an identical curve



def availability_text(svc: Services, objective: str, source: str | None = None, stage: str | None = None,
                      data: str | None = None) -> str:
    """The line shown beside the fields, e.g. "6 queued pairs available for DPO", "52 questions with gold passages
    in demo.jsonl available for DYNAKRAG"."""
    try:
        what, n = available(svc, objective, source, stage, data)
    except (EvoRagError, OSError) as exc:  # an unreadable or refused data file: said here, not as a toast per tick
        return f'<span id="evo-available" data-n="0" data-kind="error">{views.esc(str(exc))}</span>'
    if what == "questions":
        from training.launch import needs_text

        name = Path(str(data)).name if data else svc.default_data.name
        kind, where = needs_text(objective), f" in {name}"
    else:
        kind = "queued pairs" if what == "pairs" else "stored episodes"
        filters = [f"{name} {value}" for name, value in (("source", none_if_all(source)), ("stage", none_if_all(stage)))
                   if value and (what == "pairs" or name == "stage")]
        where = f" ({', '.join(filters)})" if filters else ""
    return (f'<span id="evo-available" data-n="{n}" data-kind="{what}">{n} {kind}{views.esc(where)} available for '
            f'{views.esc(objective.upper())}</span>')


def launch(svc: Services, objective: str, pairs: int, epochs: int, lr: float, kl: str,
           source: str | None = None, stage: str | None = None, episodes: int | None = None,
           max_steps: int | None = None) -> Launch:
    """`launch_job` with the fields of DPO, GRPO and PPO as arguments (each objective takes the ones it reads)."""
    values = {"pairs": pairs, "epochs": epochs, "lr": lr, "kl": kl, "source": source, "stage": stage,
              "episodes": episodes if episodes is not None else 32, "max_steps": max_steps or 0}
    return launch_job(svc, objective, values)



def launch_round(svc: Services, objective: str, pairs: int, epochs: int, lr: float, kl: str,
                 source: str | None = None, stage: str | None = None, episodes: int | None = None,
                 max_steps: int | None = None) -> tuple[str, int]:
    """`launch` as (message, round id)."""
    done = launch(svc, objective, pairs, epochs, lr, kl, source, stage, episodes, max_steps)
    return done.message, done.round_id



def training_view(svc: Services, now: datetime | None = None, history: ChartHistory | None = None) -> TrainingView:
    """The tab's content. `history`: what this page has seen of the newest round's progress (updated in place; a new
    one when None, then a running round's charts show its latest reported step)."""
    store = svc.store()
    now = now or datetime.now(timezone.utc)
    rounds = store.list_rounds(limit=50)
    newest = rounds[0] if rounds else None
    loss_key: tuple = ()
    kl_key: tuple = ()
    kl_visible, loss_visible = False, True
    charts: tuple[tuple[go.Figure, bool], ...] = ()
    charts_key: tuple = ()
    if newest is None:
        progress = '<div class="evo-empty">No training round yet.</div>'
        loss = _figure(("loss",), lambda: views.loss_figure([]))
        kl = _figure(("kl",), lambda: views.kl_figure([]))
    else:
        seen = (history if history is not None else ChartHistory()).follow(newest.id)
        points, kl_rows, step_rows = seen.losses, seen.kl, seen.steps
        _merge_losses(points, newest)
        _merge_kl(kl_rows, newest)
        _merge_steps(step_rows, newest)
        seen.bound()
        progress = round_progress.progress_html(newest, now)
        if newest.error:
            progress += views.message_html(newest.error, "error")
        loss_key = (newest.id, tuple(points))
        loss = _figure(("loss", loss_key), lambda: round_progress.integer_steps(
            views.loss_figure(points, f"Round #{newest.id} loss"), points[-1][0] if points else None))
        kl_key = (newest.id, tuple(tuple(sorted(r.items())) for r in kl_rows))
        kl = _figure(("kl", newest.objective, kl_key), lambda: round_progress.integer_steps(
            views.kl_figure(kl_rows, f"Round #{newest.id} ({newest.objective}) KL to the reference"),
            kl_rows[-1]["step"] if kl_rows else None))
        loss_visible, kl_visible = _panels(newest.objective, bool(points), bool(kl_rows))
        charts, charts_key = _charts(newest, step_rows)
    charts = charts + tuple((_figure(("slot",), lambda: views.empty_figure("")), False)
                            for _ in range(MAX_CHARTS - len(charts)))
    round_rows = []
    for r in rounds:
        m = r.metrics or {}
        summary = ", ".join(f"{k}={m[k]:.4g}" if isinstance(m[k], float) else f"{k}={m[k]}" for k in _key_metrics([m]))
        if r.objective == EVALUATE_JOB:  # gated promotion's job: what it evaluated, and the verdict
            target = r.config.get("adapter", "?")
            summary = (f"{m['evaluated']}: {m['verdict']}" + (" → live" if m.get("activated") else "")
                       if m.get("verdict") else f"evaluate {target} vs {r.config.get('against', 'live')}")
        elif m.get("adapter"):
            summary = f"adapter {m['adapter']}" + (f", {summary}" if summary else "")
        elif m.get("controller"):
            summary = f"controller {Path(m['controller']).name}/" + (f", {summary}" if summary else "")
        took = (r.finished_at - r.started_at).total_seconds() if r.finished_at and r.started_at else None
        round_rows.append([r.id, r.objective, r.status_label, _data_used(r), r.config.get("epochs", ""),
                           r.config.get("lr", ""), r.config.get("kl", ""), took if took is not None else "",
                           short(summary, 120) if summary else (r.error or "")[:120]])
    rounds_html = views.table_html(["round", "objective", "status", "data used", "epochs", "lr", "KL", "seconds",
                                    "metrics"],
                                   round_rows, table_id="evo-rounds", empty="No rounds yet.")
    adapters = store.list_adapters()
    keys = _key_metrics([a.metrics for a in adapters])
    reports, pending = store.latest_promotions(), promotion.evaluating(store)
    adapter_rows = [[("● " if a.active else "") + a.name, a.objective or "", a.role, a.round_id or "",
                     *promotion.heldout_cells(a, reports.get(a.name), pending),
                     *[(a.metrics or {}).get(k, "") for k in keys], a.created_at.strftime("%Y-%m-%d %H:%M")]
                    for a in adapters]
    adapters_html = views.table_html(["adapter", "objective", "role", "round", *promotion.HELDOUT_HEADERS, *keys,
                                      "created"],
                                     adapter_rows, table_id="evo-adapters",
                                     empty="No adapters yet: a finished round registers one.")
    live = next((a.name for a in adapters if a.active), "base model")
    why = store.last_activation()
    live_why = promotion.live_reason(why, store.get_promotion(why.promotion_id) if why and why.promotion_id else None)
    all_reports = store.list_promotions()
    curve_key = tuple(r.id for r in all_reports)
    curve = _figure(("curve", curve_key), lambda: promotion.learning_curve(all_reports))
    cancellable = [(f"#{r.id} {r.objective} · {r.status_label}", r.id) for r in rounds
                   if r.status in ("queued", "running")]
    log_choices = [("newest round", LOG_NEWEST), *[(f"#{r.id} {r.objective}", str(r.id)) for r in rounds]]
    return TrainingView(progress, loss, rounds_html, adapters_html, [a.name for a in adapters], live, loss_key, kl,
                        kl_key, kl_visible, cancellable, newest.id if newest is not None else None, log_choices,
                        loss_visible, charts, charts_key, live_why, curve, curve_key)


def log_round_id(picked: Any, newest_id: int | None) -> int | None:
    """The round whose log the panel shows: the one picked, else ("newest round") the newest."""
    if picked in (None, "", LOG_NEWEST):
        return newest_id
    return int(picked)


def round_log(svc: Services, round_id: int | None, shown: Any = None) -> tuple[tuple, str | None]:
    """(key, HTML) of round `round_id`'s log panel: its newest LOG_LINES_SHOWN stored lines. The key is what the panel
    depends on (round, its newest line, its status); when it equals `shown` (what the page shows) the HTML is None and
    no line is read, so a timer tick without new lines costs one small query and re-renders nothing."""
    if round_id is None:
        key: tuple = (None,)
        return key, (None if shown == key else '<div class="evo-log-empty">No training round yet.</div>')
    store = svc.store()
    try:
        r = store.get_round(round_id)
    except KeyError:
        key = (round_id, "gone")
        return key, (None if shown == key else f'<div class="evo-log-empty">No round {int(round_id)}.</div>')
    last_seq = store.round_log_last_seq(round_id)
    key = (round_id, last_seq, r.status_label)
    if shown == key:
        return key, None
    return key, round_progress.log_html(r, store.round_log(round_id, last=LOG_LINES_SHOWN), last_seq)


def _data_used(r: Round) -> str | int:
    """What the round was asked to train on: pairs (DPO), episodes (GRPO/PPO), questions of a file (the others)."""
    known = OBJECTIVES_ALL.get(r.objective)
    kind = known.data if known is not None else "episodes"
    if kind != "questions":
        return r.config.get(kind, "")
    settings = r.config.get(tf.section_of(r.objective) or "") or {}
    name = Path(str(r.config["data"])).name if r.config.get("data") else ""
    n = settings.get("questions")
    return f"{n} q · {name}" if n else (f"all · {name}" if name else "")


def _charts(r: Round, rows: list[dict[str, float]]) -> tuple[tuple[tuple[go.Figure, bool], ...], tuple]:
    """The round's objective's metric charts (registry `charts`) over its step rows: each shown once some row
    carries one of its keys; and a key that changes when a chart would."""
    known = OBJECTIVES_ALL.get(r.objective)
    charts = known.charts if known is not None else ()
    out, key = [], []
    for chart in charts:
        present = [k for k in chart.keys if any(k in row for row in rows)]
        drawn = tuple((row["step"], *(row.get(k) for k in chart.keys)) for row in rows)

        def build(chart=chart, present=present):
            fig = views.metric_figure(rows, chart.keys, f"Round #{r.id} {chart.title}", chart.y)
            return round_progress.integer_steps(fig, rows[-1]["step"]) if present else fig

        out.append((_figure(("chart", r.id, r.objective, chart.title, drawn), build), bool(present)))
        key.append(drawn)
    return tuple(out), (r.id, tuple(key))


_FIGURES: OrderedDict[tuple, go.Figure] = OrderedDict()  # figures by what they draw, newest last
_FIGURES_LOCK = threading.Lock()
_FIGURES_KEPT = 32


def _figure(key: tuple, build: Callable[[], go.Figure]) -> go.Figure:
    """The figure that draws `key` (a pure function of it), built once: a timer tick while nothing changed builds no
    plotly figure (each took ~10-50 ms of the server's CPU). A memo of values, not page state; figures are only read
    once built (the page is sent one only when its key changed)."""
    with _FIGURES_LOCK:
        if key in _FIGURES:
            _FIGURES.move_to_end(key)
            return _FIGURES[key]
    fig = build()
    with _FIGURES_LOCK:
        _FIGURES[key] = fig
        while len(_FIGURES) > _FIGURES_KEPT:
            _FIGURES.popitem(last=False)
    return fig


def _merge_steps(rows: list[dict[str, float]], r: Round) -> None:
    """Step rows ({step, metric: value}): the round's recorded `step_history` once it has one, else each progress
    report the UI has seen (a running round's heartbeat carries its latest step's values)."""
    history = (r.metrics or {}).get("step_history")
    if isinstance(history, list) and history and all(isinstance(h, dict) for h in history):
        rows[:] = [{k: float(v) for k, v in h.items() if _number(v)} for h in history if _number(h.get("step"))]
        return
    prog = r.progress or {}
    if _number(prog.get("step")) and prog["step"] > 0:
        row = {k: float(v) for k, v in prog.items() if _number(v) and k not in ("total", "eta", "elapsed_s")}
        if not rows or rows[-1]["step"] != row["step"]:
            rows.append(row)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Metrics shown first when rounds and adapters are compared (whichever of them a round reported).
KEY_METRICS = ("eval_em", "eval_f1", "em", "f1", "heldout_accuracy", "final_rewards_accuracies",
               "final_rewards_margins", "final_loss", "first_loss", "final_kl", "final_reward", "holdout_r2",
               "best_action_rate", "transitions", "steps", "pairs", "episodes", "questions", "wall_s")


def _key_metrics(metrics_list: list[dict[str, Any]], limit: int = 8) -> list[str]:
    numeric = [{k for k, v in (m or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
               for m in metrics_list]
    present = set().union(*numeric) if numeric else set()
    keys = [k for k in KEY_METRICS if k in present]
    return keys if keys else sorted(present)[:limit]


def _merge_losses(points: list[tuple[float, float]], r: Round) -> None:
    """Loss points: the round's reported history when it has one, else each progress report the UI has seen."""
    history = (r.metrics or {}).get("loss_history") or (r.progress or {}).get("loss_history")
    if isinstance(history, list) and history:
        points[:] = [(float(i + 1), float(v)) if not isinstance(v, (list, tuple)) else (float(v[0]), float(v[1]))
                     for i, v in enumerate(history)]
        return
    prog = r.progress or {}
    if prog.get("loss") is not None and prog.get("step") is not None:
        point = (float(prog["step"]), float(prog["loss"]))
        if not points or points[-1][0] != point[0]:
            points.append(point)


def _merge_kl(rows: list[dict[str, float]], r: Round) -> None:
    """KL rows: the round's recorded `kl_history` once it has one, else each progress report the UI has seen
    (a running round's heartbeat carries the latest step's kl / kl_k2 / kl_k3)."""
    history = (r.metrics or {}).get("kl_history")
    if isinstance(history, list) and history and all(isinstance(h, dict) for h in history):
        rows[:] = [{k: float(v) for k, v in h.items() if isinstance(v, (int, float))} for h in history]
        return
    prog = r.progress or {}
    found = {k: float(prog[k]) for k in ROUND_KL_KEYS if isinstance(prog.get(k), (int, float))}
    if found and prog.get("step") is not None:
        row = {"step": float(prog["step"]), **found}
        if not rows or rows[-1]["step"] != row["step"]:
            rows.append(row)


activate_adapter = promotion.activate_adapter  # the Adapters panel's Activate (with a reason when the gate said no)


def use_base_model(svc: Services, who: str | None = None) -> str:
    svc.store().deactivate_adapters(who=who)
    return "No adapter is active: new LM episodes use the base model."


def round_ended(svc: Services, round_id: int) -> bool:
    """True once round `round_id` has succeeded, failed or been cancelled (or is gone)."""
    try:
        return svc.store().get_round(int(round_id)).status in ("succeeded", "failed", "cancelled")
    except KeyError:
        return True


def rounds_active(svc: Services) -> bool:
    """Whether a round (training or a promotion's evaluation) is queued or running: the page's timers then tick
    fast (app/common/page_timers.py)."""
    store = svc.store_or_none()
    return store is not None and any(store.list_rounds(status=s, limit=1) for s in ("running", "queued"))


def header_status(svc: Services) -> str:
    """Live adapter, pairs queued / claimed / consumed, rounds running / queued, worker and store state, for the
    page header."""
    parts = []
    store = svc.store_or_none()
    if store is None:
        parts.append('<span class="chip warn">store unavailable</span>')
    else:
        active = store.active_adapter()
        name = active.name if active is not None else "base model"
        if active is not None and active.role != POLICY:
            name += f" ({active.role} only)"  # adapters/role.py: the decisions run on the base model
        why = store.last_activation()
        reason = promotion.live_reason(why, store.get_promotion(why.promotion_id) if why and why.promotion_id else None)
        parts.append(f'live adapter: <b title="{views.esc(reason)}" id="evo-live-adapter">{views.esc(name)}</b>'
                     + (f' <span class="evo-live-why" id="evo-live-why">({views.esc(short(reason, 90))})</span>'
                        if why is not None else ""))
        pairs = store.count_pairs("status")
        parts.append('pairs: <span id="evo-header-pairs">' + ", ".join(
            f'<b data-status="{s}">{pairs.get(s, 0)}</b> {s}' for s in ("queued", "claimed", "consumed")) + "</span>")
        running = store.list_rounds(status="running", limit=50)
        queued = store.list_rounds(status="queued", limit=50)
        parts.append(f'rounds: <span id="evo-header-rounds">{len(running)} running, {len(queued)} queued</span>')
    parts.append(views.esc(svc.worker.describe() if svc.worker is not None else "worker: not started"))
    if svc.warm_status:
        parts.append(f'<span class="chip warn" id="evo-warming">{views.esc(svc.warm_status)}…</span>')
    return '<div class="evo-header-status">' + " · ".join(parts) + "</div>"




def _panels(objective: str, has_loss: bool, has_kl: bool) -> tuple[bool, bool]:
    """Whether the newest round's (loss, KL) panels show: the loss unless its objective logs none (DynaKrag) and none
    came; the KL for objectives that log one (not DPO: its reference term is inside its loss) or when one came; neither
    for an evaluation, which trains nothing."""
    if objective == EVALUATE_JOB:
        return False, False
    known = OBJECTIVES_ALL.get(objective)
    return has_loss or known is None or known.logs_loss, _logs_kl(objective) or has_kl


def _logs_kl(objective: str) -> bool:
    """Whether rounds of `objective` log a per-step KL to their reference (an unknown, older name: assume they do)."""
    known = OBJECTIVES_ALL.get(objective)
    return known.logs_kl if known is not None else True
