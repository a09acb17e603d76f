"""DynaKrag's worker round (training/objectives/dynakrag/round.py) on the demo data with the tiny random Llama as the generator:
claimed and run by `process_one` like every round, one progress step per explored question, the controller installed
where `evorag eval --method dynakrag` loads it, the round finished with the controller's folder (no adapter). A cancel
mid-exploration installs nothing. BM25 for both retrievers and support-recall continuation targets keep it fast."""
from __future__ import annotations


import pytest

from tests.paths import DEMO
from evorag_core.config import apply_overrides, load_config
from evorag_core.store import open_store
from training.job import RoundCancelled, RoundJob
from training.worker import WorkerOptions, process_one

FAST = {"questions": 6, "initial_retriever": "bm25", "targeted_retriever": "bm25", "continuation_target": "support",
        "train_rollouts": 1, "n_estimators": 8, "min_samples_leaf": 2, "max_steps": 3}


@pytest.fixture()
def world(tmp_path, tiny):
    import torch

    torch.set_num_threads(1)
    cfg = apply_overrides(load_config(), {"policy.model": str(tiny), "policy.device": "cpu",
                                          "policy.backend": "transformers"})
    store = open_store(f"sqlite:///{tmp_path / 'evorag.db'}")
    yield cfg, tmp_path, store
    store.close()


def test_the_worker_fits_and_installs_the_controller_without_an_adapter(world):
    from evorag_core.methods.dynakrag.controller import load_models, model_folder

    cfg, home, store = world
    seen: list[dict] = []
    rid = store.enqueue_round("dynakrag", {"objective": "dynakrag", "data": str(DEMO), "dynakrag": FAST})

    def run(job, store_, on_progress):
        from training.rounds import run_round

        def spy(entry):
            seen.append(dict(entry))
            on_progress(entry)

        return run_round(job, store_, spy)

    done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=30), run)
    assert done.status == "succeeded", done.error
    folder = model_folder(cfg.dynakrag, home)
    assert done.metrics["controller"] == str(folder) and "adapter" not in done.metrics
    assert store.list_adapters() == []
    phases = [e["phase"] for e in seen if "step" not in e]
    assert phases == ["load", "prepare", "save", "register"]
    steps = [e for e in seen if "step" in e]
    assert [e["step"] for e in steps] == list(range(1, 7)) and all(e["total"] == 6 for e in steps)
    assert [e["skipped"] for e in steps] == [0, 0, 0, 1, 1, 1] and "final_support" not in steps[3]  # no gold
    assert all(0.0 <= e["final_support"] <= 1.0 for e in steps if e["step"] != 4)
    assert [e["transitions"] for e in steps] == sorted(e["transitions"] for e in steps) and steps[-1]["transitions"] > 0
    m = done.metrics
    assert m["questions"] == 5 and m["questions_without_gold"] == 1 and m["transitions"] == steps[-1]["transitions"] and len(m["step_history"]) == 6
    assert m["holdout_questions"] == 1 and "best_action_rate" in m and m["dynakrag"]["n_estimators"] == 8
    models = load_models(folder)  # what `evorag eval --method dynakrag` reads (controller = learned)
    assert models.metrics["round_id"] == rid and models.metrics["transitions"] == m["transitions"]
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".dynakrag.")]  # no staged leftovers


def test_a_cancel_mid_exploration_installs_nothing(world):
    from evorag_core.methods.dynakrag.controller import model_folder
    from training.objectives.dynakrag.round import run

    cfg, home, store = world
    job = RoundJob.from_config(7, "dynakrag", {"data": str(DEMO), "dynakrag": FAST}, cfg, home)

    def cancel_at_second_question(entry):
        if entry.get("step") == 2:
            raise RoundCancelled("round 7: cancel requested")

    with pytest.raises(RoundCancelled):
        run(job, store, cancel_at_second_question)
    folder = model_folder(cfg.dynakrag, home)
    assert not folder.exists() and not list(home.glob(".dynakrag*"))


def test_a_bad_dynakrag_key_fails_the_round_readably(world):
    from evorag_core.errors import ConfigError
    from training.objectives.dynakrag.config import dynakrag_config_from_job

    cfg, home, _ = world
    job = RoundJob.from_config(8, "dynakrag", {"dynakrag": {"n_estimator": 3}}, cfg, home)
    with pytest.raises(ConfigError, match="n_estimator"):
        dynakrag_config_from_job(job)
    ok = RoundJob.from_config(9, "dynakrag", {"dynakrag": {"questions": 2, "n_estimators": 5}}, cfg, home)
    merged, questions, offset = dynakrag_config_from_job(ok)
    assert (merged.dynakrag.n_estimators, questions, offset) == (5, 2, 0)
