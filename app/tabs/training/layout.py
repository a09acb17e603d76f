"""Studio tab: Training. Layout and event wiring only; every value comes from `handlers`.

Every objective the worker runs can be launched here (dpo, grpo, ppo, arena-grpo, r2ag-grpo, dynakrag): the tab
shows the fields the picked objective reads (the registry's `Objective.fields`, each drawn as
app/common/training_fields.py says) and hides the others. Launch is checked against what exists (the pairs, episodes or
data-file questions available for the objective are shown beside the fields; a larger request is capped, with a
message, and none available refuses it). The newest round's progress shows its phase, step i/N, elapsed time and
ETA; queued and running rounds can be cancelled. Its charts: the loss (hidden for an objective that logs none),
the KL (only for objectives that log one) and the objective's own metrics (registry `charts`, each shown once the
round reported it). The log panel shows the newest (or the picked) round's log lines as its worker stored them, newest at the
bottom, kept scrolled to the bottom unless the reader scrolled up. The tab's timer (one event per tick, the header's
refresh included: app/common/page_timers.py) ticks every 2 s while a round or an evaluation is queued or running and
every 5 s otherwise; each tick re-sends only what changed (the log only when new lines arrived). The points of the
charts a running round draws are this page's own (`handlers.ChartHistory` in a gr.State), never another page's.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import gradio as gr

from evorag_core.errors import EvoRagError
from evorag_core.objectives import OBJECTIVES as REGISTRY

from app.common import pickers, roles, views, training_fields as tf
from app.common.page_timers import PageTimers, Tick
from app.common.services import Services
from app.common.wiring import on
from app.tabs.training import handlers, promotion

__all__ = ["LR_STEP", "TrainingTab", "build_tab"]

LR_STEP = tf.LR_STEP

# The log panel stays scrolled to its newest line after each update, unless the reader scrolled up to read (then it
# keeps their place); `watch` runs after Gradio re-rendered the HTML with a new value.
LOG_SCROLL_JS = """
let stick = true, top = 0;
const box = () => element.querySelector('.evo-log-lines');
element.addEventListener('scroll', () => {
  const b = box();
  if (b) { stick = b.scrollTop + b.clientHeight >= b.scrollHeight - 24; top = b.scrollTop; }
}, true);
const place = () => { const b = box(); if (b) b.scrollTop = stick ? b.scrollHeight : top; };
place();
watch('value', place);
"""


@dataclass(frozen=True)
class TrainingTab:
    adapter: gr.Dropdown  # the adapter picked in the list
    compare: gr.Button  # "Compare with base": wired by ui.py to the Compare tab


def _field(spec: tf.FieldSpec, value: Any, visible: bool, svc: Services) -> gr.components.Component:
    common = dict(label=spec.label, elem_id=spec.elem_id, visible=visible)
    if spec.kind == "data":
        return gr.Dropdown(svc.data_files(), value=value, allow_custom_value=True, **common)
    if spec.kind == "choice":
        return gr.Dropdown(list(spec.choices), value=value, min_width=150, **common)
    if spec.kind == "radio":
        return gr.Radio(list(spec.choices), value=value, min_width=150, **common)
    lo, hi = spec.bounds  # one rule set: the launch checks the same (FieldSpec.problem)
    return gr.Number(value=value, precision=0 if spec.kind == "int" else None, minimum=lo, maximum=hi,
                     step=spec.step, min_width=150, **common)


def build_tab(svc: Services, policy_dd: gr.Dropdown, tab: gr.Tab, timers: PageTimers) -> TrainingTab:
    """The Training tab's components and events (refreshed when `tab` is selected, then by its timer while it is
    shown: app/common/page_timers.py)."""
    c = SimpleNamespace(policy_dd=policy_dd,
                        names_state=gr.State({}),  # what the outputs last showed
                        history=gr.State(handlers.ChartHistory()),  # this page's chart points (a copy per page)
                        launched=gr.State(None))  # the round the launch message is about
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            _launch_column(svc, c)
        with gr.Column(scale=2):
            _progress_column(c)
    gr.Markdown("### Rounds")
    c.rounds = gr.HTML(elem_id="evo-rounds-box")
    _adapters_section(svc, c)
    c.source, c.stage, c.data = c.fields["source"], c.fields["stage"], c.fields["data"]
    c.outs = [c.progress, c.loss, c.kl_plot, *c.metric_plots, c.rounds, c.adapters, c.adapter_dd, c.live, c.names_state,
              c.policy_dd, c.cancel_dd, c.cancel, c.available, c.log_box, c.log_pick, c.report, c.curve, c.activate,
              c.soup_pick]
    c.watched = [c.names_state, c.history, c.objective, c.source, c.stage, c.data, c.cancel_dd, c.log_pick,
                 c.adapter_dd]
    c.field_list = [c.fields[k] for k in tf.FIELD_KEYS]
    fresh = _refresher(svc)
    refresh = lambda *values: fresh(*values)[0]  # noqa: E731 - the outputs without whether a round is running
    _wire_timer(svc, c, fresh, timers)
    _wire_rounds(svc, c, refresh)
    _wire_adapters(svc, c, refresh)
    _wire_fields(svc, c)
    on(tab.select, refresh, c.watched, c.outs, quiet=True, show_progress="hidden", api_visibility="private")
    return TrainingTab(c.adapter_dd, c.compare)


def _launch_column(svc: Services, c: SimpleNamespace) -> None:
    """The objective, its summary and fields (only the ones it reads are shown), what is available, Launch."""
    t = svc.cfg.train
    defaults = tf.defaults(svc.cfg, str(svc.default_data))
    shown_fields = tf.fields_of(t.objective)
    c.fields = {}
    c.objective = gr.Dropdown(list(handlers.OBJECTIVES), value=t.objective, label="Objective",
                              elem_id="evo-objective")
    c.summary = gr.HTML(_summary(t.objective), elem_id="evo-objective-summary")
    c.fields["data"] = _field(tf.spec("data"), defaults["data"], "data" in shown_fields, svc)
    c.available = gr.HTML(elem_id="evo-available-box")
    with gr.Row(elem_id="evo-train-fields"):
        for spec in tf.FIELDS:
            if spec.key != "data":
                c.fields[spec.key] = _field(spec, defaults[spec.key], spec.key in shown_fields, svc)
    c.launch = gr.Button("Launch round", variant="primary", elem_id="evo-launch")
    c.launch_msg = gr.HTML(elem_id="evo-launch-msg")


def _progress_column(c: SimpleNamespace) -> None:
    """The newest round's progress, Cancel, the loss / KL / metric charts and the round log."""
    c.progress = gr.HTML(elem_id="evo-round-progress")
    with gr.Row(equal_height=True):
        c.cancel_dd = gr.Dropdown(label="Queued or running round", choices=[], scale=3, elem_id="evo-cancel-pick")
        c.cancel = gr.Button("Cancel round", variant="stop", scale=1, min_width=140, elem_id="evo-cancel",
                             interactive=False)
    c.cancel_msg = gr.HTML(elem_id="evo-cancel-msg")
    c.loss = gr.Plot(label="Loss", elem_id="evo-loss")
    c.kl_plot = gr.Plot(label="KL to the reference", elem_id="evo-kl", visible=False)
    c.metric_plots = [gr.Plot(label="Round metrics", elem_id=f"evo-metric-{i}", visible=False)
                      for i in range(handlers.MAX_CHARTS)]
    c.log_pick = gr.Dropdown(label="Round log", choices=[("newest round", handlers.LOG_NEWEST)],
                             value=handlers.LOG_NEWEST, elem_id="evo-log-pick")
    c.log_box = gr.HTML(elem_id="evo-round-log", js_on_load=LOG_SCROLL_JS)


