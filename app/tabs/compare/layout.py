"""The Compare tab: one question, two policies (base vs an adapter, or two adapters), run to the end one after the
other and shown step aligned (`app/tabs/compare/view.py`). The Training tab's "Compare with base" opens it preset."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from evorag_core.env.scheduler import STAGES

from app.common import views, pickers
from app.common.policies import BASE
from app.common.services import Services
from app.common.session import EpisodeSettings
from app.common.wiring import on
from app.tabs.compare import handlers as hc

__all__ = ["CompareTab", "build_tab", "on_select", "preset_for_adapter"]


@dataclass(frozen=True)
class CompareTab:
    policy_a: gr.Dropdown
    policy_b: gr.Dropdown
    data: gr.Dropdown
    question: gr.Dropdown


def _lm_choices(svc: Services) -> list[tuple[str, str]]:
    """The policies compare can run: the oracle and the language-model ones (not the script)."""
    return [(label, value) for label, value in pickers.policy_options(svc) if value != "script"]


def preset_for_adapter(svc: Services, adapter: str | None, data: str | None, question: str | None) -> tuple:
    """The Training tab's "Compare with base": A = the base model, B = `adapter` (refused without one), and the
    questions listed if they are not yet; the caller switches to the tab."""
    if not adapter:
        raise ValueError("pick an adapter in the list first")
    _, _, questions = on_select(svc, data, question)
    choices = _lm_choices(svc)
    return gr.Dropdown(choices=choices, value=BASE), gr.Dropdown(choices=choices, value=f"lm:{adapter}"), questions


def build_tab(svc: Services) -> CompareTab:

    files = pickers.data_choices(svc)
    choices = _lm_choices(svc)
    adapters = [v for _, v in choices if v.startswith("lm:") and v not in (BASE, "lm:live")]
    with gr.Row():
        with gr.Column(scale=1, min_width=340):
            data_dd = gr.Dropdown(choices=files, value=files[0][1] if files else None, label="Data file",
                                  elem_id="evo-cmp-data")
            question_dd = gr.Dropdown(label="Question", choices=[], elem_id="evo-cmp-question")
            policy_a = gr.Dropdown(choices=choices, value=BASE, label="Policy A", elem_id="evo-cmp-a")
            policy_b = gr.Dropdown(choices=choices, value=adapters[-1] if adapters else "oracle", label="Policy B",
                                   elem_id="evo-cmp-b")
            stage = gr.Radio(list(STAGES), value=svc.cfg.reward.stage, label="Stage", elem_id="evo-cmp-stage")
            with gr.Row():
                run = gr.Button("Run both", variant="primary", elem_id="evo-cmp-run")
                stop = gr.Button("Cancel", elem_id="evo-cmp-cancel")
        with gr.Column(scale=3):
            progress = gr.HTML(elem_id="evo-cmp-progress")
            result = gr.HTML('<div class="evo-empty">Pick a question and two policies, then Run both.</div>',
                             elem_id="evo-cmp-result")

    def on_data(path):
        info = pickers.load_data(svc, path)
        return gr.Dropdown(choices=info.questions, value=info.questions[0][1] if info.questions else None)

    def on_run(data, qid, a, b, stg):
        settings = EpisodeSettings(data or "", qid or "", "", a or "", stg, svc.cfg.reward.schedule,
                                   svc.cfg.reward.preset)
        for status in hc.compare_policies(svc, settings, b or ""):
            yield status.progress, (status.result or gr.skip())

    on(data_dd.select, on_data, data_dd, question_dd)
    running = on(run.click, on_run, [data_dd, question_dd, policy_a, policy_b, stage], [progress, result])
    stop.click(lambda: views.message_html("Cancelled: the episode in progress stopped after its current step.",
                                          "warn"), None, progress, cancels=[running], api_visibility="private")
    return CompareTab(policy_a, policy_b, data_dd, question_dd)


def on_select(svc: Services, data: str | None, question: str | None) -> tuple:
    """When the tab is shown: fresh policy lists (new adapters) and, the first time, the file's questions."""
    fresh = _lm_choices(svc)
    if question:
        return gr.Dropdown(choices=fresh), gr.Dropdown(choices=fresh), gr.skip()
    info = pickers.load_data(svc, data)
    first = info.questions[0][1] if info.questions else None
    return gr.Dropdown(choices=fresh), gr.Dropdown(choices=fresh), gr.Dropdown(choices=info.questions, value=first)
