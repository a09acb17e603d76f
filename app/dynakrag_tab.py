"""The DynaKrag tab: a question stepped through DynaKrag's evidence controller. Beside the evidence state it shows
the validity layer's verdict on every operation (invalid ones greyed with the rule that excludes them), the
controller's v̂(s,a) − λ·c(s,a) per valid operation as bars with its pick highlighted, and, once the episode ends, the
compressed evidence and the answer with EM/F1 (`app/handlers/dynakrag.py`, drawn by `app/dynakrag_step.py`).

Step runs the pick shown, Run to end every operation until the answer; Stop sets the session's flag, which the
running stream reads at its next tick (0.5 s): the operation in progress is interrupted and discarded, the page says
Stopped and shows the state after the last finished operation. With no trained controller the tab says so and
offers the uniform-valid controller and a training round on the current data file (the Training tab's launch of
the `dynakrag` objective), whose progress a 2 s timer shows.
"""
from __future__ import annotations

import threading
from typing import Any

import gradio as gr

from app import handlers, roles, views
from app.dynakrag_step import controller_html, final_html, operations_html, scores_figure, state_html
from app.dynakrag_view import trace_html
from app.handlers import dynakrag as hd
from app.services import Services
from app.page_timers import PageTimers
from app.wiring import on

__all__ = ["build_tab", "render"]

_stop_flags: dict[str, threading.Event] = {}  # browser session -> its running Step / Run's Stop flag

_IDLE = "Pick or type a question, then Step (or Reset to see s₀ first)."


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or ""


def render(svc: Services, session: hd.DynaKragSession | None) -> tuple[str, str, Any, str, str]:
    """(evidence state, operations, scores figure, final answer, steps table) of a session (placeholders for none)."""
    cfg = svc.cfg.dynakrag
    if session is None:
        empty = f'<div class="evo-empty">{views.esc(_IDLE)}</div>'
        return (empty, empty, views.empty_figure("Controller scores", "no episode yet"), final_html(None, cfg, None),
                "")
    state = session.state
    return (state_html(state, cfg, session.gold_pids), operations_html(state, cfg, session.decision),
            scores_figure(state, cfg, session.decision, session.controller),
            final_html(state, cfg, session.answer, session.gold_answers, hd.grade(session), session.stop_reason),
            trace_html([t.to_dict() for t in session.steps]) if session.steps else "")


def _controller_box(svc: Services, controller: str) -> str:
    status = hd.controller_status(svc)
    return controller_html(status.trained, status.text, controller)