def _adapters_section(svc: Services, c: SimpleNamespace) -> None:
    """The adapters, the live one, Evaluate / Activate / Use base / Compare, the evaluation report and curve."""
    gr.Markdown("### Adapters")
    gr.HTML(f'<div class="evo-note">Gated promotion: each new adapter is evaluated against the live model on '
            f'{views.esc(svc.cfg.promotion.data)} ({views.esc(svc.cfg.promotion.questions or "all questions")}, '
            f'{views.esc(svc.cfg.promotion.method)}); '
            + ("one that passes goes live by itself." if svc.cfg.promotion.auto else "one that passes waits here.")
            + " Activating one that did not pass needs a reason, which is logged.</div>")
    c.adapters = gr.HTML(elem_id="evo-adapters-box")
    with gr.Row():
        c.adapter_dd = gr.Dropdown(label="Adapter", choices=[], elem_id="evo-adapter-pick")
        c.evaluate = gr.Button("Evaluate vs live", elem_id="evo-evaluate-adapter")
        c.activate = gr.Button("Activate", variant="primary", elem_id="evo-activate")
        c.base = gr.Button("Use base model", elem_id="evo-base")
        c.compare = gr.Button("Compare with base", elem_id="evo-compare-adapter")
        c.live = gr.HTML(elem_id="evo-live-box")
    c.reason = gr.Textbox(label="Reason (needed to activate an adapter whose evaluation did not pass; logged)",
                          max_length=svc.cfg.studio.max_question_chars, elem_id="evo-activate-reason")
    c.act_msg = gr.HTML(elem_id="evo-activate-msg")
    with gr.Accordion("Average adapters (soup)", open=False, elem_id="evo-soup"):
        gr.HTML('<div class="evo-note">The mean of two or more adapters of one role (their LoRA weight updates '
                'averaged: say, one round trained with two seeds), registered as a new staged adapter and evaluated '
                'against the live model like a round\'s.</div>')
        with gr.Row(equal_height=True):
            c.soup_pick = gr.Dropdown(label="Adapters to average", choices=[], multiselect=True, scale=3,
                                      elem_id="evo-soup-pick")
            c.soup_name = gr.Textbox(label="New adapter's name", max_length=64, scale=2, elem_id="evo-soup-name")
            c.soup = gr.Button("Make soup", scale=1, min_width=140, elem_id="evo-soup-make")
        c.soup_msg = gr.HTML(elem_id="evo-soup-msg")
    c.report = gr.HTML(elem_id="evo-report-box")
    c.curve = gr.Plot(label="Held-out learning curve", elem_id="evo-learning-curve")


