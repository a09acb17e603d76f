"""Training handlers: queue a round for the worker (checked against the pairs or episodes there are), follow its
progress and history, cancel it, list and activate adapters, and the page header's live status."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go

from evorag_core.objectives import OBJECTIVES as OBJECTIVES_ALL, STUDIO_OBJECTIVES
from evorag_core.store.records import ROUND_KL_KEYS

from app import round_progress, views
from app.services import Services
from app.handlers.common import none_if_all, short

if TYPE_CHECKING:
    from evorag_core.store import Round

__all__ = [
    "OBJECTIVES",
    "KL_ESTIMATORS",
    "KEY_METRICS",
    "TrainingView",
    "Launch",
    "launch",
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
    "header_status",
]

OBJECTIVES = STUDIO_OBJECTIVES  # the objectives this tab launches (evorag_core.objectives)
KL_ESTIMATORS = ("k3", "k2")
LOG_NEWEST = "newest"  # the log panel's default pick: follow the newest round
LOG_LINES_SHOWN = 500  # the log panel shows a round's newest lines; `evorag rounds log ID` prints them all


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


@dataclass(frozen=True)
class Launch:
    """What Launch did: the message to show, the round queued, and whether the request was capped."""

    message: str
    round_id: int
    capped: bool = False


def available(svc: Services, objective: str, source: str | None = None, stage: str | None = None) -> tuple[str, int]:
    """("pairs", queued pairs matching the filters) for DPO, ("episodes", finished stored episodes of the stage)
    for GRPO/PPO: what a round of `objective` could use now (queued rounds that have not started yet may take
    some of them first)."""
    store = svc.store()
    source, stage = none_if_all(source), none_if_all(stage)
    if objective == "dpo":
        return "pairs", sum(store.count_pairs("status", status="queued", source=source, stage=stage).values())
    return "episodes", store.count_finished_episodes(stage=stage)


def availability_text(svc: Services, objective: str, source: str | None = None, stage: str | None = None) -> str:
    """The line shown beside the pairs/episodes fields, e.g. "6 queued pairs available for DPO"."""
    what, n = available(svc, objective, source, stage)
    kind = "queued pairs" if what == "pairs" else "stored episodes"
    filters = [f"{name} {value}" for name, value in (("source", none_if_all(source)), ("stage", none_if_all(stage)))
               if value and (what == "pairs" or name == "stage")]
    where = f" ({', '.join(filters)})" if filters else ""
    return (f'<span id="evo-available" data-n="{n}" data-kind="{what}">{n} {kind}{views.esc(where)} available for '
            f'{views.esc(objective.upper())}</span>')


def launch(svc: Services, objective: str, pairs: int, epochs: int, lr: float, kl: str,
           source: str | None = None, stage: str | None = None, episodes: int | None = None,
           max_steps: int | None = None) -> Launch:
    """Queue a training round for the worker, checked against what exists: a request for more pairs (DPO) or
    episodes (GRPO/PPO) than are available is capped to what is available and says so; none available -> refused
    (ValueError) and nothing is queued.

    The round's job (stored as JSON, read by `evorag worker`): objective, pairs (DPO: queued pairs to claim),
    episodes (GRPO/PPO: newest stored episodes), epochs, lr, kl, source/stage filters, max_steps, base_model."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
    if kl not in KL_ESTIMATORS:
        raise ValueError(f"KL estimator must be one of {', '.join(KL_ESTIMATORS)}")
    pairs, epochs, lr = int(pairs or 0), int(epochs or 0), float(lr or 0.0)
    episodes, max_steps = int(episodes or 32), int(max_steps or 0)
    if pairs < 1 or epochs < 1 or episodes < 1 or not lr > 0 or max_steps < 0:
        raise ValueError("pairs, episodes and epochs must be at least 1, the learning rate positive, max steps >= 0")
    store = svc.store()
    what, n_available = available(svc, objective, source, stage)
    asked = pairs if what == "pairs" else episodes
    if n_available == 0:
        kind = "queued pairs match the source/stage filters" if what == "pairs" else "finished episodes are stored"
        how = ("queue pairs on the Episode tab or by `evorag rollout`" if what == "pairs"
               else "run episodes on the Episode tab or by `evorag rollout`")
        raise ValueError(f"Not launched: no {kind} for {objective.upper()}; {how} first.")
    capped = asked > n_available
    if capped:
        pairs, episodes = (n_available, episodes) if what == "pairs" else (pairs, n_available)
    config = {"objective": objective, "pairs": pairs, "episodes": episodes, "epochs": epochs, "lr": lr, "kl": kl,
              "source": none_if_all(source), "stage": none_if_all(stage), "max_steps": max_steps or None,
              "base_model": svc.cfg.policy.model}
    config = {k: v for k, v in config.items() if v is not None}
    round_id = store.enqueue_round(objective, config, max_attempts=svc.cfg.train.max_attempts)
    worker = svc.worker.describe() if svc.worker is not None else "no worker process started by this studio"
    note = (f"Capped: {asked} {what} asked, only {n_available} available, so the round uses {n_available}. "
            if capped else "")
    message = (f"{note}Round #{round_id} queued ({objective}, {epochs} epoch(s), lr {lr:g}, KL {kl}"
               f"{f', up to {pairs} pairs' if objective == 'dpo' else f', {episodes} episodes'}); {worker}.")
    return Launch(message, round_id, capped)


