"""The studio's actions as plain functions: values in, values out, no Gradio. `ui.py` wires them to components.

Handlers raise the project's errors (EvoRagError subclasses, ValueError, KeyError) with readable messages; the UI
layer turns those into a one-line message in the page.

- `episodes`: data files, Reset / Step / Run to end, refusal overrides, siblings and human pairs
- `human`: a person's step in the policy's place, the policy's proposal, human-correction pairs, live counts
- `pairs`: the pair queue with filters and counts; edit, discard, restore
- `training`: rounds for the worker, progress and history, adapters, the header's live status
- `evaluate`: evaluation runs, paired bootstrap, drill-down
"""
from __future__ import annotations

from app.policies import FeatureUnavailable
from app.handlers.episodes import (
    DataInfo,
    EpisodeView,
    data_choices,
    episode_view,
    load_data,
    override_verdict,
    policy_options,
    queue_pair,
    run_steps,
    run_to_end,
    sample_siblings,
    score_siblings,
    start_episode,
    step_episode,
    upload_data,
)
from app.handlers.human import human_step, loading_note, pairs_count_html, propose_action, queue_correction
from app.handlers.evaluate import (
    EVAL_PREFIX,
    EvalRun,
    compare_runs,
    drill_down,
    eval_method_options,
    eval_questions,
    eval_summary,
    run_eval,
)
from app.handlers.pairs import PairsView, discard_pair, edit_pair, pair_fields, pairs_view, restore_pair
from app.handlers.training import (
    KEY_METRICS,
    KL_ESTIMATORS,
    OBJECTIVES,
    TrainingView,
    activate_adapter,
    header_status,
    launch_round,
    training_view,
    use_base_model,
)

__all__ = [
    "FeatureUnavailable",
    "DataInfo",
    "EpisodeView",
    "data_choices",
    "load_data",
    "upload_data",
    "policy_options",
    "start_episode",
    "step_episode",
    "run_steps",
    "run_to_end",
    "episode_view",
    "override_verdict",
    "sample_siblings",
    "score_siblings",
    "queue_pair",
    "propose_action",
    "human_step",
    "queue_correction",
    "pairs_count_html",
    "loading_note",
    "PairsView",
    "pairs_view",
    "pair_fields",
    "edit_pair",
    "discard_pair",
    "restore_pair",
    "OBJECTIVES",
    "KL_ESTIMATORS",
    "KEY_METRICS",
    "TrainingView",
    "launch_round",
    "training_view",
    "activate_adapter",
    "use_base_model",
    "header_status",
    "EVAL_PREFIX",
    "EvalRun",
    "eval_method_options",
    "run_eval",
    "eval_summary",
    "compare_runs",
    "eval_questions",
    "drill_down",
]
