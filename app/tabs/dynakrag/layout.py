"""The DynaKrag tab: a question stepped through DynaKrag's evidence controller. Beside the evidence state it shows
the validity layer's verdict on every operation (invalid ones greyed with the rule that excludes them), the
controller's v̂(s,a) − λ·c(s,a) per valid operation as bars with its pick highlighted, and, once the episode ends, the
compressed evidence and the answer with EM/F1 (`app/tabs/dynakrag/handlers.py`, drawn by `app/tabs/dynakrag/view.py`).

Step runs the pick shown, Run to end every operation until the answer; Stop sets the session's flag, which the
running stream reads at its next tick (0.5 s): the operation in progress is interrupted and discarded, the page says
Stopped and shows the state after the last finished operation. With no trained controller the tab says so and
offers the uniform-valid controller and a training round on the current data file (the Training tab's launch of
the `dynakrag` objective), whose progress the tab's timer shows (every 2 s while it runs, else 5 s).
"""
from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import gradio as gr

from app.common import roles, views, pickers
from app.common.dynakrag_view import trace_html
from app.common.page_timers import PageTimers, Tick
from app.common.services import Services
from app.common.wiring import on, studio_tab
from app.tabs.dynakrag import handlers as hd
from app.tabs.dynakrag.view import controller_html, final_html, operations_html, scores_figure, state_html
from app.common.session import session_key as _session

__all__ = ["build_tab", "render"]

_stop_flags: dict[str, threading.Event] = {}  # browser session -> its running Step / Run's Stop flag

_IDLE = "Pick or type a question, then Step (or Reset to see s₀ first)."


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
    trained = hd.controller_status(svc).trained
    first_ctrl = hd.LEARNED if trained else hd.UNIFORM
    c = SimpleNamespace()
    with studio_tab("DynaKrag", id="dynakrag", elem_id="evo-dk-tab") as tab:
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                _picks_column(svc, c, first_ctrl)
                _train_section(c, trained)
            with gr.Column(scale=3):
                _episode_panels(svc, c, first_ctrl)
        c.session = gr.State(None)
        c.busy = gr.State(False)  # a Step / Run is streaming (Stop has something to stop)
        c.round_id = gr.State(None)  # the training round launched here
    c.views_out = [c.state_box, c.ops_box, c.figure, c.final_box, c.trace_box]
    _wire_episode(svc, c, tab)
    _wire_training(svc, c, tab, timers)
    return tab


def _picks_column(svc: Services, c: SimpleNamespace, first_ctrl: str) -> None:
    """Data file, question (or a typed one), controller; Reset / Step / Run to end / Stop."""
    files = pickers.data_choices(svc)
    c.data_dd = gr.Dropdown(choices=files, value=files[0][1] if files else None, label="Data file",
                            elem_id="evo-dk-data")
    c.question_dd = gr.Dropdown(label="Question", choices=[], elem_id="evo-dk-question")
    c.typed = gr.Textbox(label="Or type a question", lines=2, elem_id="evo-dk-typed",
                         placeholder="searched in the picked question's corpus; no gold, so not graded")
    c.controller = gr.Radio([("learned (trained)", hd.LEARNED), ("uniform-valid (no training)", hd.UNIFORM)],
                            value=first_ctrl, label="Controller", elem_id="evo-dk-controller-pick")
    with gr.Row():
        c.reset = gr.Button("Reset", elem_id="evo-dk-reset", min_width=80)
        c.step = gr.Button("Step", variant="primary", elem_id="evo-dk-step", min_width=80)
        c.run = gr.Button("Run to end", elem_id="evo-dk-run", min_width=100)
        c.stop = gr.Button("Stop", variant="stop", elem_id="evo-dk-stop", min_width=80)


def _train_section(c: SimpleNamespace, trained: bool) -> None:
    """Train a controller on the data file (a worker round), Cancel, its progress."""
    with gr.Accordion("Train a controller on this data file", open=not trained, elem_id="evo-dk-train"):
        gr.Markdown("A worker round of the `dynakrag` objective (as the Training tab launches it): it "
                    "explores the questions with the policy model, fits the forests and installs them.")
        c.questions = gr.Number(value=0, precision=0, minimum=0, label="Questions to explore (0: all)",
                                elem_id="evo-dk-train-questions")
        with gr.Row():
            c.train = gr.Button("Train controller", elem_id="evo-dk-train-btn")
            c.cancel = gr.Button("Cancel training", variant="stop", elem_id="evo-dk-train-cancel")
        c.train_msg = gr.HTML(elem_id="evo-dk-train-msg")
        c.train_progress = gr.HTML(elem_id="evo-dk-train-progress")


