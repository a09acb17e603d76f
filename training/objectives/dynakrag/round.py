"""The worker's DynaKrag round (objective `dynakrag`): fit the controller on the job's data file and install it where
`evorag eval --method dynakrag` loads it (`home/<dynakrag.model_dir>`). No LoRA adapter: the round returns a
`ControllerRef`, and the worker records the controller's folder on the round instead of registering anything.

    load     the generator LM of [policy] (its sufficiency checks, gaps and answers label the transitions)
    prepare  the data file, its runtime (corpus, retrievers)
    train    one step per explored question (`evorag_core.methods.dynakrag.training.collect`): progress carries the
             transitions collected so far, the mean support recall at the end of that question's rollouts and the
             LM calls; then the forests are fitted (seconds)
    save     the controller folder written next to the installed one (`.<name>.tmp-<round>`)
    register the cancel check of every round's last phase, then the folder replaces the installed one (renames)

A cancel stops at the next question (or at save/register) and leaves the installed controller as it was. The same
fit runs in `evorag train --objective dynakrag` (in that process, `train_command`). Job keys: `data` (default: the
bundled demo set) and `dynakrag: {any [dynakrag] key, questions (0: every question), offset}`.
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from evorag_core.config import REPO_ROOT
from evorag_core.errors import TrainingError

from training.job import ControllerRef, ProgressFn, RoundJob, phase
from training.objectives.dynakrag.config import dynakrag_config_from_job

if TYPE_CHECKING:
    from evorag_core.store import Store

__all__ = ["install", "run"]

DEFAULT_DATA = REPO_ROOT / "data" / "demo" / "demo.jsonl"


def install(staged: Path, target: Path, round_id: int) -> Path:
    """Replace the controller folder `target` by `staged` (two renames on one file system; the old folder is
    removed afterwards); returns `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    old = target.parent / f".{target.name}.old-{round_id}"
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    staged.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def run(job: RoundJob, store: Store, on_progress: ProgressFn | None = None) -> ControllerRef:
    """load -> prepare -> train (one step per question) -> save -> register (see the module docstring)."""
    from evorag_core.data.datasets import load_dataset
    from evorag_core.lm.backends import policy_backend
    from evorag_core.methods.dynakrag.controller import model_folder
    from evorag_core.methods.dynakrag.training import fit_dynakrag, save_dynakrag
    from evorag_core.runtime import Runtime
    from evorag_core.types import Dataset

    from training.round_io import RssSampler

    started = time.perf_counter()
    cfg, n_questions, offset = dynakrag_config_from_job(job)
    target = model_folder(cfg.dynakrag, job.home)
    staged = target.parent / f".{target.name}.tmp-{job.round_id}"
    with RssSampler() as rss:
        phase(on_progress, "load")
        backend = policy_backend(cfg.policy, job.home)
        phase(on_progress, "prepare")
        dataset = load_dataset(Path(job.data) if job.data else DEFAULT_DATA)
        chosen = dataset.questions[offset:]
        chosen = chosen[:n_questions] if n_questions else chosen
        if not chosen:
            raise TrainingError(f"round {job.round_id}: no question in {dataset.path} after offset {offset}")
        runtime = Runtime(cfg, job.home, dataset)  # the whole file's corpus; exploration on the chosen questions
        history: list[dict[str, float]] = []
        train_started = time.perf_counter()

        def report(stats: dict[str, float]) -> None:
            entry = {"step": int(stats["question"]), "total": int(stats["questions"]),
                     **{k: v for k, v in stats.items() if k not in ("question", "questions")},
                     "elapsed_s": time.perf_counter() - train_started}
            history.append(entry)
            if on_progress is not None:
                on_progress(dict(entry))

        models, transitions = fit_dynakrag(Dataset(dataset.name, dataset.path, tuple(chosen)), runtime,
                                           cfg.dynakrag, backend=backend, on_question=report)
        models.metrics["round_id"] = job.round_id
        phase(on_progress, "save")
        if staged.exists():
            shutil.rmtree(staged)
        save_dynakrag(models, transitions, cfg.dynakrag, staged)
        try:
            phase(on_progress, "register")  # a cancel requested by now still leaves the installed controller alone
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        install(staged, target, job.round_id)
    metrics = _metrics(models.metrics, history)
    metrics.update(objective="dynakrag", data=str(dataset.path), config=job.raw, dynakrag=dataclasses.asdict(cfg.dynakrag),
                   wall_s=time.perf_counter() - started, peak_rss_mb=rss.peak_mb)
    return ControllerRef(target, job.round_id, job.objective, metrics)


def _metrics(fit: Mapping[str, Any], history: list[dict[str, float]]) -> dict[str, Any]:
    """The fit's metrics with the headline numbers flat (what the rounds table lists) and the per-question
    history (the Training tab's charts)."""
    held, train = fit.get("holdout_value") or {}, fit.get("train_value") or {}
    flat = {"holdout_r2": held.get("r2"), "holdout_mae": held.get("mae"), "best_action_rate": held.get("best_action_rate"),
            "picked_target": held.get("picked_target"), "uniform_target": held.get("uniform_target"),
            "train_r2": train.get("r2"), "steps": len(history)}
    return {**{k: v for k, v in fit.items()}, **{k: v for k, v in flat.items() if v is not None},
            "step_history": history}