def _refresher(svc: Services) -> Callable[..., tuple[tuple, bool]]:
    """The tab's refresh: (new values for the outputs that changed since the last refresh, gr.skip() for the others,
    so that a timer tick costs the browser nothing when nothing happened; whether a round is queued or running)."""

    def refresh(shown: dict | None, history: handlers.ChartHistory | None, obj: str, src: str, stg: str, dat: str,
                picked: Any, log_picked: Any = handlers.LOG_NEWEST, picked_adapter: str | None = None
                ) -> tuple[tuple, bool]:
        shown = dict(shown or {})
        view = handlers.training_view(svc, history=history)
        live_html = (f'live: <b id="evo-live-name">{views.esc(view.live)}</b>'
                     + (f'<div class="evo-note" id="evo-live-reason">{views.esc(view.live_why)}</div>'
                        if view.live_why else ""))
        report_html = promotion.report_html(svc, picked_adapter)
        log_key, log_html = handlers.round_log(svc, handlers.log_round_id(log_picked, view.newest_id), shown.get("log"))
        fresh = {"progress": view.progress, "loss": (view.loss_key, view.loss_visible),
                 "kl": (view.kl_key, view.kl_visible), "charts": (view.charts_key, tuple(v for _, v in view.charts)),
                 "rounds": view.rounds, "adapters": view.adapters, "live": live_html, "names": view.adapter_names,
                 "cancellable": view.cancellable, "available": handlers.availability_text(svc, obj, src, stg, dat),
                 "log": log_key, "log_choices": view.log_choices, "report": report_html, "curve": view.curve_key,
                 "activate": picked_adapter == view.live}

        def send(key: str, value: Any) -> Any:
            return value if shown.get(key, object()) != fresh[key] else gr.skip()

        names_changed = shown.get("names") != view.adapter_names
        pick = gr.Dropdown(choices=view.adapter_names) if names_changed else gr.skip()
        pick_many = gr.Dropdown(choices=view.adapter_names) if names_changed else gr.skip()  # the soup's inputs
        pol = gr.Dropdown(choices=pickers.policy_options(svc)) if names_changed else gr.skip()
        loss_out = (gr.Plot(value=view.loss, visible=view.loss_visible) if shown.get("loss") != fresh["loss"]
                    else gr.skip())
        kl_out = gr.Plot(value=view.kl, visible=view.kl_visible) if shown.get("kl") != fresh["kl"] else gr.skip()
        charts_changed = shown.get("charts") != fresh["charts"]
        chart_outs = [gr.Plot(value=fig, visible=visible) if charts_changed else gr.skip()
                      for fig, visible in view.charts]
        ids = [i for _, i in view.cancellable]
        changed = shown.get("cancellable") != view.cancellable
        cancel_out = (gr.Dropdown(choices=view.cancellable, value=picked if picked in ids else (ids[0] if ids else None))
                      if changed else gr.skip())
        button_out = gr.Button(interactive=bool(ids)) if changed else gr.skip()  # nothing to cancel: greyed out
        log_out = log_html if log_html is not None else gr.skip()  # no new line: nothing re-rendered
        log_pick_out = (gr.Dropdown(choices=view.log_choices) if shown.get("log_choices") != view.log_choices
                        else gr.skip())
        curve_out = view.curve if shown.get("curve") != fresh["curve"] else gr.skip()
        activate_out = _activate_button(fresh["activate"]) if shown.get("activate") != fresh["activate"] else gr.skip()
        return (send("progress", view.progress), loss_out, kl_out, *chart_outs, send("rounds", view.rounds),
                send("adapters", view.adapters), pick, send("live", live_html), fresh, pol, cancel_out, button_out,
                send("available", fresh["available"]), log_out, log_pick_out, send("report", report_html),
                curve_out, activate_out, pick_many), bool(ids)

    return refresh


