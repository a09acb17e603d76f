"""The Pairs tab: the pair queue with filters and counts; edit, discard or restore a pair; answer pairs from the
stored episodes. Layout and wiring only: every event calls `app.tabs.pairs.handlers`."""
from __future__ import annotations

import threading
from typing import Callable

import gradio as gr

from evorag_core.env.scheduler import STAGES
from evorag_core.store.records import PAIR_SOURCES, PAIR_STATUSES

from app.common import roles, views
from app.common.services import Services
from app.common.wiring import Reload, on
from app.tabs.pairs import handlers
from app.tabs.pairs.view import prompt_html
from app.common.session import session_key as _session

__all__ = ["build_tab"]

_stop_flags: dict[str, threading.Event] = {}  # browser session -> its answer-pair run's Stop flag


def build_tab(svc: Services, demo: gr.Blocks) -> Reload:
    """The Pairs tab's content (inside its gr.Tab): filters, the pairs table, and a pair's edit / discard /
    restore; the returned Reload refreshes the table (on select and after the Episode tab queues pairs)."""
    with gr.Row():
        source = gr.Dropdown(["all", *PAIR_SOURCES], value="all", label="Source", elem_id="evo-f-source")
        status = gr.Dropdown(["all", *PAIR_STATUSES], value="all", label="Status", elem_id="evo-f-status")
        annot = gr.Textbox(label="Annotator", placeholder="all", elem_id="evo-f-annotator")
        stage = gr.Dropdown(["all", *STAGES], value="all", label="Stage", elem_id="evo-f-stage")
        refresh = gr.Button("Refresh", elem_id="evo-pairs-refresh", scale=0, min_width=120)
    counts = gr.HTML(elem_id="evo-pair-counts")
    table = gr.HTML(elem_id="evo-pairs-box")
    with gr.Accordion("Edit or discard a pair", open=True):
        with gr.Row():
            pair_dd = gr.Dropdown(label="Pair", choices=[], elem_id="evo-pair-pick", scale=1)
            pair_stage = gr.Textbox(label="Stage", scale=1)
        prompt = gr.HTML(prompt_html(""), label="Prompt (state)", elem_id="evo-pair-prompt-box")
        with gr.Row():
            chosen = gr.Textbox(label="Chosen (preferred)", lines=2)
            rejected = gr.Textbox(label="Rejected", lines=2)
        with gr.Row():
            save = gr.Button("Save edit", elem_id="evo-pair-save")
            discard = gr.Button("Discard", variant="stop", elem_id="evo-pair-discard")
            restore = gr.Button("Restore", elem_id="evo-pair-restore")
        edit_msg = gr.HTML()

    filters = [source, status, annot, stage]

    def show(*f):
        view = handlers.pairs_view(svc, *f)
        return view.counts, view.table, gr.Dropdown(choices=view.ids)

    outs = [counts, table, pair_dd]
    on(refresh.click, show, filters, outs)
    for f in (source, status, stage):
        on(f.input, show, filters, outs)
    on(annot.submit, show, filters, outs)
    on(demo.load, show, filters, outs, api_visibility="private")
    on(pair_dd.input, lambda i: handlers.pair_fields(svc, i), pair_dd, [prompt, chosen, rejected, pair_stage])

    def act(fn):
        def run(pid, c, r, s, request: gr.Request, *f):
            roles.require(svc, request, "queue")
            msg = fn(pid, c, r, s)
            return (views.message_html(msg, "ok"), *show(*f))
        return run

    on(save.click, act(lambda pid, c, r, s: handlers.edit_pair(svc, pid, c, r, s)),
       [pair_dd, chosen, rejected, pair_stage, *filters], [edit_msg, *outs])
    on(discard.click, act(lambda pid, c, r, s: handlers.discard_pair(svc, pid)),
       [pair_dd, chosen, rejected, pair_stage, *filters], [edit_msg, *outs])
    on(restore.click, act(lambda pid, c, r, s: handlers.restore_pair(svc, pid)),
       [pair_dd, chosen, rejected, pair_stage, *filters], [edit_msg, *outs])

    _answer_pairs_box(svc, show, filters, outs)
    return Reload(show, filters, outs)


def _answer_pairs_box(svc: Services, show: Callable[..., tuple], filters: list, outs: list) -> None:
    """"Answer pairs from the stored episodes": Make answer pairs (progress, a message, the table refreshed) and
    Stop (`handlers.answer_pairs`)."""
    with gr.Accordion("Answer pairs from the stored episodes", open=False, elem_id="evo-answer-pairs-box"):
        gr.Markdown("At the state each stored episode answered from (evaluation runs aside), the reader's candidate "
                    "nearest the question's gold answer is preferred over a wrong one. These pairs train the answers: "
                    "a DPO round with pair source **answer** (Training tab) is the round measured to raise the "
                    "agent's F1 (docs/answers.md). Episodes paired before are skipped.")
        with gr.Row():
            states = gr.Radio([("the answer state", "final"), ("every state", "all")], value="final",
                              label="States read", elem_id="evo-answer-states", scale=2)
            make = gr.Button("Make answer pairs", elem_id="evo-answer-pairs", scale=0, min_width=200)
            stop = gr.Button("Stop", variant="stop", elem_id="evo-answer-pairs-stop", scale=0, min_width=100)
        made = gr.HTML(elem_id="evo-answer-pairs-msg")

    def make_pairs(st, src, sts, ann, stg, request: gr.Request, progress=gr.Progress()):
        roles.require(svc, request, "queue")
        flag = _stop_flags[_session(request)] = threading.Event()
        yield (views.message_html("Reading the stored episodes' answer states... Stop ends the run after the episode "
                                  "being read.", "info"), gr.skip(), gr.skip(), gr.skip())
        try:
            msg = handlers.answer_pairs(svc, st, lambda done, total: progress((done, total), desc="episodes read"),
                                        stop=flag)
        finally:
            _stop_flags.pop(_session(request), None)
        yield (views.message_html(msg, "warn" if flag.is_set() else "ok"), *show(src, sts, ann, stg))

    def stop_pairs(request: gr.Request):
        flag = _stop_flags.get(_session(request))
        if flag is None:
            return views.message_html("Nothing is being read.", "info")
        flag.set()  # the run ends after the episode being read and says so itself
        return gr.skip()

    on(make.click, make_pairs, [states, *filters], [made, *outs])
    on(stop.click, stop_pairs, None, made, api_visibility="private", show_progress="hidden")