def build_tab(svc: Services, timers: PageTimers) -> gr.Tab:
    """The tab (created inside the caller's `gr.Tabs`); it reloads its pickers and the controller line when shown."""
    files = handlers.data_choices(svc)
    trained = hd.controller_status(svc).trained
    first_ctrl = hd.LEARNED if trained else hd.UNIFORM
    with gr.Tab("DynaKrag", id="dynakrag", elem_id="evo-dk-tab") as tab:
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                data_dd = gr.Dropdown(choices=files, value=files[0][1] if files else None, label="Data file",
                                      elem_id="evo-dk-data")
                question_dd = gr.Dropdown(label="Question", choices=[], elem_id="evo-dk-question")
                typed = gr.Textbox(label="Or type a question", lines=2, elem_id="evo-dk-typed",
                                   placeholder="searched in the picked question's corpus; no gold, so not graded")
                controller = gr.Radio([("learned (trained)", hd.LEARNED), ("uniform-valid (no training)", hd.UNIFORM)],
                                      value=first_ctrl, label="Controller", elem_id="evo-dk-controller-pick")
                with gr.Row():
                    reset = gr.Button("Reset", elem_id="evo-dk-reset", min_width=80)
                    step = gr.Button("Step", variant="primary", elem_id="evo-dk-step", min_width=80)
                    run = gr.Button("Run to end", elem_id="evo-dk-run", min_width=100)
                    stop = gr.Button("Stop", variant="stop", elem_id="evo-dk-stop", min_width=80)
                with gr.Accordion("Train a controller on this data file", open=not trained, elem_id="evo-dk-train"):
                    gr.Markdown("A worker round of the `dynakrag` objective (as the Training tab launches it): it "
                                "explores the questions with the policy model, fits the forests and installs them.")
                    questions = gr.Number(value=0, precision=0, minimum=0, label="Questions to explore (0: all)",
                                          elem_id="evo-dk-train-questions")
                    with gr.Row():
                        train = gr.Button("Train controller", elem_id="evo-dk-train-btn")
                        cancel = gr.Button("Cancel training", variant="stop", elem_id="evo-dk-train-cancel")
                    train_msg = gr.HTML(elem_id="evo-dk-train-msg")
                    train_progress = gr.HTML(elem_id="evo-dk-train-progress")
            with gr.Column(scale=3):
                controller_box = gr.HTML(_controller_box(svc, first_ctrl), elem_id="evo-dk-controller")
                status = gr.HTML(elem_id="evo-dk-status")
                state_out, ops_out, fig, final_out, trace_out = render(svc, None)
                with gr.Row(equal_height=False):
                    with gr.Column(min_width=380):
                        gr.Markdown("#### Evidence state")
                        state_box = gr.HTML(state_out, elem_id="evo-dk-state")
                    with gr.Column(min_width=380):
                        gr.Markdown("#### Operations (validity layer) and the controller's scores")
                        ops_box = gr.HTML(ops_out, elem_id="evo-dk-ops")
                        figure = gr.Plot(fig, show_label=False, elem_id="evo-dk-scores")
                gr.Markdown("#### Answer")
                final_box = gr.HTML(final_out, elem_id="evo-dk-final")
                with gr.Accordion("Steps so far", open=False):
                    trace_box = gr.HTML(trace_out, elem_id="evo-dk-trace")
        session = gr.State(None)
        busy = gr.State(False)  # a Step / Run is streaming (Stop has something to stop)
        round_id = gr.State(None)  # the training round launched here

    views_out = [state_box, ops_box, figure, final_box, trace_box]

    def on_data(path):
        info = handlers.load_data(svc, path)
        return gr.Dropdown(choices=info.questions, value=info.questions[0][1] if info.questions else None)

    def on_select(path, question, ctrl):
        """When the tab is shown: the questions the first time, and the controller line (a round may have ended)."""
        return (gr.skip() if question else on_data(path)), _controller_box(svc, ctrl)

    def on_reset(path, qid, text, ctrl):
        sess = hd.start(svc, path, qid, text or "", ctrl)
        msg = views.message_html(f"Ready: s₀ of {'the typed question' if sess.typed else sess.question_id}; "
                                 f"Step runs the pick shown.", "info")
        return (msg, *render(svc, sess), sess)

    def advancing(to_end: bool):
        def stream(sess, path, qid, text, ctrl, request: gr.Request):
            if sess is None:  # Step / Run before Reset: start from the picks
                sess = hd.start(svc, path, qid, text or "", ctrl)
                yield (gr.skip(), *render(svc, sess), sess, True)
            flag = _stop_flags[_session(request)] = threading.Event()
            try:
                for update in hd.advance(svc, sess, flag, to_end=to_end):
                    if update.session is None:
                        yield (update.status, *(gr.skip(),) * len(views_out), gr.skip(), True)
                    else:
                        yield (update.status, *render(svc, update.session), update.session, not update.stopped)
                    if update.stopped:
                        return
            finally:
                flag.set()
            yield (gr.skip(),) * (len(views_out) + 2) + (False,)  # done: Stop has nothing to stop any more

        return stream

    def on_stop(was_running, request: gr.Request):
        flag = _stop_flags.get(_session(request))
        if not was_running or flag is None or flag.is_set():
            return views.message_html("Nothing is running.", "info")
        flag.set()  # the running stream ends itself with the stopped view
        return gr.skip()

    def on_train(path, n, request: gr.Request):
        roles.require(svc, request, "train")  # the server's check, as the Training tab's launch
        done = hd.train_controller(svc, path, n)
        html, _ = hd.round_html(svc, done.round_id)
        return views.message_html(done.message, "warn" if done.capped else "ok"), html, done.round_id

    def on_cancel(rid, request: gr.Request):
        roles.require(svc, request, "train")
        return views.message_html(hd.cancel_training(svc, rid), "ok")

    def tick(rid, ctrl):
        """The launched round's progress; once it has ended, the controller line (and the learned controller when
        the round installed one), then the timer has nothing more to do."""
        if rid is None:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        html, ended = hd.round_html(svc, rid)
        if not ended:
            return html, gr.skip(), gr.skip(), gr.skip()
        pick = hd.LEARNED if hd.controller_status(svc).trained else ctrl
        return html, _controller_box(svc, pick), pick, None

    inputs = [session, data_dd, question_dd, typed, controller]
    outputs = [status, *views_out, session, busy]
    on(tab.select, on_select, [data_dd, question_dd, controller], [question_dd, controller_box],
       api_visibility="private")
    on(data_dd.select, on_data, data_dd, question_dd)
    on(controller.change, lambda c: _controller_box(svc, c), controller, controller_box, quiet=True,
       show_progress="hidden", api_visibility="private")
    on(reset.click, on_reset, [data_dd, question_dd, typed, controller], [status, *views_out, session])
    on(step.click, advancing(False), inputs, outputs, show_progress="minimal")
    on(run.click, advancing(True), inputs, outputs, show_progress="minimal")
    on(stop.click, on_stop, busy, status, api_visibility="private", show_progress="hidden")
    on(train.click, on_train, [data_dd, questions], [train_msg, train_progress, round_id])
    on(cancel.click, on_cancel, round_id, train_msg)
    with tab:  # a component outside the Tab would sit directly in the Tabs: Gradio then draws a selected tab twice
        timer = timers.for_tab("dynakrag")  # ticks while the tab is shown (app/page_timers.py)
    on(timer.tick, tick, [round_id, controller], [train_progress, controller_box, controller, round_id], quiet=True,
       show_progress="hidden", concurrency_limit=None, trigger_mode="once", api_visibility="private")
    return tab
