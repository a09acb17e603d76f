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
from types import SimpleNamespace
from typing import Any, Callable

import gradio as gr

from evorag_core.env.actions import ACTION_NAMES
from evorag_core.errors import EvoRagError
from evorag_core.env.scheduler import PRESETS, SCHEDULES, STAGES

from app.common import links, pickers, roles, views
from app.common.services import Services
from app.common.session import EpisodeSettings
from app.common.wiring import EXAMPLE_SCRIPT, Reload, annotator_name, error_message, on
from app.tabs.episode import handlers, human_handlers
from app.tabs.episode.handlers import EpisodeView

__all__ = ["EpisodeTab", "build_tab"]

_score_flags: dict[str, threading.Event] = {}  # browser session -> its running sibling scoring's Stop flag

# The proposal fills the query box unless the person changed it after asking (then their text stays); the box
# records the proposal it was offered (data-proposal), which is how a test knows this step ran.
KEEP_TYPED_JS = """(proposed, atAsk, now) => {
  const box = document.getElementById('evo-human-arg');
  if (box) box.dataset.proposal = proposed ?? '';
  return (now ?? '') === (atAsk ?? '') ? proposed : now;
}"""


def _browser(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or ""


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
    """The Episode tab's content (inside its gr.Tab): the settings column and the episode's panels, then their
    events (data files, the episode's actions, acting in the policy's place and queueing pairs, the page URL)."""
    c = SimpleNamespace(session=gr.State(None), shown=gr.State({}))  # shown: what the outputs show now (`_outputs`)
    first = handlers.episode_view(None)
    with gr.Row():
        with gr.Column(scale=1, min_width=380):
            _settings_column(svc, c)
        with gr.Column(scale=3):
            c.status = gr.HTML(first.status)
            c.message = gr.HTML(first.message, elem_id="evo-message")
            _human_row(c)
            _episode_panels(c, first)
            _verdicts_section(c, first)
            _siblings_section(svc, c, first)
    c.outputs = [c.status, c.message, c.steps, c.weights, c.contrib, c.breakdown, c.passages, c.verdicts, c.judged_dd,
                 c.candidates, c.preferred, c.rejected, c.human_row, c.proposal, c.pair_msg]
    on_data = _wire_data(svc, c, demo)
    _wire_episode(svc, c, annotator)
    human_done, pair_done = _wire_human_and_pairs(svc, c, annotator)
    c.policy_dd.change(lambda p: gr.Code(visible=p == "script"), c.policy_dd, c.script, api_visibility="private")
    _wire_link(svc, c, demo, on_data)

    def reload():
        return gr.Dropdown(choices=pickers.policy_options(svc)), human_handlers.pairs_count_html(svc)

    return EpisodeTab(c.policy_dd, c.pairs_count, Reload(reload, [], [c.policy_dd, c.pairs_count]),
                      (human_done, pair_done))


def _settings_column(svc: Services, c: SimpleNamespace) -> None:
    """The left column: data file (pick, type, upload), question, policy, stage, schedule, preset, the buttons."""
    files = pickers.data_choices(svc)
    c.data_dd = gr.Dropdown(choices=files, value=files[0][1], label="Data file (pick, or type a path and Load)",
                            allow_custom_value=True, elem_id="evo-data")
    with gr.Row():
        c.upload = gr.UploadButton("Upload data file", file_types=[".jsonl", ".json", ".csv", ".txt"],
                                   size="sm", type="filepath", min_width=120, elem_id="evo-upload")
        c.load_btn = gr.Button("Load", size="sm", min_width=80, elem_id="evo-load")
    c.data_info = gr.HTML(elem_id="evo-data-info")
    c.question_dd = gr.Dropdown(label="Question", choices=[], elem_id="evo-question")
    c.free_q = gr.Textbox(label="…or a free question over this file's corpus", lines=2,
                          placeholder="typed questions have no gold answer")
    c.policy_dd = gr.Dropdown(choices=pickers.policy_options(svc), value="oracle", label="Policy",
                              elem_id="evo-policy")
    c.script = gr.Code(EXAMPLE_SCRIPT, language="json", label="Script (JSON actions)", visible=False,
                       elem_id="evo-script", lines=6)
    c.stage = gr.Radio(list(STAGES), value=svc.cfg.reward.stage, label="Stage")
    with gr.Row():
        c.schedule = gr.Dropdown(list(SCHEDULES), value=svc.cfg.reward.schedule, label="Schedule")
        c.preset = gr.Dropdown(list(PRESETS), value=svc.cfg.reward.preset, label="Reward preset")
    with gr.Row():
        c.reset_btn = gr.Button("Reset", variant="primary", elem_id="evo-reset", min_width=70, size="md")
        c.step_btn = gr.Button("Step", elem_id="evo-step", min_width=70, size="md")
        c.run_btn = gr.Button("Run to end", elem_id="evo-run", min_width=100, size="md")
    c.pairs_count = gr.HTML(elem_id="evo-ep-pairs-box")


def _human_row(c: SimpleNamespace) -> None:
    """"Act yourself": shown while an episode runs."""
    with gr.Column(visible=False, variant="panel", elem_id="evo-human-row") as c.human_row:
        with gr.Row():
            c.human_act = gr.Radio(list(ACTION_NAMES), value="SEARCH", label="Act yourself (instead of the policy)",
                                   elem_id="evo-human-action", scale=3)
            c.human_arg = gr.Textbox(label="Query (SEARCH) or answer (ANSWER)", lines=1, max_lines=3, scale=4,
                                     placeholder="e.g. Ansel Travine birthplace", elem_id="evo-human-arg")
            with gr.Column(scale=2, min_width=170):
                c.human_btn = gr.Button("Take this step", variant="primary", size="sm", elem_id="evo-human-step")
                c.propose_btn = gr.Button("Agent's proposal", size="sm", elem_id="evo-propose")
        # the proposal's text and what the box held when it was asked for: it fills the box only if untouched since
        c.proposed_arg, c.arg_at_ask = gr.Textbox(visible=False), gr.Textbox(visible=False)
        with gr.Row(equal_height=True):
            c.proposal = gr.HTML(elem_id="evo-proposal-box")
            c.human_queue = gr.Checkbox(False, label="queue a human-correction pair (mine over the policy's)",
                                        elem_id="evo-human-queue", scale=0, min_width=330)


def _episode_panels(c: SimpleNamespace, first: EpisodeView) -> None:
    """The steps table, the weight and contribution charts, the latest step's breakdown and passages."""
    c.steps = gr.HTML(first.steps, elem_id="evo-steps-box")
    with gr.Row():
        c.weights = gr.Plot(first.weights, label="Weight schedule", elem_id="evo-weights")
        c.contrib = gr.Plot(first.contributions, label="Per-step contributions", elem_id="evo-contrib")
    with gr.Row():
        c.breakdown = gr.HTML(first.breakdown)
        c.passages = gr.HTML(first.passages, elem_id="evo-passages-box")


def _verdicts_section(c: SimpleNamespace, first: EpisodeView) -> None:
    with gr.Accordion("Judge verdicts and refusal override", open=True):
        c.verdicts = gr.HTML(first.verdicts, elem_id="evo-verdicts-box")
        with gr.Row():
            c.judged_dd = gr.Dropdown(label="Step", choices=[], elem_id="evo-judged", scale=1)
            c.verdict = gr.Radio(["answerable", "unanswerable"], value="answerable", label="Your verdict",
                                 elem_id="evo-verdict", scale=2)
            c.override_btn = gr.Button("Override verdict", elem_id="evo-override", scale=1)


def _siblings_section(svc: Services, c: SimpleNamespace, first: EpisodeView) -> None:
    """Sibling candidates: sample, score branches, queue a human pair or send the state to the annotation queue."""
    with gr.Accordion("Sibling candidates and annotation", open=False, elem_id="evo-siblings"):
        with gr.Row():
            c.k = gr.Slider(2, 8, value=svc.cfg.policy.siblings, step=1, label="K candidates", elem_id="evo-k")
            c.temperature = gr.Slider(0.1, 2.0, value=svc.cfg.policy.temperature, step=0.1, label="Temperature",
                                      elem_id="evo-temp")
            c.seed = gr.Number(value=svc.cfg.policy.seed, precision=0, label="Seed", elem_id="evo-seed")
            c.horizon = gr.Number(value=6, precision=0, minimum=0, label="Branch horizon (steps)")
        with gr.Row():
            c.sample_btn = gr.Button("Sample candidates", elem_id="evo-sample")
            c.score_btn = gr.Button("Score branches", elem_id="evo-score")
            c.score_stop = gr.Button("Stop scoring", variant="stop", elem_id="evo-score-stop")
        c.score_msg = gr.HTML(elem_id="evo-score-msg")
        c.candidates = gr.HTML(first.candidates, elem_id="evo-candidates")
        with gr.Row():
            c.preferred = gr.Dropdown(label="Preferred", choices=[], elem_id="evo-preferred")
            c.rejected = gr.Dropdown(label="Rejected", choices=[], elem_id="evo-rejected")
            c.pair_btn = gr.Button("Queue human pair", variant="primary", elem_id="evo-queue-pair")
            c.send_btn = gr.Button("Send this state to the annotation queue", elem_id="evo-send-state")
        c.pair_msg = gr.HTML(elem_id="evo-pair-msg")


def _wire_data(svc: Services, c: SimpleNamespace, demo: gr.Blocks) -> Callable:
    """Data files: a pick, Load for a typed path, an upload; a new question clears the last episode's messages.
    Returns `on_data` (the page URL falls back to it)."""

    def on_data(path):
        info = pickers.load_data(svc, path)
        first_q = info.questions[0][1] if info.questions else None
        return (gr.Dropdown(choices=pickers.data_choices(svc), value=info.path), info.summary_html,
                gr.Dropdown(choices=info.questions, value=first_q))

    def on_upload(file):
        info = pickers.upload_data(svc, file)
        first_q = info.questions[0][1] if info.questions else None
        return (gr.Dropdown(choices=pickers.data_choices(svc), value=info.path), info.summary_html,
                gr.Dropdown(choices=info.questions, value=first_q))

    # One load per user action: picking a listed file (select), or Load for a typed path. Not the box's `input`
    # event: Gradio's dropdown fires it on every blur too, so typing a path and pressing Load loaded it twice
    # (and showed its error twice), and a pick from the list fired it twice.
    c.data_outputs = [c.data_dd, c.data_info, c.question_dd]
    on(c.load_btn.click, on_data, c.data_dd, c.data_outputs)
    on(c.data_dd.select, on_data, c.data_dd, c.data_outputs)
    on(c.upload.upload, on_upload, c.upload, c.data_outputs)

    def on_question(shown_now):
        """A new question (or data file): the last episode's messages no longer apply."""
        return "", "", {**(shown_now or {}), "message": "", "pair_msg": ""}

    on(c.question_dd.change, on_question, c.shown, [c.message, c.pair_msg, c.shown], show_progress="hidden",
       api_visibility="private")
    return on_data


def _settings_of(data, qid, free, pol, stg, sched, pre, scr) -> EpisodeSettings:
    return EpisodeSettings(data or "", qid or "", free or "", pol or "oracle", stg, sched, pre, scr or "")


def _wire_episode(svc: Services, c: SimpleNamespace, annotator: gr.Textbox) -> None:
    """Reset / Step / Run to end, the verdict override, sampling and scoring siblings (with Stop)."""
    settings_inputs = [c.data_dd, c.question_dd, c.free_q, c.policy_dd, c.stage, c.schedule, c.preset, c.script]
    n_out = len(c.outputs) + 2  # + shown, session

    def on_reset(shown_now, *args):
        settings = _settings_of(*args)
        note = human_handlers.loading_note(svc, settings)
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

    def on_override(sess, shown_now, t, v, who, request: gr.Request):
        view, sess = handlers.override_verdict(sess, t, v, _annotator(svc, who, request))
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

    ep_outputs = [*c.outputs, c.shown, c.session]
    on(c.reset_btn.click, on_reset, [c.shown, *settings_inputs], ep_outputs)
    on(c.step_btn.click, on_step, [c.session, c.shown], ep_outputs, show_progress="minimal")
    on(c.run_btn.click, on_run, [c.session, c.shown], ep_outputs)
    on(c.override_btn.click, on_override, [c.session, c.shown, c.judged_dd, c.verdict, annotator], ep_outputs)
    on(c.sample_btn.click, on_sample, [c.session, c.shown, c.k, c.temperature, c.seed], ep_outputs)
    on(c.score_btn.click, on_score, [c.session, c.shown, c.horizon], [c.score_msg, *ep_outputs])
    on(c.score_stop.click, _on_score_stop, None, c.score_msg, api_visibility="private", show_progress="hidden")


def _annotator(svc: Services, who: str | None, request: gr.Request | None) -> str:
    return annotator_name(who, request, svc.cfg.studio.max_question_chars)


def _on_score_stop(request: gr.Request):
    flag = _score_flags.get(_browser(request))
    if flag is None or flag.is_set():
        return views.message_html("Nothing is being scored.", "info")
    flag.set()
    return views.message_html("Stopping the scoring at the next policy step…", "warn")


def _wire_human_and_pairs(svc: Services, c: SimpleNamespace, annotator: gr.Textbox) -> tuple:
    """Acting in the policy's place (its proposal first), a human pair, a state sent to the annotation queue.
    Returns the events that queue pairs (the Pairs tab reloads after them)."""

    def on_pair(sess, shown_now, i, j, who, request: gr.Request):
        msg, _ = handlers.queue_pair(sess, svc, i, j, _annotator(svc, who, request))
        html = views.message_html(msg, "ok")
        return html, {**(shown_now or {}), "pair_msg": html}, human_handlers.pairs_count_html(svc)

    def on_send(sess, shown_now, request: gr.Request):
        roles.require(svc, request, "queue")
        item_id = human_handlers.queue_item(svc, human_handlers.state_item(sess, svc))
        html = views.message_html(f"Queued annotation item #{item_id}: it is in the Annotate tab's queue.", "ok")
        return html, {**(shown_now or {}), "pair_msg": html}

    def on_propose(sess, shown_now, typed):
        view, name, arg = human_handlers.propose_action(sess)
        return (*_outputs(view, shown_now), sess, name, arg, typed or "")

    def on_human(sess, shown_now, name, arg, queue, who, request: gr.Request):
        view, sess, _ = human_handlers.human_step(sess, svc, name, arg, _annotator(svc, who, request), bool(queue))
        return (*_outputs(view, shown_now), sess, "", human_handlers.pairs_count_html(svc))

    ep_outputs = [*c.outputs, c.shown, c.session]
    proposed = on(c.propose_btn.click, on_propose, [c.session, c.shown, c.human_arg],
                  [*ep_outputs, c.human_act, c.proposed_arg, c.arg_at_ask], show_progress="minimal")
    # a person who typed while the policy thought keeps their text (#46: a late proposal overwrote it)
    proposed.then(None, [c.proposed_arg, c.arg_at_ask, c.human_arg], c.human_arg, js=KEEP_TYPED_JS,
                  api_visibility="private")
    human_done = on(c.human_btn.click, on_human, [c.session, c.shown, c.human_act, c.human_arg, c.human_queue,
                                                  annotator], [*ep_outputs, c.human_arg, c.pairs_count],
                    show_progress="minimal")
    on(c.send_btn.click, on_send, [c.session, c.shown], [c.pair_msg, c.shown])
    pair_done = on(c.pair_btn.click, on_pair, [c.session, c.shown, c.preferred, c.rejected, annotator],
                   [c.pair_msg, c.shown, c.pairs_count])
    return human_done, pair_done


def _wire_link(svc: Services, c: SimpleNamespace, demo: gr.Blocks, on_data: Callable) -> None:
    """The page URL: ?data=FILE&question=ID loads that file and selects the question."""

    def on_page(path, request: gr.Request):
        """The page URL: ?data=FILE&question=ID loads that file and selects the question (a bad link: the default
        file, and a message saying what was wrong)."""
        link = links.url_params(request)
        if "data" not in link and "question" not in link:
            return on_data(path)
        try:
            info, qid = links.question_link(svc, link.get("data"), link.get("question"))
        except (EvoRagError, ValueError, KeyError, OSError) as exc:
            dd, info_html, questions = on_data(path)
            return dd, views.message_html(f"The link was not opened: {error_message(exc)}", "error") + info_html, questions
        note = views.message_html(f"Opened from a link: question {qid}; press Reset to run it.", "info")
        return (gr.Dropdown(choices=pickers.data_choices(svc), value=info.path), info.summary_html + note,
                gr.Dropdown(choices=info.questions, value=qid))

    on(demo.load, on_page, c.data_dd, c.data_outputs, api_visibility="private")