def _activate_button(picked_is_live: bool) -> gr.Button:
    """Activate, greyed out as "Live" while the picked adapter is the live one (there is nothing to activate)."""
    if picked_is_live:
        return gr.Button(value="Live", variant="secondary", interactive=False)
    return gr.Button(value="Activate", variant="primary", interactive=True)


def _wire_rounds(svc: Services, c: SimpleNamespace, refresh: Callable[..., tuple]) -> None:
    """Launch and Cancel; the log and adapter pickers redraw what they change."""

    def on_launch(obj, shown, history, picked, log_picked, picked_adapter, request: gr.Request, *values):
        roles.require(svc, request, "train")  # the server's check: a hidden button is not a permission
        round_id = None
        given = dict(zip(tf.FIELD_KEYS, values))
        try:
            done = handlers.launch_job(svc, obj, given)
            msg = views.message_html(done.message, "warn" if done.capped else "ok")
            round_id = done.round_id
        except (ValueError, EvoRagError) as exc:  # refused (nothing available, a bad value or file): said where
            msg = views.message_html(str(exc), "error")  # the user looks
        return (msg, *refresh(shown, history, obj, given["source"], given["stage"], given["data"], picked, log_picked,
                              picked_adapter), round_id, _hurry(svc, round_id))

    def on_cancel(picked, shown, history, obj, src, stg, dat, log_picked, picked_adapter, request: gr.Request):
        roles.require(svc, request, "train")
        msg = handlers.cancel_round(svc, picked)
        return (views.message_html(msg, "ok"),
                *refresh(shown, history, obj, src, stg, dat, picked, log_picked, picked_adapter))

    on(c.launch.click, on_launch, [c.objective, c.names_state, c.history, c.cancel_dd, c.log_pick, c.adapter_dd,
                                   *c.field_list], [c.launch_msg, *c.outs, c.launched, c.timer])
    on(c.cancel.click, on_cancel, [c.cancel_dd, c.names_state, c.history, c.objective, c.source, c.stage, c.data,
                                   c.log_pick, c.adapter_dd], [c.cancel_msg, *c.outs])
    on(c.log_pick.input, refresh, c.watched, c.outs, quiet=True, show_progress="hidden", api_visibility="private")
    on(c.adapter_dd.input, refresh, c.watched, c.outs, quiet=True, show_progress="hidden", api_visibility="private")


def _hurry(svc: Services, round_id: int | None) -> Any:
    """The tab's timer at its fast rate once something was queued (its next tick would say so too, later)."""
    return gr.Timer(value=svc.cfg.studio.timer_fast_s) if round_id is not None else gr.skip()


