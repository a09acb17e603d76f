"""Layout and event wiring of the studio. No logic here: every event calls a function of `handlers` and maps its
plain result onto components. Errors become a one-line message in the page (a toast), never a stack trace.
"""
from __future__ import annotations

import functools
import inspect
import logging
import time
from typing import Any, Callable

import gradio as gr

from evorag_core.errors import EvoRagError
from evorag_core.scheduler import PRESETS, SCHEDULES, STAGES
from evorag_core.store.records import PAIR_SOURCES, PAIR_STATUSES

from . import handlers, r2ag_view, traces_tab, training_tab, views
from .handlers import traces as trace_handlers
from .handlers import EpisodeView
from .services import Services
from .session import EpisodeSettings

__all__ = ["build_ui", "guard", "on", "error_message"]

log = logging.getLogger(__name__)

EXAMPLE_SCRIPT = '[\n  {"action": "SEARCH", "query": "Ansel Travine"},\n  {"action": "SEARCH", "query": "Mirrow"},\n  {"action": "REFUSE"}\n]'
TIMER_SECONDS = 2.0


def error_message(exc: BaseException) -> str:
    """A one-line, human-readable message for an error raised by a handler."""
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc) or type(exc).__name__


def _report(fn: Callable, exc: BaseException) -> str:
    """Log an error raised by a UI callback and return the one-line message the page shows."""
    if isinstance(exc, (EvoRagError, ValueError, KeyError, OSError)):
        log.info("%s: %s", fn.__name__, exc)
        return error_message(exc)
    log.error("unexpected error in %s", fn.__name__, exc_info=exc)
    return f"internal error ({type(exc).__name__}): {error_message(exc)} — details are in the studio log"


def guard(fn: Callable, n_outputs: int = 1, *, quiet: bool = False) -> Callable:
    """Run a UI callback so that no error reaches the page as a stack trace: on an error the outputs keep what they
    show (gr.skip()), a toast says in one line what went wrong (not for `quiet` timer ticks), and the server log
    has the details. The app keeps running. Generator callbacks (streamed outputs) stay generators."""

    def fail(exc: BaseException) -> Any:
        msg = _report(fn, exc)
        if not quiet:
            gr.Warning(views.esc(msg), title="Error", duration=15)
        if n_outputs == 0:
            return None
        return gr.skip() if n_outputs == 1 else tuple(gr.skip() for _ in range(n_outputs))

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stream(*args: Any, **kwargs: Any) -> Any:
            try:
                yield from fn(*args, **kwargs)
            except Exception as exc:  # UI boundary: report, keep serving
                yield fail(exc)

        return stream

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # UI boundary: report, keep serving
            return fail(exc)
        finally:
            log.debug("%s took %.3f s", fn.__name__, time.perf_counter() - start)

    return wrapper


def on(trigger: Callable, fn: Callable, inputs: Any, outputs: Any, *, quiet: bool = False, **kwargs: Any) -> Any:
    """`trigger(guard(fn), inputs, outputs, **kwargs)` with the guard told how many outputs to leave alone."""
    n = len(outputs) if isinstance(outputs, (list, tuple)) else (0 if outputs is None else 1)
    return trigger(guard(fn, n, quiet=quiet), inputs, outputs, **kwargs)


