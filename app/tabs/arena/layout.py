"""The ARENA tab: one question answered by ARENA's citing generator with the policy model, the base model and an
adapter of the registry side by side (generated one after the other), each reply with its relevance list against
the gold references, the analysis with every [i] linked to its reference, the answer, the four rewards and where
the format failed (`app/tabs/arena/handlers.py`, rendered by `app/common/arena_view.py`). Stop ends a generation: the running
stream sees the session's flag at its next status tick and closes it."""
from __future__ import annotations

import threading

from types import SimpleNamespace

import gradio as gr

from evorag_core.reader.arena.prompt import ArenaConfig

from app.common import views, pickers
from app.common.services import Services
from app.common.wiring import on, studio_tab
from app.tabs.arena import handlers as ha
from app.common.session import session_key as _session

__all__ = ["build_tab"]

_stop_flags: dict[str, threading.Event] = {}  # browser session -> its running generation's Stop flag

_IDLE_BASE = "Pick a question, then Generate: the base model's reply appears here."
_IDLE_ADAPTER = "Pick an adapter to see its reply next to the base model's."
_STOPPED = "No reply: the generation was stopped. Generate to start again."


def build_tab(svc: Services) -> gr.Tab:
    """The tab (created inside the caller's `gr.Tabs`); it reloads its pickers when selected."""
    files = pickers.data_choices(svc)
    with studio_tab("ARENA", id="arena", elem_id="evo-arena-tab") as tab:
        with gr.Row():
            with gr.Column(scale=1, min_width=320):
                c = _request_column(svc, files)
            with gr.Column(scale=3):
                busy = gr.State(False)  # a generation is running (Stop clears the columns only then)
                status = gr.HTML(elem_id="evo-arena-status")
                with gr.Row(equal_height=False):
                    with gr.Column(min_width=360):
                        gr.Markdown("#### Base model")
                        base_out = gr.HTML(ha.empty_side(_IDLE_BASE), elem_id="evo-arena-base")
                    with gr.Column(min_width=360):
                        gr.Markdown("#### Adapter")
                        adapter_out = gr.HTML(ha.empty_side(_IDLE_ADAPTER), elem_id="evo-arena-adapter-out")

    def on_data(path):
        info = pickers.load_data(svc, path)
        return gr.Dropdown(choices=info.questions, value=info.questions[0][1] if info.questions else None)

    def on_select(path, question):
        """When the tab is shown: the registry's adapters (new ones appear) and, the first time, the questions."""
        adapters = gr.Dropdown(choices=ha.adapter_choices(svc))
        if question:
            return adapters, gr.skip()
        return adapters, on_data(path)

    def on_run(path, qid, text, chosen, budget, with_demo, request: gr.Request):
        """Streams the generation's status and replies. Stop sets this session's flag; the stream sees it at its
        next status tick (0.5 s), closes the generation (nothing kept) and ends with the stopped view itself, so no
        later update can overwrite what the page says."""
        asked = ha.ArenaRequest(path or "", qid or "", text or "", chosen or "", int(budget or 0), bool(with_demo))
        flag = _stop_flags[_session(request)] = threading.Event()
        generation = ha.arena_generate(svc, asked)
        try:
            for st in generation:
                if flag.is_set():
                    generation.close()  # a side still waiting for the model never starts
                    yield (views.message_html("Stopped: nothing was kept (the reply being written stops at "
                                              "its next token and is discarded).", "warn"),
                           ha.empty_side(_STOPPED), ha.empty_side(_STOPPED), False)
                    return
                yield (st.status, gr.skip() if st.base is None else st.base,
                       gr.skip() if st.adapter is None else st.adapter, True)
            yield gr.skip(), gr.skip(), gr.skip(), False  # done: Stop has nothing to stop any more
        finally:
            flag.set()

    def on_stop(was_running, request: gr.Request):
        flag = _stop_flags.get(_session(request))
        if not was_running or flag is None or flag.is_set():  # nothing runs: keep the replies on show
            return views.message_html("Nothing is generating.", "info")
        flag.set()  # the running stream ends itself with the stopped view
        return gr.skip()

    on(tab.select, on_select, [c.data_dd, c.question_dd], [c.adapter, c.question_dd], api_visibility="private")
    on(c.data_dd.select, on_data, c.data_dd, c.question_dd)
    outputs = [status, base_out, adapter_out, busy]
    on(c.run.click, on_run, [c.data_dd, c.question_dd, c.typed, c.adapter, c.tokens, c.demo], outputs,
                 show_progress="minimal")
    on(c.stop.click, on_stop, busy, status, api_visibility="private", show_progress="hidden")
    return tab


def _request_column(svc: Services, files: list) -> SimpleNamespace:
    """Data file, question (or a typed one), adapter, reply budget, demonstration; Generate and Stop."""
    c = SimpleNamespace()
    c.data_dd = gr.Dropdown(choices=files, value=files[0][1] if files else None, label="Data file",
                          elem_id="evo-arena-data")
    c.question_dd = gr.Dropdown(label="Question (its passages are the references)", choices=[],
                              elem_id="evo-arena-question")
    c.typed = gr.Textbox(label="Or type a question", lines=2, elem_id="evo-arena-typed",
                       placeholder="asked over the picked question's references; no gold, so only the "
                                   "format reward is scored")
    c.adapter = gr.Dropdown(choices=ha.adapter_choices(svc), value=ha.NO_ADAPTER,
                          label="Adapter (second column)", elem_id="evo-arena-adapter")
    with gr.Row():
        c.tokens = gr.Number(value=ArenaConfig().max_new_tokens, precision=0, minimum=1,
                           maximum=ha.MAX_TOKENS_LIMIT, label="Reply budget (tokens)",
                           elem_id="evo-arena-tokens")
        c.demo = gr.Checkbox(value=False, label="Demonstration first", elem_id="evo-arena-demo",
                           info="one worked example before the question (the paper has none)")
    with gr.Row():
        c.run = gr.Button("Generate", variant="primary", elem_id="evo-arena-run")
        c.stop = gr.Button("Stop", variant="stop", elem_id="evo-arena-stop")
    return c