"""The Traces tab: every stored episode (studio sessions, evaluation runs, rollouts) in a server-side paginated,
filterable table; a row (or a typed id, or the page URL `?episode=ID`) opens the read-only trace below it, drawn
with the Episode view's renderers. Layout and wiring only: the work is in `handlers.traces` and `trace_view`.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gradio as gr

from evorag_core.env.scheduler import STAGES
from evorag_core.store import EPISODE_SOURCES, OUTCOMES, TRACE_ORDERS

from app.common import views
from app.common.services import Services
from app.common.wiring import on, studio_tab
from app.tabs.traces import handlers as th

__all__ = ["build_tab"]

_EMPTY_TRACE = '<div class="evo-empty">Pick a row above (or type a trace id and press Open) to see its trace.</div>'

# after the page load opened `?episode=ID`: scroll the opened trace (or the link's error message) into view, once
# the page shows it (the load's outputs are drawn asynchronously: polled for up to 10 s)
SCROLL_TO_TRACE_JS = """() => {
  const wanted = new URLSearchParams(window.location.search).get('episode');
  if (wanted === null) return;
  let tries = 0;
  const go = () => {
    const head = document.querySelector('#evo-trace-head');
    const msg = document.querySelector('#evo-trace-msg');
    const target = head && head.dataset.episode === wanted.trim() ? document.querySelector('#evo-trace-head-box')
      : (msg && msg.innerText.trim() ? msg : null);
    if (target) target.scrollIntoView({block: 'start'});
    else if (tries++ < 100) setTimeout(go, 100);
  };
  go();
}"""


def _choices(values: tuple[str, ...]) -> list[str]:
    return ["all", *values]


def build_tab(svc: Services, demo: gr.Blocks, tabs: gr.Tabs) -> gr.Tab:
    """The tab (created inside `tabs`); its page-load hook opens `?episode=ID`, selects the tab and scrolls the
    trace into view."""
    with studio_tab("Traces", id="traces", elem_id="evo-traces-tab") as tab:
        c = SimpleNamespace(ids=gr.State([]), page=gr.State(1))
        _filters_section(c)
        _list_section(c)
        _trace_section(c)
    _wire(svc, c, demo, tabs, tab)
    return tab


def _filters_section(c: SimpleNamespace) -> None:
    """The filter boxes: data file, policy, adapter, stage, source, run; outcome, F1 and return ranges, annotator,
    days."""
    with gr.Row():
        c.dataset = gr.Dropdown(["all"], value="all", label="Data file", allow_custom_value=True,
                              elem_id="evo-tf-data")
        c.policy = gr.Dropdown(["all"], value="all", label="Method / policy", allow_custom_value=True,
                             elem_id="evo-tf-policy")
        c.adapter = gr.Dropdown([("all", "all")], value="all", label="Adapter", allow_custom_value=True,
                              elem_id="evo-tf-adapter")
        c.stage = gr.Dropdown(_choices(STAGES), value="all", label="Stage", elem_id="evo-tf-stage")
        c.source = gr.Dropdown(_choices(EPISODE_SOURCES), value="all", label="Source", elem_id="evo-tf-source")
        c.run = gr.Dropdown(["all"], value="all", label="Run", allow_custom_value=True, elem_id="evo-tf-run")
    with gr.Row():
        c.outcome = gr.Dropdown(_choices(OUTCOMES), value="all", label="Outcome", elem_id="evo-tf-outcome")
        # text boxes, not gr.Number: an empty range end means "any", and this Gradio sends an empty Number as 0
        c.f1_min = gr.Textbox(label="F1 from", placeholder="any (0-1)", elem_id="evo-tf-f1min")
        c.f1_max = gr.Textbox(label="F1 to", placeholder="any (0-1)", elem_id="evo-tf-f1max")
        c.ret_min = gr.Textbox(label="Return from", placeholder="any", elem_id="evo-tf-retmin")
        c.ret_max = gr.Textbox(label="Return to", placeholder="any", elem_id="evo-tf-retmax")
        c.annotator = gr.Dropdown(["all"], value="all", label="Annotator (override by)", allow_custom_value=True,
                                elem_id="evo-tf-annotator")
        c.date_from = gr.Textbox(label="From day (YYYY-MM-DD)", placeholder="2026-11-01", elem_id="evo-tf-from")
        c.date_to = gr.Textbox(label="To day (YYYY-MM-DD)", placeholder="2026-11-30", elem_id="evo-tf-to")


def _list_section(c: SimpleNamespace) -> None:
    """Text search and order, paging, open by id, the table of traces."""
    with gr.Row(equal_height=True):
        c.text = gr.Textbox(label="Search the question text (or a question id)", scale=4, elem_id="evo-tf-text")
        c.order = gr.Dropdown(list(TRACE_ORDERS), value="newest", label="Order", scale=1, elem_id="evo-tf-order")
        c.search = gr.Button("Search", variant="primary", scale=0, min_width=100, elem_id="evo-traces-search")
    with gr.Row(equal_height=True):
        c.prev_btn = gr.Button("◀ Previous", size="sm", scale=0, min_width=110, elem_id="evo-traces-prev")
        c.next_btn = gr.Button("Next ▶", size="sm", scale=0, min_width=110, elem_id="evo-traces-next")
        c.summary = gr.HTML(elem_id="evo-traces-summary")
        c.open_id = gr.Number(None, precision=0, label="Trace #", scale=0, min_width=110,
                            elem_id="evo-trace-id")
        c.open_btn = gr.Button("Open", size="sm", scale=0, min_width=80, elem_id="evo-trace-open")
    c.table = gr.Dataframe(headers=th.TRACE_COLUMNS, value=[], interactive=False, wrap=True, max_height=520,
                         elem_id="evo-traces-table", column_widths=["4%", "8%", "5%", "6%", "8%", "18%", "9%",
                                                                     "6%", "7%", "4%", "8%", "4%", "4%", "4%", "5%"])


def _trace_section(c: SimpleNamespace) -> None:
    """The opened trace: its head, steps, weight and contribution charts, passages and verdicts."""
    c.message = gr.HTML(elem_id="evo-trace-msg")
    c.head = gr.HTML(_EMPTY_TRACE, elem_id="evo-trace-head-box")
    c.steps = gr.HTML(elem_id="evo-trace-steps-box")
    with gr.Row():
        c.weights = gr.Plot(views.empty_figure("Weight schedule", "open a trace to see it"), label="Weight schedule",
                          elem_id="evo-trace-weights")
        c.contrib = gr.Plot(views.empty_figure("Signal contributions w·r per step", "open a trace to see it"),
                          label="Per-step contributions", elem_id="evo-trace-contrib")
    with gr.Row():
        c.passages = gr.HTML(elem_id="evo-trace-passages")
        c.verdicts = gr.HTML(elem_id="evo-trace-verdicts")


def _wire(svc: Services, c: SimpleNamespace, demo: gr.Blocks, tabs: gr.Tabs, tab: gr.Tab) -> None:
    """Search (any filter), paging, a row or an id opened; on select the facets; on page load `?episode=ID`."""
    c.filters = [c.dataset, c.policy, c.adapter, c.stage, c.source, c.run, c.outcome, c.f1_min, c.f1_max, c.ret_min, c.ret_max, c.annotator,
               c.date_from, c.date_to, c.text, c.order]
    c.list_outs = [c.table, c.ids, c.summary, c.page]
    c.trace_outs = [c.message, c.head, c.steps, c.weights, c.contrib, c.passages, c.verdicts]

    def show_page(wanted: int, *values: Any) -> tuple:
        try:
            flt = th.trace_filter(*values)
        except ValueError as exc:  # a malformed filter: say which, in the page; the table is emptied
            return [], [], views.message_html(f"Filter not applied: {exc}", "error"), 1
        view = th.list_traces(svc, flt, wanted)
        return view.rows, view.ids, view.summary, view.page

    def first_page(*values: Any) -> tuple:
        return show_page(1, *values)

    def facets_and_page(*values: Any) -> tuple:
        f = th.trace_facets(svc)
        return (gr.Dropdown(choices=_choices(f.datasets)), gr.Dropdown(choices=_choices(f.policies)),
                gr.Dropdown(choices=th.adapter_choices(f)), gr.Dropdown(choices=_choices(f.runs)),
                gr.Dropdown(choices=_choices(f.annotators)), *show_page(1, *values))

    def opened(view) -> tuple:
        return ("", view.head, view.steps, view.weights, view.contributions, view.passages, view.verdicts)

    def failed(msg: str) -> tuple:
        return (views.message_html(msg, "error"), _EMPTY_TRACE, "", gr.skip(), gr.skip(), "", "")

    def open_by_id(value: Any, request: gr.Request) -> tuple:
        try:
            return opened(th.open_trace(svc, value, th.link_base(request)))
        except (ValueError, KeyError) as exc:
            return failed(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))

    def open_row(row_ids: list[int], evt: gr.SelectData, request: gr.Request) -> tuple:
        row = evt.index[0] if isinstance(evt.index, (list, tuple)) else evt.index
        if row is None or not 0 <= int(row) < len(row_ids):
            raise ValueError("that row is no longer in the table; search again")
        return open_by_id(row_ids[int(row)], request)

    def on_load(values: dict, request: gr.Request) -> tuple:
        """The page URL: ?episode=ID opens that trace and selects this tab."""
        listed = facets_and_page(*(values[box] for box in c.filters))
        wanted = th.url_params(request).get("episode")
        if wanted is None:
            return (gr.skip(), *listed, *(gr.skip() for _ in c.trace_outs))
        return (gr.Tabs(selected="traces"), *listed, *open_by_id(wanted, request))

    c.facet_outs = [c.dataset, c.policy, c.adapter, c.run, c.annotator]
    on(c.search.click, first_page, c.filters, c.list_outs)
    on(c.text.submit, first_page, c.filters, c.list_outs)
    for box in (c.dataset, c.policy, c.adapter, c.stage, c.source, c.run, c.outcome, c.annotator, c.order):
        on(box.input, first_page, c.filters, c.list_outs)
    for box in (c.f1_min, c.f1_max, c.ret_min, c.ret_max, c.date_from, c.date_to):
        on(box.submit, first_page, c.filters, c.list_outs)
    on(c.prev_btn.click, lambda p, *v: show_page(max(1, int(p) - 1), *v), [c.page, *c.filters], c.list_outs)
    on(c.next_btn.click, lambda p, *v: show_page(int(p) + 1, *v), [c.page, *c.filters], c.list_outs)
    on(c.table.select, open_row, c.ids, c.trace_outs)
    on(c.open_btn.click, open_by_id, c.open_id, c.trace_outs)
    on(c.open_id.submit, open_by_id, c.open_id, c.trace_outs)
    on(tab.select, facets_and_page, c.filters, [*c.facet_outs, *c.list_outs], api_visibility="private")
    loaded = on(demo.load, on_load, set(c.filters), [tabs, *c.facet_outs, *c.list_outs, *c.trace_outs],
                api_visibility="private")
    loaded.then(None, None, None, js=SCROLL_TO_TRACE_JS, api_visibility="private")  # a deep link shows its trace
