"""The Training tab offers every objective the worker runs (issue #26 item 3), through its handlers on a real SQLite
store: each objective shows the fields its round reads (the registry's `fields`, each drawn by
app/common/training_fields.py), its availability line counts what it trains on (pairs, episodes, or the data file's usable
questions), Launch writes the job its round accepts (RoundJob.from_config and the objective's own settings check
take it), and the worker has a module for it. The charts follow what each round logs. No model is loaded."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.paths import DEMO
from app.common import round_progress, training_fields as tf
from app.common.services import Services
from app.tabs.training import handlers as th
from evorag_core.config import load_config
from evorag_core.objectives import OBJECTIVES, STUDIO_OBJECTIVES
from evorag_core.store import NewPair

# What each objective must show (at least) and must not (the others' fields).
SHOWN = {
    "dpo": {"pairs", "source", "stage", "beta", "epochs", "lr"},
    "grpo": {"episodes", "stage", "kl", "epochs", "lr"},
    "ppo": {"episodes", "stage", "kl", "vf_coef"},
    "arena-grpo": {"data", "arena.questions", "arena.group_size", "arena.temperature", "kl", "lr"},
    "r2ag-grpo": {"data", "r2ag.questions", "r2ag.group_size", "r2ag.iterations", "kl", "lr"},
    "dynakrag": {"data", "dynakrag.questions", "dynakrag.train_rollouts", "dynakrag.n_estimators"},
}
HIDDEN = {
    "dpo": {"episodes", "kl", "data", "arena.questions"},
    "grpo": {"pairs", "beta", "source", "data", "vf_coef"},
    "ppo": {"pairs", "beta", "data"},
    "arena-grpo": {"pairs", "episodes", "source", "stage", "beta", "r2ag.questions", "dynakrag.questions"},
    "r2ag-grpo": {"pairs", "episodes", "arena.questions", "beta"},
    "dynakrag": {"pairs", "episodes", "epochs", "lr", "kl", "max_steps", "arena.questions"},
}


@pytest.fixture()
def svc(tmp_path):
    services = Services(load_config(), tmp_path, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    yield services
    services.close()


def _episode(store) -> None:
    store.add_episode(question_id="demo-001", dataset="demo", question="q", policy="test", stage="discovery",
                      schedule="time-dynamic", config={"data": str(DEMO)}, steps=[], status="finished",
                      total_return=0.0)


def test_every_objective_is_in_the_studio_with_a_worker_module_and_known_fields():
    assert set(STUDIO_OBJECTIVES) == set(OBJECTIVES) == set(SHOWN)
    for name, objective in OBJECTIVES.items():
        module = importlib.import_module(objective.module)
        assert callable(module.run), name
        assert set(objective.fields) <= set(tf.FIELD_KEYS), name  # each field has a spec
        assert SHOWN[name] <= set(tf.fields_of(name)) and not HIDDEN[name] & set(tf.fields_of(name)), name
    defaults = tf.defaults(load_config(), str(DEMO))
    assert set(defaults) == set(tf.FIELD_KEYS)
    assert defaults["arena.group_size"] == 4 and defaults["r2ag.group_size"] == 12  # the GRPO configs' defaults
    assert defaults["dynakrag.n_estimators"] == load_config().dynakrag.n_estimators
    assert tf.switch_values("arena-grpo", defaults) == {"kl": "k2"}  # ARENA optimises k2
    assert tf.switch_values("grpo", defaults) == {"kl": defaults["kl"]}  # switching back restores the shared default


@pytest.mark.parametrize("objective", ["dpo", "grpo", "ppo"])
def test_pairs_and_episodes_objectives_count_and_launch_their_keys_only(svc, objective):
    from training.job import RoundJob

    store = svc.store()
    store.add_pairs([NewPair(f"state {i}", "SEARCH: a", "ANSWER: b", source="human") for i in range(3)])
    _episode(store)
    what = "pairs" if objective == "dpo" else "episodes"
    assert th.available(svc, objective) == (what, 3 if what == "pairs" else 1)
    done = th.launch_job(svc, objective, {"pairs": 8, "episodes": 8, "epochs": 2, "lr": 1e-4, "kl": "k2", "beta": 0.2,
                                          "vf_coef": 0.7, "stage": "all", "source": "all", "max_steps": 0,
                                          "arena.questions": 3, "data": str(DEMO)})
    config = store.get_round(done.round_id).config
    assert done.capped and config[what] == (3 if what == "pairs" else 1)
    assert set(config) <= {"objective", "base_model", *tf.fields_of(objective)}
    assert "arena" not in config and "data" not in config and config["epochs"] == 2
    assert ("beta" in config) == (objective == "dpo") and ("kl" in config) == (objective != "dpo")
    assert ("vf_coef" in config) == (objective == "ppo")
    job = RoundJob.from_config(done.round_id, objective, config, load_config(), svc.home)  # the worker accepts it
    assert job.train.epochs == 2 and job.objective == objective


@pytest.mark.parametrize("objective,section,usable", [("arena-grpo", "arena", 52), ("r2ag-grpo", "r2ag", 40),
                                                       ("dynakrag", "dynakrag", 40)])
def test_question_objectives_count_the_data_file_and_launch_their_settings(svc, objective, section, usable):
    """Availability counts the demo file's usable questions (ARENA: with passages; R²AG and DynaKrag: with gold
    passages); a larger request is capped; the job carries the settings object the round reads."""
    from training.job import RoundJob

    text = th.availability_text(svc, objective, "all", "all", str(DEMO))
    assert f'data-n="{usable}"' in text and "demo.jsonl" in text and "questions with" in text
    values = tf.defaults(svc.cfg, str(DEMO))  # what the tab shows after a switch to the objective
    values.update(tf.switch_values(objective, values))
    values.update({f"{section}.questions": 500, f"{section}.offset": 2})
    if section == "dynakrag":
        values.update({"dynakrag.n_estimators": 20, "dynakrag.continuation_target": "support"})
    else:
        values.update({f"{section}.group_size": 3, "max_steps": 4})
    done = th.launch_job(svc, objective, values)
    assert done.capped and f"Capped: 500 questions asked, only {usable - 2} available" in done.message
    config = svc.store().get_round(done.round_id).config
    assert config["data"] == str(DEMO.resolve()) and config[section]["questions"] == usable - 2
    assert config[section]["offset"] == 2 and not {"pairs", "episodes", "source", "stage"} & set(config)
    job = RoundJob.from_config(done.round_id, objective, config, load_config(), svc.home)
    if section == "arena":
        from training.objectives.arena_grpo.config import arena_config_from_job

        cfg, train = arena_config_from_job(job)
        assert cfg.group_size == 3 and cfg.questions == 50 and train.kl == "k2" and job.max_steps == 4
    elif section == "r2ag":
        from training.objectives.r2ag_grpo.config import r2ag_config_from_job

        assert r2ag_config_from_job(job).group_size == 3 and job.max_steps == 4
    else:
        from training.objectives.dynakrag.config import dynakrag_config_from_job

        merged, questions, offset = dynakrag_config_from_job(job)
        assert (merged.dynakrag.n_estimators, merged.dynakrag.continuation_target, questions, offset) == (
            20, "support", 38, 2)
        assert "epochs" not in config and "lr" not in config


def test_bad_settings_and_files_are_refused_before_queueing(svc, tmp_path):
    with pytest.raises(ValueError, match="Replies per question"):
        th.launch_job(svc, "arena-grpo", {"arena.group_size": 1})
    with pytest.raises(ValueError, match="Continuation target"):
        th.launch_job(svc, "dynakrag", {"dynakrag.continuation_target": "nope"})
    with pytest.raises(ValueError, match="whole number"):
        th.launch_job(svc, "r2ag-grpo", {"r2ag.iterations": 1.5})
    # the settings' own ranges (evorag_core.config RULES), the ones the page's inputs show (FieldSpec.bounds)
    for lr in (5, 0, -1):
        with pytest.raises(ValueError, match=r"Learning rate .* must be in \(0, 0.1\], got"):
            th.launch_job(svc, "dpo", {"lr": lr})
    with pytest.raises(ValueError, match="Epochs must be >= 1, got 0"):
        th.launch_job(svc, "grpo", {"epochs": 0})
    with pytest.raises(ValueError, match="Rollout temperature must be at most 2, got 5"):
        th.launch_job(svc, "arena-grpo", {"arena.temperature": 5})
    with pytest.raises(ValueError, match="Trees per forest must be >= 1, got 0"):
        th.launch_job(svc, "dynakrag", {"dynakrag.n_estimators": 0})
    outside = tmp_path.parent / "elsewhere.jsonl"
    with pytest.raises(Exception, match="not a data file the studio may read"):
        th.launch_job(svc, "dynakrag", {"data": str(outside)})
    assert "not a data file" in th.availability_text(svc, "dynakrag", "all", "all", str(outside))
    with pytest.raises(ValueError, match="Not launched: no questions with passages"):
        th.launch_job(svc, "arena-grpo", {"arena.offset": 60})
    assert svc.store().list_rounds() == []


def test_every_numeric_field_has_the_bounds_its_launch_checks():
    """One rule set: a field tied to a setting takes that setting's bounds; at each bound the launch's check
    agrees with the input (the bound passes, one step past it is refused)."""
    from app.common import training_fields as tf
    from evorag_core.config import rule_of

    assert tf.spec("lr").bounds == (None, 0.1) and tf.spec("epochs").bounds == (1, None)
    assert tf.spec("dynakrag.n_estimators").bounds == (rule_of("dynakrag.n_estimators").lo, None)
    for spec in tf.FIELDS:
        if spec.kind not in ("int", "float"):
            continue
        lo, hi = spec.bounds
        step = 1 if spec.kind == "int" else 1e-6
        for bound, past in ((lo, -step), (hi, step)):
            if bound is not None:
                assert spec.problem(bound) is None, (spec.key, bound)
                assert spec.problem(bound + past) is not None, (spec.key, bound + past)


def test_charts_follow_what_each_round_logs(svc):
    """A running ARENA round's heartbeat carries its reward means: the reward chart shows, the KL panel too, the
    second slot stays hidden. A finished DynaKrag round: no loss panel, its exploration charts from step_history,
    the controller in the rounds table, and its phases read "saving controller" / "installing controller"."""
    store = svc.store()
    rid = th.launch_job(svc, "arena-grpo", {"data": str(DEMO), "arena.questions": 2}).round_id
    assert store.claim_round("w", 60).id == rid
    view = th.training_view(svc)
    assert [shown for _, shown in view.charts] == [False, False] and view.kl_visible and view.loss_visible
    store.heartbeat(rid, "w", {"step": 1, "total": 2, "loss": 0.5, "kl": 0.0, "kl_k2": 0.0, "kl_k3": 0.0,
                               "reward": 3.5, "format": 1.0, "accuracy": 1.0, "relevance": 0.5, "bonus": 1.0,
                               "elapsed_s": 1.0, "phase": "train"})
    view = th.training_view(svc)
    assert [shown for _, shown in view.charts] == [True, False]
    names = [trace.name for trace in view.charts[0][0].data]
    assert names == ["reward", "format", "accuracy", "relevance", "bonus"]
    store.finish_round(rid, metrics={"loss_history": [[1, 0.5]]}, worker_id="w")

    did = th.launch_job(svc, "dynakrag", {"data": str(DEMO), "dynakrag.questions": 3}).round_id
    assert store.claim_round("w", 60).id == did
    store.heartbeat(did, "w", {"step": 0, "phase": "save"})
    running = round_progress.progress_html(store.get_round(did), store.get_round(did).heartbeat_at)
    assert "saving controller" in running and "installing controller" in running and "saving adapter" not in running
    history = [{"step": i, "transitions": 10.0 * i, "final_support": 0.5, "lm_calls": 2.0 * i} for i in (1, 2, 3)]
    store.finish_round(did, metrics={"controller": str(svc.home / "dynakrag"), "step_history": history,
                                     "holdout_r2": 0.25, "transitions": 30, "steps": 3}, worker_id="w")
    view = th.training_view(svc)
    assert not view.loss_visible and not view.kl_visible
    assert [shown for _, shown in view.charts] == [True, True]
    assert list(view.charts[1][0].data[0].y) == [10.0, 20.0, 30.0]
    assert "controller dynakrag/" in view.rounds and "holdout_r2=0.25" in view.rounds and "3 q · demo.jsonl" in view.rounds


def test_dpo_round_charts_its_margin_and_accuracy(svc):
    store = svc.store()
    store.add_pairs([NewPair(f"state {i}", "SEARCH: a", "ANSWER: b", source="human") for i in range(2)])
    rid = th.launch(svc, "dpo", 2, 1, 5e-5, "k3").round_id
    assert store.claim_round("w", 60).id == rid
    from training.objectives.dpo.round import _forward_progress

    reports: list[dict] = []  # what a DPO round reports for a TRL log line (the keys the charts read)
    _forward_progress(reports.append)({"step": 1, "max_steps": 4, "loss": 0.69, "rewards/margins": 0.1,
                                       "rewards/accuracies": 0.5, "elapsed_s": 1.0})
    store.heartbeat(rid, "w", {**reports[0], "phase": "train"})
    view = th.training_view(svc)
    assert [shown for _, shown in view.charts] == [True, True] and not view.kl_visible
    assert view.charts[0][0].data[0].name == "margin" and list(view.charts[1][0].data[0].y) == [0.5]