def build_ui(svc: Services) -> gr.Blocks:
    with gr.Blocks(title="EVO-RAG Studio", fill_width=True, analytics_enabled=False) as demo:
        with gr.Row(equal_height=True):
            gr.Markdown("# EVO-RAG Studio", elem_id="evo-title")
            header = gr.HTML(elem_id="evo-header")
            annotator = gr.Textbox(label="Annotator", placeholder="your name", scale=0, min_width=180,
                                   elem_id="evo-annotator")
        with gr.Tabs() as tabs:
            with gr.Tab("Episode", id="episode"):
                policy_dd = _episode_tab(svc, annotator, demo)
            with gr.Tab("Pairs", id="pairs"):
                _pairs_tab(svc, demo)
            with gr.Tab("Training", id="training"):
                training_tab.build_tab(svc, policy_dd)
            with gr.Tab("Evaluate", id="evaluate"):
                _eval_tab(svc)
            with gr.Tab("R²AG tree", id="r2ag"):
                r2ag_view.build_tab(svc)
            traces_tab.build_tab(svc, demo, tabs)

        header_shown = gr.State("")

        def tick(last):
            html = handlers.header_status(svc)
            return (html, html) if html != last else (gr.skip(), last)

        timer = gr.Timer(TIMER_SECONDS)
        on(timer.tick, tick, header_shown, [header, header_shown], quiet=True, show_progress="hidden",
           concurrency_limit=None, trigger_mode="once", api_visibility="private")

        def on_load(request: gr.Request):
            user = getattr(request, "username", None) if request is not None else None
            box = gr.Textbox(value=user, interactive=False) if user else gr.Textbox()
            return handlers.header_status(svc), box, gr.Dropdown(choices=handlers.policy_options(svc))

        on(demo.load, on_load, None, [header, annotator, policy_dd], api_visibility="private")
    return demo


# ---------------------------------------------------------------------------------------------------------------
def _annotator(typed: str | None, request: gr.Request | None) -> str:
    """Who made an annotation: the logged-in user when the studio requires login, else the name typed in the page."""
    user = getattr(request, "username", None) if request is not None else None
    return user or (typed or "").strip()


def _episode_outputs(view: EpisodeView, shown: dict | None) -> tuple:
    """The episode outputs, with gr.skip() for those equal to what the page already shows (re-rendering a Plotly
    chart is the costliest part of a step in the browser), followed by the new `shown` record."""
    shown = dict(shown or {})
    judged = view.judged_steps
    fresh = {
        "status": view.status, "message": view.message, "steps": view.steps, "weights": view.weights_key,
        "contrib": view.contributions_key, "breakdown": view.breakdown, "passages": view.passages,
        "verdicts": view.verdicts, "judged": tuple(judged), "candidates": view.candidates,
        "choices": tuple(view.candidate_choices),
    }

    def send(key: str, value: Any) -> Any:
        return value if key not in shown or shown[key] != fresh[key] else gr.skip()

    choices = view.candidate_choices
    return (
        send("status", view.status), send("message", view.message), send("steps", view.steps),
        send("weights", view.weights), send("contrib", view.contributions), send("breakdown", view.breakdown),
        send("passages", view.passages), send("verdicts", view.verdicts),
        send("judged", gr.Dropdown(choices=judged, value=judged[-1] if judged else None)),
        send("candidates", view.candidates),
        send("choices", gr.Dropdown(choices=choices, value=None)), send("choices", gr.Dropdown(choices=choices, value=None)),
        fresh,
    )