def _episode_panels(svc: Services, c: SimpleNamespace, first_ctrl: str) -> None:
    """The controller line, the status, the evidence state, operations and scores, the answer, the steps so far."""
    c.controller_box = gr.HTML(_controller_box(svc, first_ctrl), elem_id="evo-dk-controller")
    c.status = gr.HTML(elem_id="evo-dk-status")
    state_out, ops_out, fig, final_out, trace_out = render(svc, None)
    with gr.Row(equal_height=False):
        with gr.Column(min_width=380):
            gr.Markdown("#### Evidence state")
            c.state_box = gr.HTML(state_out, elem_id="evo-dk-state")
        with gr.Column(min_width=380):
            gr.Markdown("#### Operations (validity layer) and the controller's scores")
            c.ops_box = gr.HTML(ops_out, elem_id="evo-dk-ops")
            c.figure = gr.Plot(fig, show_label=False, elem_id="evo-dk-scores")
    gr.Markdown("#### Answer")
    c.final_box = gr.HTML(final_out, elem_id="evo-dk-final")
    with gr.Accordion("Steps so far", open=False):
        c.trace_box = gr.HTML(trace_out, elem_id="evo-dk-trace")


def _wire_episode(svc: Services, c: SimpleNamespace, tab: gr.Tab) -> None:
    """Questions and the controller line when shown; Reset, Step and Run to end (streamed), Stop."""

    def on_data(path):
        info = pickers.load_data(svc, path)
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
                        yield (update.status, *(gr.skip(),) * len(c.views_out), gr.skip(), True)
                    else:
                        yield (update.status, *render(svc, update.session), update.session, not update.stopped)
                    if update.stopped:
                        return
            finally:
                flag.set()
            yield (gr.skip(),) * (len(c.views_out) + 2) + (False,)  # done: Stop has nothing to stop any more

        return stream

    def on_stop(was_running, request: gr.Request):
        flag = _stop_flags.get(_session(request))
        if not was_running or flag is None or flag.is_set():
            return views.message_html("Nothing is running.", "info")
        flag.set()  # the running stream ends itself with the stopped view
        return gr.skip()

    inputs = [c.session, c.data_dd, c.question_dd, c.typed, c.controller]
    outputs = [c.status, *c.views_out, c.session, c.busy]
    on(tab.select, on_select, [c.data_dd, c.question_dd, c.controller], [c.question_dd, c.controller_box],
       api_visibility="private")
    on(c.data_dd.select, on_data, c.data_dd, c.question_dd)
    on(c.controller.change, lambda ctrl: _controller_box(svc, ctrl), c.controller, c.controller_box, quiet=True,
       show_progress="hidden", api_visibility="private")
    on(c.reset.click, on_reset, [c.data_dd, c.question_dd, c.typed, c.controller], [c.status, *c.views_out, c.session])
    on(c.step.click, advancing(False), inputs, outputs, show_progress="minimal")
    on(c.run.click, advancing(True), inputs, outputs, show_progress="minimal")
    on(c.stop.click, on_stop, c.busy, c.status, api_visibility="private", show_progress="hidden")


def _wire_training(svc: Services, c: SimpleNamespace, tab: gr.Tab, timers: PageTimers) -> None:
    """Train controller, Cancel training, and the launched round's progress on the tab's timer."""

    def on_train(path, n, request: gr.Request):
        roles.require(svc, request, "train")  # the server's check, as the Training tab's launch
        done = hd.train_controller(svc, path, n)
        html, _ = hd.round_html(svc, done.round_id)
        return (views.message_html(done.message, "warn" if done.capped else "ok"), html, done.round_id,
                gr.Timer(value=svc.cfg.studio.timer_fast_s))  # the progress follows at the fast rate

    def on_cancel(rid, request: gr.Request):
        roles.require(svc, request, "train")
        return views.message_html(hd.cancel_training(svc, rid), "ok")

    def tick(request: gr.Request, rid, ctrl) -> tuple[tuple, bool]:
        """The launched round's progress; once it has ended, the controller line (and the learned controller when
        the round installed one), then the timer has nothing more to do (it ticks slowly, for the header)."""
        if rid is None:
            return (gr.skip(), gr.skip(), gr.skip(), gr.skip()), False
        html, ended = hd.round_html(svc, rid)
        if not ended:
            return (html, gr.skip(), gr.skip(), gr.skip()), True
        pick = hd.LEARNED if hd.controller_status(svc).trained else ctrl
        return (html, _controller_box(svc, pick), pick, None), False

    with tab:  # a component outside the Tab would sit directly in the Tabs: Gradio then draws a selected tab twice
        # ticks while the tab is shown (app/common/page_timers.py)
        timer = timers.for_tab("dynakrag", Tick(tick, [c.round_id, c.controller],
                                                [c.train_progress, c.controller_box, c.controller, c.round_id]))
    on(c.train.click, on_train, [c.data_dd, c.questions], [c.train_msg, c.train_progress, c.round_id, timer])
    on(c.cancel.click, on_cancel, c.round_id, c.train_msg)