def _wire_adapters(svc: Services, c: SimpleNamespace, refresh: Callable[..., tuple]) -> None:
    """Activate (with a reason where the gate said no), Evaluate vs live, Use base model, Make soup."""

    def on_activate(name, why, shown, history, obj, src, stg, dat, picked, log_picked, request: gr.Request):
        roles.require(svc, request, "adapters")
        try:
            msg, kind, why = handlers.activate_adapter(svc, name, why, roles.session_user(request)), "ok", ""
        except (ValueError, EvoRagError) as exc:  # refused (corrupt, or the gate said no and no reason): said here
            msg, kind, why = str(exc), "error", gr.skip()
        return (views.message_html(msg, kind), why,
                *refresh(shown, history, obj, src, stg, dat, picked, log_picked, name))

    def on_evaluate(name, shown, history, obj, src, stg, dat, picked, log_picked, request: gr.Request):
        roles.require(svc, request, "adapters")
        queued = None
        try:
            msg, kind, queued = promotion.queue_evaluation(svc, name), "ok", name
        except (ValueError, KeyError, EvoRagError) as exc:
            msg, kind = str(exc).strip("'\""), "error"
        return (views.message_html(msg, kind), *refresh(shown, history, obj, src, stg, dat, picked, log_picked, name),
                _hurry(svc, queued))

    def on_base(shown, history, obj, src, stg, dat, picked, log_picked, picked_adapter, request: gr.Request):
        roles.require(svc, request, "adapters")
        msg = handlers.use_base_model(svc, roles.session_user(request))
        return (views.message_html(msg, "ok"),
                *refresh(shown, history, obj, src, stg, dat, picked, log_picked, picked_adapter))

    def on_soup(names, name, shown, history, obj, src, stg, dat, picked, log_picked, picked_adapter,
                request: gr.Request):
        roles.require(svc, request, "adapters")
        queued, clear = None, gr.skip()
        try:
            msg, evaluating = promotion.make_soup(svc, names, name)
            kind, clear, queued = "ok", "", (name if evaluating else None)
        except (ValueError, EvoRagError) as exc:  # refused (mixed roles, a taken name, a corrupt input): said here
            msg, kind = str(exc), "error"
        return (views.message_html(msg, kind), clear,
                *refresh(shown, history, obj, src, stg, dat, picked, log_picked, picked_adapter), _hurry(svc, queued))

    on(c.activate.click, on_activate, [c.adapter_dd, c.reason, *c.watched[:-1]], [c.act_msg, c.reason, *c.outs])
    on(c.soup.click, on_soup, [c.soup_pick, c.soup_name, *c.watched], [c.soup_msg, c.soup_name, *c.outs, c.timer])
    on(c.evaluate.click, on_evaluate, [c.adapter_dd, *c.watched[:-1]], [c.act_msg, *c.outs, c.timer])
    on(c.base.click, on_base, c.watched, [c.act_msg, *c.outs])


def _wire_fields(svc: Services, c: SimpleNamespace) -> None:
    """The objective shows its fields (with its own defaults); the availability line follows the filters."""
    defaults = tf.defaults(svc.cfg, str(svc.default_data))

    def on_objective(obj, src, stg, dat):
        """Show the objective's fields, hide the others; its own defaults; its availability line."""
        keys = tf.fields_of(obj)
        switched = tf.switch_values(obj, defaults)
        updates = [gr.update(visible=k in keys, **({"value": switched[k]} if k in switched else {}))
                   for k in tf.FIELD_KEYS]
        return (_summary(obj), *updates, handlers.availability_text(svc, obj, src, stg, dat))

    filters = [c.objective, c.source, c.stage, c.data]
    on(c.objective.change, on_objective, filters, [c.summary, *c.field_list, c.available],
       quiet=True, show_progress="hidden", api_visibility="private")
    for changed in (c.source.change, c.stage.change, c.data.change):
        on(changed, lambda o, s, g, d: handlers.availability_text(svc, o, s, g, d), filters,
           c.available, quiet=True, show_progress="hidden", api_visibility="private")


def _wire_timer(svc: Services, c: SimpleNamespace, fresh: Callable[..., tuple[tuple, bool]],
                timers: PageTimers) -> None:
    """The tab's timer (app/common/page_timers.py): each tick refreshes what changed and, once its round has ended,
    clears the launch message; fast while a round is queued or running."""

    def tick(request: gr.Request, launched: int | None, *watched: Any) -> tuple[tuple, bool]:
        outs, busy = fresh(*watched)
        if launched is None or not handlers.round_ended(svc, launched):
            cleared: tuple = (gr.skip(), gr.skip())
        else:  # the launch message ("Round #1 queued…") goes once its round has ended: the table tells the rest
            cleared = ("", None)
        return (*outs, *cleared), busy

    c.timer = timers.for_tab("training", Tick(tick, [c.launched, *c.watched], [*c.outs, c.launch_msg, c.launched]))


def _summary(objective: str) -> str:
    known = REGISTRY.get(objective)
    text = known.summary if known is not None else ""
    return f'<div class="evo-objective-summary">{views.esc(text)}</div>'