def _episode_tab(svc: Services, annotator: gr.Textbox, demo: gr.Blocks) -> gr.Dropdown:
    session = gr.State(None)
    shown = gr.State({})  # what the episode outputs show now (see `_episode_outputs`)
    first = handlers.episode_view(None)
    with gr.Row():
        with gr.Column(scale=1, min_width=380):
            files = handlers.data_choices(svc)
            data_dd = gr.Dropdown(choices=files, value=files[0][1], label="Data file (pick, or type a path and Load)",
                                  allow_custom_value=True, elem_id="evo-data")
            with gr.Row():
                upload = gr.UploadButton("Upload data file", file_types=[".jsonl", ".json", ".csv", ".txt"],
                                         size="sm", type="filepath", min_width=120, elem_id="evo-upload")
                load_btn = gr.Button("Load", size="sm", min_width=80, elem_id="evo-load")
            data_info = gr.HTML(elem_id="evo-data-info")
            question_dd = gr.Dropdown(label="Question", choices=[], elem_id="evo-question")
            free_q = gr.Textbox(label="…or a free question over this file's corpus", lines=2,
                                placeholder="typed questions have no gold answer")
            policy_dd = gr.Dropdown(choices=handlers.policy_options(svc), value="oracle", label="Policy",
                                    elem_id="evo-policy")
            script = gr.Code(EXAMPLE_SCRIPT, language="json", label="Script (JSON actions)", visible=False,
                             elem_id="evo-script", lines=6)
            stage = gr.Radio(list(STAGES), value=svc.cfg.reward.stage, label="Stage")
            with gr.Row():
                schedule = gr.Dropdown(list(SCHEDULES), value=svc.cfg.reward.schedule, label="Schedule")
                preset = gr.Dropdown(list(PRESETS), value=svc.cfg.reward.preset, label="Reward preset")
            with gr.Row():
                reset_btn = gr.Button("Reset", variant="primary", elem_id="evo-reset", min_width=70, size="md")
                step_btn = gr.Button("Step", elem_id="evo-step", min_width=70, size="md")
                run_btn = gr.Button("Run to end", elem_id="evo-run", min_width=100, size="md")
        with gr.Column(scale=3):
            status = gr.HTML(first.status)
            message = gr.HTML(first.message, elem_id="evo-message")
            steps = gr.HTML(first.steps, elem_id="evo-steps-box")
            with gr.Row():
                weights = gr.Plot(first.weights, label="Weight schedule", elem_id="evo-weights")
                contrib = gr.Plot(first.contributions, label="Per-step contributions", elem_id="evo-contrib")
            with gr.Row():
                breakdown = gr.HTML(first.breakdown)
                passages = gr.HTML(first.passages, elem_id="evo-passages-box")
            with gr.Accordion("Judge verdicts and refusal override", open=True):
                verdicts = gr.HTML(first.verdicts, elem_id="evo-verdicts-box")
                with gr.Row():
                    judged_dd = gr.Dropdown(label="Step", choices=[], elem_id="evo-judged", scale=1)
                    verdict = gr.Radio(["answerable", "unanswerable"], value="answerable", label="Your verdict",
                                       elem_id="evo-verdict", scale=2)
                    override_btn = gr.Button("Override verdict", elem_id="evo-override", scale=1)
            with gr.Accordion("Sibling candidates and annotation", open=False, elem_id="evo-siblings"):
                with gr.Row():
                    k = gr.Slider(2, 8, value=svc.cfg.policy.siblings, step=1, label="K candidates", elem_id="evo-k")
                    temperature = gr.Slider(0.1, 2.0, value=svc.cfg.policy.temperature, step=0.1, label="Temperature",
                                            elem_id="evo-temp")
                    seed = gr.Number(value=svc.cfg.policy.seed, precision=0, label="Seed", elem_id="evo-seed")
                    horizon = gr.Number(value=6, precision=0, minimum=0, label="Branch horizon (steps)")
                with gr.Row():
                    sample_btn = gr.Button("Sample candidates", elem_id="evo-sample")
                    score_btn = gr.Button("Score branches", elem_id="evo-score")
                candidates = gr.HTML(first.candidates, elem_id="evo-candidates")
                with gr.Row():
                    preferred = gr.Dropdown(label="Preferred", choices=[], elem_id="evo-preferred")
                    rejected = gr.Dropdown(label="Rejected", choices=[], elem_id="evo-rejected")
                    pair_btn = gr.Button("Queue human pair", variant="primary", elem_id="evo-queue-pair")
                pair_msg = gr.HTML(elem_id="evo-pair-msg")

    outputs = [status, message, steps, weights, contrib, breakdown, passages, verdicts, judged_dd, candidates,
               preferred, rejected]
    settings_inputs = [data_dd, question_dd, free_q, policy_dd, stage, schedule, preset, script]

    def settings_of(data, qid, free, pol, stg, sched, pre, scr) -> EpisodeSettings:
        return EpisodeSettings(data or "", qid or "", free or "", pol or "oracle", stg, sched, pre, scr or "")

    def on_data(path):
        info = handlers.load_data(svc, path)
        first_q = info.questions[0][1] if info.questions else None
        return (gr.Dropdown(choices=handlers.data_choices(svc), value=info.path), info.summary_html,
                gr.Dropdown(choices=info.questions, value=first_q))

    def on_upload(file):
        info = handlers.upload_data(svc, file)
        first_q = info.questions[0][1] if info.questions else None
        return (gr.Dropdown(choices=handlers.data_choices(svc), value=info.path), info.summary_html,
                gr.Dropdown(choices=info.questions, value=first_q))

    # One load per user action: picking a listed file (select), or Load for a typed path. Not the box's `input`
    # event: Gradio's dropdown fires it on every blur too, so typing a path and pressing Load loaded it twice
    # (and showed its error twice), and a pick from the list fired it twice.
    data_outputs = [data_dd, data_info, question_dd]
    on(load_btn.click, on_data, data_dd, data_outputs)
    on(data_dd.select, on_data, data_dd, data_outputs)
    on(upload.upload, on_upload, upload, data_outputs)

    def on_reset(shown_now, *args):
        view, sess = handlers.start_episode(svc, settings_of(*args))
        return (*_episode_outputs(view, shown_now), sess)

    def on_step(sess, shown_now):
        view, sess = handlers.step_episode(sess)
        return (*_episode_outputs(view, shown_now), sess)

    def on_run(sess, shown_now):
        for view, sess in handlers.run_steps(sess):
            *outs, shown_now = _episode_outputs(view, shown_now)
            yield (*outs, shown_now, sess)

    def on_override(sess, shown_now, t, v, who, request: gr.Request):
        view, sess = handlers.override_verdict(sess, t, v, _annotator(who, request))
        return (*_episode_outputs(view, shown_now), sess)

    def on_sample(sess, shown_now, kk, temp, sd):
        view, sess = handlers.sample_siblings(sess, kk, temp, sd)
        return (*_episode_outputs(view, shown_now), sess)

    def on_score(sess, shown_now, h):
        view, sess = handlers.score_siblings(sess, h)
        return (*_episode_outputs(view, shown_now), sess)

    def on_pair(sess, i, j, who, request: gr.Request):
        msg, _ = handlers.queue_pair(sess, svc, i, j, _annotator(who, request))
        return views.message_html(msg, "ok")

    ep_outputs = [*outputs, shown, session]
    on(reset_btn.click, on_reset, [shown, *settings_inputs], ep_outputs)
    on(step_btn.click, on_step, [session, shown], ep_outputs, show_progress="minimal")
    on(run_btn.click, on_run, [session, shown], ep_outputs)
    on(override_btn.click, on_override, [session, shown, judged_dd, verdict, annotator], ep_outputs)
    on(sample_btn.click, on_sample, [session, shown, k, temperature, seed], ep_outputs)
    on(score_btn.click, on_score, [session, shown, horizon], ep_outputs)
    on(pair_btn.click, on_pair, [session, preferred, rejected, annotator], pair_msg)
    policy_dd.change(lambda p: gr.Code(visible=p == "script"), policy_dd, script, api_visibility="private")
    def on_page(path, request: gr.Request):
        """The page URL: ?data=FILE&question=ID loads that file and selects the question (a bad link: the default
        file, and a message saying what was wrong)."""
        link = trace_handlers.url_params(request)
        if "data" not in link and "question" not in link:
            return on_data(path)
        try:
            info, qid = trace_handlers.question_link(svc, link.get("data"), link.get("question"))
        except (EvoRagError, ValueError, KeyError, OSError) as exc:
            dd, info_html, questions = on_data(path)
            return dd, views.message_html(f"The link was not opened: {error_message(exc)}", "error") + info_html, questions
        note = views.message_html(f"Opened from a link: question {qid}; press Reset to run it.", "info")
        return (gr.Dropdown(choices=handlers.data_choices(svc), value=info.path), info.summary_html + note,
                gr.Dropdown(choices=info.questions, value=qid))

    on(demo.load, on_page, data_dd, data_outputs, api_visibility="private")
    return policy_dd