def launch_round(svc: Services, objective: str, pairs: int, epochs: int, lr: float, kl: str,
                 source: str | None = None, stage: str | None = None, episodes: int | None = None,
                 max_steps: int | None = None) -> tuple[str, int]:
    """`launch` as (message, round id)."""
    done = launch(svc, objective, pairs, epochs, lr, kl, source, stage, episodes, max_steps)
    return done.message, done.round_id


def cancel_round(svc: Services, round_id: int | None) -> str:
    """Cancel a queued round (it never starts) or ask the worker to stop a running one at its next step (its pairs
    go back to the queue, no adapter is registered)."""
    if round_id in (None, ""):
        raise ValueError("choose a queued or running round to cancel")
    r = svc.store().cancel_round(int(round_id))
    if r.status == "cancelled":
        return f"Round #{r.id} cancelled before it started."
    return f"Round #{r.id}: cancel requested; the worker stops it at its next training step and releases its pairs."


def training_view(svc: Services, now: datetime | None = None) -> TrainingView:
    store = svc.store()
    now = now or datetime.now(timezone.utc)
    rounds = store.list_rounds(limit=50)
    newest = rounds[0] if rounds else None
    loss_key: tuple = ()
    kl_key: tuple = ()
    kl_visible = False
    if newest is None:
        progress = '<div class="evo-empty">No training round yet.</div>'
        loss = views.loss_figure([])
        kl = views.kl_figure([])
    else:
        points = svc.loss_history.setdefault(newest.id, [])
        _merge_losses(points, newest)
        progress = round_progress.progress_html(newest, now)
        if newest.error:
            progress += views.message_html(newest.error, "error")
        loss = views.loss_figure(points, f"Round #{newest.id} loss")
        round_progress.integer_steps(loss, points[-1][0] if points else None)
        loss_key = (newest.id, tuple(points))
        kl_rows = svc.kl_history.setdefault(newest.id, [])
        _merge_kl(kl_rows, newest)
        kl = views.kl_figure(kl_rows, f"Round #{newest.id} ({newest.objective}) KL to the reference")
        round_progress.integer_steps(kl, kl_rows[-1]["step"] if kl_rows else None)
        kl_key = (newest.id, tuple(tuple(sorted(r.items())) for r in kl_rows))
        kl_visible = _logs_kl(newest.objective) or bool(kl_rows)  # DPO's reference term is inside its loss
    round_rows = []
    for r in rounds:
        m = r.metrics or {}
        summary = ", ".join(f"{k}={m[k]:.4g}" if isinstance(m[k], float) else f"{k}={m[k]}" for k in _key_metrics([m]))
        if m.get("adapter"):
            summary = f"adapter {m['adapter']}" + (f", {summary}" if summary else "")
        took = (r.finished_at - r.started_at).total_seconds() if r.finished_at and r.started_at else None
        data_used = r.config.get("pairs", "") if r.objective == "dpo" else r.config.get("episodes", "")
        round_rows.append([r.id, r.objective, r.status_label, data_used, r.config.get("epochs", ""),
                           r.config.get("lr", ""), r.config.get("kl", ""), took if took is not None else "",
                           short(summary, 120) if summary else (r.error or "")[:120]])
    rounds_html = views.table_html(["round", "objective", "status", "pairs / episodes", "epochs", "lr", "KL", "seconds",
                                    "metrics"],
                                   round_rows, table_id="evo-rounds", empty="No rounds yet.")
    adapters = store.list_adapters()
    keys = _key_metrics([a.metrics for a in adapters])
    adapter_rows = [[("● " if a.active else "") + a.name, a.objective or "", a.round_id or "",
                     *[(a.metrics or {}).get(k, "") for k in keys], a.created_at.strftime("%Y-%m-%d %H:%M")]
                    for a in adapters]
    adapters_html = views.table_html(["adapter", "objective", "round", *keys, "created"], adapter_rows,
                                     table_id="evo-adapters", empty="No adapters yet: a finished round registers one.")
    live = next((a.name for a in adapters if a.active), "base model")
    cancellable = [(f"#{r.id} {r.objective} · {r.status_label}", r.id) for r in rounds
                   if r.status in ("queued", "running")]
    log_choices = [("newest round", LOG_NEWEST), *[(f"#{r.id} {r.objective}", str(r.id)) for r in rounds]]
    return TrainingView(progress, loss, rounds_html, adapters_html, [a.name for a in adapters], live, loss_key, kl,
                        kl_key, kl_visible, cancellable, newest.id if newest is not None else None, log_choices)


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


