"""The Evaluate tab: evaluation runs over a data file, a paired bootstrap between two runs, and a per-question
drill-down into the stored trace. Layout and wiring only: every event calls `app.tabs.evaluate.handlers`."""
from __future__ import annotations

import gradio as gr

from app.common import views
from app.common.pickers import data_choices
from app.common.services import Services
from app.common.wiring import EXAMPLE_SCRIPT, Reload, on
from app.tabs.evaluate import handlers

__all__ = ["build_tab"]


def build_tab(svc: Services) -> Reload:
    """The Evaluate tab's content: run a method over a data file's questions, a paired bootstrap between two runs,
    and a question's trace; the returned Reload refreshes the data files, methods and runs when the tab is
    selected."""
    runs = gr.State({})
    with gr.Row():
        files = data_choices(svc)
        data_dd = gr.Dropdown(choices=files, value=files[0][1], label="Data file", allow_custom_value=True, scale=2)
        method = gr.Dropdown(handlers.eval_method_options(svc), value="oracle", label="Method", scale=2,
                             elem_id="evo-eval-method")
        start = gr.Number(value=0, precision=0, minimum=0, label="From question #", scale=1)
        count = gr.Number(value=10, precision=0, minimum=1, label="How many", scale=1, elem_id="evo-eval-count")
        run_btn = gr.Button("Run evaluation", variant="primary", scale=1, elem_id="evo-eval-run")
    script = gr.Code(EXAMPLE_SCRIPT, language="json", label="Script (for the script method)", lines=4, visible=False,
                     elem_id="evo-eval-script")
    summary = gr.HTML('<div class="evo-empty">Reading the stored runs…</div>', elem_id="evo-eval-summary-box")
    gr.Markdown("### Paired bootstrap between two runs")
    with gr.Row():
        run_a = gr.Dropdown(label="Run A", choices=[], elem_id="evo-eval-run-a")
        run_b = gr.Dropdown(label="Run B", choices=[], elem_id="evo-eval-run-b")
        resamples = gr.Number(value=10_000, precision=0, minimum=100, label="Resamples")
        compare = gr.Button("Compare", scale=0, min_width=120, elem_id="evo-compare")
    boot = gr.HTML(elem_id="evo-bootstrap-box")
    gr.Markdown("### Per-question drill-down")
    with gr.Row():
        run_pick = gr.Dropdown(label="Run", choices=[], elem_id="evo-eval-run-pick")
        q_pick = gr.Dropdown(label="Question", choices=[], elem_id="evo-eval-question")
        open_btn = gr.Button("Open trace", scale=0, min_width=120)
    trace_head = gr.HTML()
    trace_steps = gr.HTML(elem_id="evo-trace-box")
    trace_plot = gr.Plot(views.empty_figure("Signal contributions w·r per step", "open a trace to see it"),
                         label="Contributions")

    def on_run(state, data, m, scr, s, c, progress=gr.Progress()):
        def report(done: int, total: int, res) -> None:
            progress((done, total), desc=f"{res.question_id}: EM {res.em:.0f}")

        new_runs, run = handlers.run_eval(svc, state, data, m, scr or "", s, c, report)
        names = handlers.run_names(svc, new_runs)
        return (new_runs, handlers.eval_summary(svc, new_runs), gr.Dropdown(choices=names, value=names[0]),
                gr.Dropdown(choices=names, value=names[-1]), gr.Dropdown(choices=names, value=run.name),
                gr.Dropdown(choices=handlers.eval_questions(svc, new_runs, run.name), value=None))

    method.change(lambda m: gr.Code(visible=m == "script"), method, script, api_visibility="private")
    on(run_btn.click, on_run, [runs, data_dd, method, script, start, count],
       [runs, summary, run_a, run_b, run_pick, q_pick])
    on(compare.click, lambda st, a, b, n: handlers.compare_runs(svc, st, a, b, n), [runs, run_a, run_b, resamples],
       boot)
    on(run_pick.input, lambda st, name: gr.Dropdown(choices=handlers.eval_questions(svc, st, name), value=None),
       [runs, run_pick], q_pick)
    on(open_btn.click, lambda st, name, q: handlers.drill_down(svc, st, name, q), [runs, run_pick, q_pick],
       [trace_head, trace_steps, trace_plot])
    on(q_pick.input, lambda st, name, q: handlers.drill_down(svc, st, name, q), [runs, run_pick, q_pick],
       [trace_head, trace_steps, trace_plot])

    def reload(state):
        """On select: the data files (uploads) and the methods (new adapters) offered, and the runs (the store's,
        those of earlier studios included)."""
        names = handlers.run_names(svc, state)
        return (gr.Dropdown(choices=data_choices(svc)), gr.Dropdown(choices=handlers.eval_method_options(svc)),
                handlers.eval_summary(svc, state), *(gr.Dropdown(choices=names) for _ in range(3)))

    return Reload(reload, [runs], [data_dd, method, summary, run_a, run_b, run_pick])
