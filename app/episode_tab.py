"""Studio tab: Episode. Layout and event wiring only; every value comes from `handlers`.

Reset / Step / Run to end drive the episode; for a running episode the "Act yourself" row lets a person take the
next step instead of the policy (SEARCH with a typed query, BACKTRACK, ANSWER with a typed answer, REFUSE), see the
policy's proposal first, and queue a human-correction pair; Step or Run to end then hands back to the policy.
Messages are cleared on Reset and when the question changes; a Reset that loads the model or an adapter says so
while it loads. The queued-pairs count is shown under the buttons. Score branches shows a progress bar (branch i/K);
Stop scoring ends it at the next policy step with no branch return kept.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from evorag_core.env.actions import ACTION_NAMES
from evorag_core.errors import EvoRagError
from evorag_core.env.scheduler import PRESETS, SCHEDULES, STAGES

from app import handlers, roles, views
from app.handlers import annotate as annotate_handlers
from app.handlers import human as handlers_human
from app.handlers import EpisodeView
from app.handlers import traces as trace_handlers
from app.services import Services
from app.wiring import EXAMPLE_SCRIPT, annotator_name, error_message, on
from app.session import EpisodeSettings

__all__ = ["EpisodeTab", "Reload", "build_tab"]

_score_flags: dict[str, threading.Event] = {}  # browser session -> its running sibling scoring's Stop flag


def _browser(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or ""


@dataclass(frozen=True)
class Reload:
    """How a tab reloads its data: `fn(*inputs)` gives new values for `outputs` (wired to tab selects and to the
    actions of other tabs that change the data)."""

    fn: Callable[..., Any]
    inputs: list
    outputs: list

    def wire(self, trigger: Callable) -> Any:

        return on(trigger, self.fn, self.inputs, self.outputs, quiet=True, show_progress="hidden",
                  api_visibility="private")


@dataclass(frozen=True)
class EpisodeTab:
    policy_dd: gr.Dropdown
    pairs_count: gr.HTML  # the queued-pairs line (refreshed with the header)
    reload: Reload  # on select: the policy list (adapters) and the pairs count
    pair_events: tuple  # events that queue pairs (the Pairs tab reloads after them)


def _outputs(view: EpisodeView, shown: dict | None) -> tuple:
    """The episode outputs, with gr.skip() for those equal to what the page already shows (re-rendering a Plotly
    chart is the costliest part of a step in the browser), followed by the new `shown` record. The pair message
    is cleared by every episode action."""
    shown = dict(shown or {})
    judged = view.judged_steps
    fresh = {
        "status": view.status, "message": view.message, "steps": view.steps, "weights": view.weights_key,
        "contrib": view.contributions_key, "breakdown": view.breakdown, "passages": view.passages,
        "verdicts": view.verdicts, "judged": tuple(judged), "candidates": view.candidates,
        "choices": tuple(view.candidate_choices), "running": view.running, "proposal": view.proposal, "pair_msg": "",
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
        send("running", gr.Column(visible=view.running)), send("proposal", view.proposal), send("pair_msg", ""),
        fresh,
    )


def _skip_all(n: int) -> tuple:
    return tuple(gr.skip() for _ in range(n))


def build_tab(svc: Services, annotator: gr.Textbox, demo: gr.Blocks) -> EpisodeTab:

    session = gr.State(None)
    shown = gr.State({})  # what the episode outputs show now (see `_outputs`)
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
            pairs_count = gr.HTML(elem_id="evo-ep-pairs-box")
        with gr.Column(scale=3):
            status = gr.HTML(first.status)
            message = gr.HTML(first.message, elem_id="evo-message")
            with gr.Column(visible=False, variant="panel", elem_id="evo-human-row") as human_row:
                with gr.Row():
                    human_act = gr.Radio(list(ACTION_NAMES), value="SEARCH", label="Act yourself (instead of the policy)",
                                         elem_id="evo-human-action", scale=3)
                    human_arg = gr.Textbox(label="Query (SEARCH) or answer (ANSWER)", lines=1, max_lines=3, scale=4,
                                           placeholder="e.g. Ansel Travine birthplace", elem_id="evo-human-arg")
                    with gr.Column(scale=2, min_width=170):
                        human_btn = gr.Button("Take this step", variant="primary", size="sm",
                                              elem_id="evo-human-step")
                        propose_btn = gr.Button("Agent's proposal", size="sm", elem_id="evo-propose")
                with gr.Row(equal_height=True):
                    proposal = gr.HTML(elem_id="evo-proposal-box")
                    human_queue = gr.Checkbox(False, label="queue a human-correction pair (mine over the policy's)",
                                              elem_id="evo-human-queue", scale=0, min_width=330)
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
                    score_stop = gr.Button("Stop scoring", variant="stop", elem_id="evo-score-stop")
                score_msg = gr.HTML(elem_id="evo-score-msg")
                candidates = gr.HTML(first.candidates, elem_id="evo-candidates")
                with gr.Row():
                    preferred = gr.Dropdown(label="Preferred", choices=[], elem_id="evo-preferred")
                    rejected = gr.Dropdown(label="Rejected", choices=[], elem_id="evo-rejected")
                    pair_btn = gr.Button("Queue human pair", variant="primary", elem_id="evo-queue-pair")
                    send_btn = gr.Button("Send this state to the annotation queue", elem_id="evo-send-state")
                pair_msg = gr.HTML(elem_id="evo-pair-msg")

    outputs = [status, message, steps, weights, contrib, breakdown, passages, verdicts, judged_dd, candidates,
               preferred, rejected, human_row, proposal, pair_msg]
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

    def on_question(shown_now):
        """A new question (or data file): the last episode's messages no longer apply."""
        return "", "", {**(shown_now or {}), "message": "", "pair_msg": ""}

    on(question_dd.change, on_question, shown, [message, pair_msg, shown], show_progress="hidden",
       api_visibility="private")

    n_out = len(outputs) + 2  # + shown, session

    def on_reset(shown_now, *args):
        settings = settings_of(*args)
        note = handlers.loading_note(svc, settings)
        if note:  # what this Reset waits for, shown while it loads
            skipped = list(_skip_all(n_out))
            skipped[1] = views.message_html(note, "info")
            yield tuple(skipped)
        view, sess = handlers.start_episode(svc, settings, note)
        yield (*_outputs(view, shown_now), sess)

    def on_step(sess, shown_now):
        view, sess = handlers.step_episode(sess)
        return (*_outputs(view, shown_now), sess)

    def on_run(sess, shown_now):
        for view, sess in handlers.run_steps(sess):
            *outs, shown_now = _outputs(view, shown_now)
            yield (*outs, shown_now, sess)

    def _annotator(who: str | None, request: gr.Request | None) -> str:
        return annotator_name(who, request, svc.cfg.studio.max_question_chars)

    def on_override(sess, shown_now, t, v, who, request: gr.Request):
        view, sess = handlers.override_verdict(sess, t, v, _annotator(who, request))
        return (*_outputs(view, shown_now), sess)

    def on_sample(sess, shown_now, kk, temp, sd):
        view, sess = handlers.sample_siblings(sess, kk, temp, sd)
        return (*_outputs(view, shown_now), sess)

    def on_score(sess, shown_now, h, request: gr.Request, progress=gr.Progress()):
        """Scores the branches with a progress bar (branch i/K); Stop scoring sets this session's flag, read at the
        next policy step: no branch return is kept."""
        flag = _score_flags[_browser(request)] = threading.Event()
        try:
            view, sess = handlers.score_siblings(
                sess, h, lambda done, total: progress((done, total), desc=f"branch {done}/{total} scored"), flag)
        finally:
            flag.set()
        return ("", *_outputs(view, shown_now), sess)

    def on_score_stop(request: gr.Request):
        flag = _score_flags.get(_browser(request))
        if flag is None or flag.is_set():
            return views.message_html("Nothing is being scored.", "info")
        flag.set()
        return views.message_html("Stopping the scoring at the next policy step…", "warn")

    def on_pair(sess, shown_now, i, j, who, request: gr.Request):
        msg, _ = handlers.queue_pair(sess, svc, i, j, _annotator(who, request))
        html = views.message_html(msg, "ok")
        return html, {**(shown_now or {}), "pair_msg": html}, handlers.pairs_count_html(svc)

    def on_send(sess, shown_now, request: gr.Request):
        roles.require(svc, request, "queue")
        item_id = annotate_handlers.queue_item(svc, handlers_human.state_item(sess, svc))
        html = views.message_html(f"Queued annotation item #{item_id}: it is in the Annotate tab's queue.", "ok")
        return html, {**(shown_now or {}), "pair_msg": html}

    def on_propose(sess, shown_now):
        view, name, arg = handlers.propose_action(sess)
        return (*_outputs(view, shown_now), sess, name, arg)

    def on_human(sess, shown_now, name, arg, queue, who, request: gr.Request):
        view, sess, _ = handlers.human_step(sess, svc, name, arg, _annotator(who, request), bool(queue))
        return (*_outputs(view, shown_now), sess, "", handlers.pairs_count_html(svc))

    ep_outputs = [*outputs, shown, session]
    on(reset_btn.click, on_reset, [shown, *settings_inputs], ep_outputs)
    on(step_btn.click, on_step, [session, shown], ep_outputs, show_progress="minimal")
    on(run_btn.click, on_run, [session, shown], ep_outputs)
    on(override_btn.click, on_override, [session, shown, judged_dd, verdict, annotator], ep_outputs)
    on(sample_btn.click, on_sample, [session, shown, k, temperature, seed], ep_outputs)
    on(score_btn.click, on_score, [session, shown, horizon], [score_msg, *ep_outputs])
    on(score_stop.click, on_score_stop, None, score_msg, api_visibility="private", show_progress="hidden")
    on(propose_btn.click, on_propose, [session, shown], [*ep_outputs, human_act, human_arg], show_progress="minimal")
    human_done = on(human_btn.click, on_human, [session, shown, human_act, human_arg, human_queue, annotator],
                    [*ep_outputs, human_arg, pairs_count], show_progress="minimal")
    on(send_btn.click, on_send, [session, shown], [pair_msg, shown])
    pair_done = on(pair_btn.click, on_pair, [session, shown, preferred, rejected, annotator],
                   [pair_msg, shown, pairs_count])
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

    def reload():
        return gr.Dropdown(choices=handlers.policy_options(svc)), handlers.pairs_count_html(svc)

    return EpisodeTab(policy_dd, pairs_count, Reload(reload, [], [policy_dd, pairs_count]), (human_done, pair_done))