# Metrics shown first when rounds and adapters are compared (whichever of them a round reported).
KEY_METRICS = ("eval_em", "eval_f1", "em", "f1", "heldout_accuracy", "final_rewards_accuracies",
               "final_rewards_margins", "final_loss", "first_loss", "final_kl", "steps", "pairs", "episodes", "wall_s")


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


def activate_adapter(svc: Services, name: str | None) -> str:
    """Verify adapter `name` (files, checksum, base model of the studio's policy model) and make it live, through the
    registry's one activation path; a corrupt, missing or incompatible adapter raises AdapterError (the page shows
    it) and the live adapter stays as it was, in the store and in the model."""
    if not name:
        raise ValueError("choose an adapter to activate")
    from evorag_core.adapters.registry import activate  # peft and safetensors: what loading an adapter imports anyway
    from evorag_core.lm.loading import base_model_id

    a = activate(svc.store(), name, base_model_id(svc.cfg.policy.model, svc.home))
    return f"Adapter {a.name} is live: new episodes with the 'LM · live adapter' policy use it."


def use_base_model(svc: Services) -> str:
    svc.store().deactivate_adapters()
    return "No adapter is active: new LM episodes use the base model."


def round_ended(svc: Services, round_id: int) -> bool:
    """True once round `round_id` has succeeded, failed or been cancelled (or is gone)."""
    try:
        return svc.store().get_round(int(round_id)).status in ("succeeded", "failed", "cancelled")
    except KeyError:
        return True


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
        parts.append(f'live adapter: <b id="evo-live-adapter">{views.esc(name)}</b>')
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




def _logs_kl(objective: str) -> bool:
    """Whether rounds of `objective` log a per-step KL to their reference (an unknown, older name: assume they do)."""
    known = OBJECTIVES_ALL.get(objective)
    return known.logs_kl if known is not None else True