def _pairs_tab(svc: Services, demo: gr.Blocks) -> None:
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
        prompt = gr.Textbox(label="Prompt (state)", lines=4, max_lines=12, interactive=False)
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
        def run(pid, c, r, s, *f):
            msg = fn(pid, c, r, s)
            return (views.message_html(msg, "ok"), *show(*f))
        return run

    on(save.click, act(lambda pid, c, r, s: handlers.edit_pair(svc, pid, c, r, s)),
       [pair_dd, chosen, rejected, pair_stage, *filters], [edit_msg, *outs])
    on(discard.click, act(lambda pid, c, r, s: handlers.discard_pair(svc, pid)),
       [pair_dd, chosen, rejected, pair_stage, *filters], [edit_msg, *outs])
    on(restore.click, act(lambda pid, c, r, s: handlers.restore_pair(svc, pid)),
       [pair_dd, chosen, rejected, pair_stage, *filters], [edit_msg, *outs])


def _eval_tab(svc: Services) -> None:
    runs = gr.State({})
    with gr.Row():
        files = handlers.data_choices(svc)
        data_dd = gr.Dropdown(choices=files, value=files[0][1], label="Data file", allow_custom_value=True, scale=2)
        method = gr.Dropdown(handlers.eval_method_options(svc), value="oracle", label="Method", scale=2,
                             elem_id="evo-eval-method")
        start = gr.Number(value=0, precision=0, minimum=0, label="From question #", scale=1)
        count = gr.Number(value=10, precision=0, minimum=1, label="How many", scale=1, elem_id="evo-eval-count")
        run_btn = gr.Button("Run evaluation", variant="primary", scale=1, elem_id="evo-eval-run")
    script = gr.Code(EXAMPLE_SCRIPT, language="json", label="Script (for the script method)", lines=4, visible=False,
                     elem_id="evo-eval-script")
    summary = gr.HTML(handlers.eval_summary({}), elem_id="evo-eval-summary-box")
    gr.Markdown("### Paired bootstrap between two runs")
    with gr.Row():
        run_a = gr.Dropdown(label="Run A", choices=[])
        run_b = gr.Dropdown(label="Run B", choices=[])
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
        names = list(new_runs)
        return (new_runs, handlers.eval_summary(new_runs), gr.Dropdown(choices=names, value=names[0]),
                gr.Dropdown(choices=names, value=names[-1]), gr.Dropdown(choices=names, value=run.name),
                gr.Dropdown(choices=handlers.eval_questions(new_runs, run.name), value=None))

    method.change(lambda m: gr.Code(visible=m == "script"), method, script, api_visibility="private")
    on(run_btn.click, on_run, [runs, data_dd, method, script, start, count],
       [runs, summary, run_a, run_b, run_pick, q_pick])
    on(compare.click, lambda st, a, b, n: handlers.compare_runs(st, a, b, n), [runs, run_a, run_b, resamples], boot)
    on(run_pick.input, lambda st, name: gr.Dropdown(choices=handlers.eval_questions(st, name), value=None),
       [runs, run_pick], q_pick)
    on(open_btn.click, lambda st, name, q: handlers.drill_down(svc, st, name, q), [runs, run_pick, q_pick],
       [trace_head, trace_steps, trace_plot])
    on(q_pick.input, lambda st, name, q: handlers.drill_down(svc, st, name, q), [runs, run_pick, q_pick],
       [trace_head, trace_steps, trace_plot])
