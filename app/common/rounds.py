"""Queue a training round for the worker and cancel one: shared by the Training tab (every objective) and the
DynaKrag tab (its controller's round). A launch is checked against what exists (pairs, episodes or usable questions)
and against the round's own config classes before anything is queued."""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from evorag_core.config import apply_overrides
from evorag_core.errors import EvoRagError
from evorag_core.objectives import OBJECTIVES as OBJECTIVES_ALL, STUDIO_OBJECTIVES

from app.common import training_fields as tf
from app.common.handlers import none_if_all
from app.common.services import Services

__all__ = ["OBJECTIVES", "Launch", "QUESTION_NEEDS", "NEEDS_TEXT", "available", "usable_questions", "launch_job",
           "cancel_round"]

OBJECTIVES = STUDIO_OBJECTIVES  # the objectives the studio launches (evorag_core.objectives)


@dataclass(frozen=True)
class Launch:
    """What Launch did: the message to show, the round queued, and whether the request was capped."""

    message: str
    round_id: int
    capped: bool = False


# What makes a question of the data file usable, per question-based objective (the rounds skip the others).
QUESTION_NEEDS: dict[str, str] = {"arena-grpo": "passages", "r2ag-grpo": "gold", "dynakrag": "gold"}
NEEDS_TEXT = {"passages": "questions with passages", "gold": "questions with gold passages"}


def available(svc: Services, objective: str, source: str | None = None, stage: str | None = None,
              data: str | None = None) -> tuple[str, int]:
    """What a round of `objective` could use now: ("pairs", queued pairs matching the filters) for DPO,
    ("episodes", finished stored episodes of the stage) for GRPO/PPO, ("questions", usable questions of the data
    file) for ARENA, R²AG and DynaKrag (queued rounds that have not started yet may take pairs or episodes first)."""
    kind = OBJECTIVES_ALL[objective].data if objective in OBJECTIVES_ALL else "episodes"
    source, stage = none_if_all(source), none_if_all(stage)
    if kind == "questions":
        return "questions", len(usable_questions(svc, objective, data))
    store = svc.store()
    if kind == "pairs":
        return "pairs", sum(store.count_pairs("status", status="queued", source=source, stage=stage).values())
    return "episodes", store.count_finished_episodes(stage=stage)


_USABLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Runtime -> {need: question ids} (timer ticks)


def usable_questions(svc: Services, objective: str, data: str | None) -> list[str]:
    """Ids of the data file's questions a round of `objective` trains on (in file order), worked out once per
    loaded data file (the availability line is recomputed on every timer tick)."""
    rt = svc.runtime(data or None)
    need = QUESTION_NEEDS.get(objective, "gold")
    known = _USABLE.setdefault(rt, {})
    if need not in known:
        if need == "passages":
            known[need] = [q.id for q in rt.dataset.questions if q.passages]
        else:
            known[need] = [q.id for q in rt.dataset.questions if rt.corpus_for(q).gold_for(q)]
    return known[need]


def launch_job(svc: Services, objective: str, values: Mapping[str, Any]) -> Launch:
    """Queue a training round for the worker from the Training tab's field values (keyed as in
    app/common/training_fields.py; only the fields `objective` shows are read), checked against what exists: a request
    for more pairs, episodes or questions than are available is capped to what is available and says so; none
    available -> refused (ValueError) and nothing is queued. A bad value (or an unknown settings key) is a
    ValueError that names it.

    The round's job (stored as JSON, read by `evorag worker`): objective, its fields' job keys (nested ones as
    `arena` / `r2ag` / `dynakrag` objects), base_model."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
    keys = tf.fields_of(objective)
    shared = tf.defaults(svc.cfg, str(svc.default_data))
    values = {**shared, **tf.switch_values(objective, shared), **{k: v for k, v in values.items() if v is not None}}
    job: dict[str, Any] = {"objective": objective}
    for key in keys:
        value = _checked(key, values.get(key))
        if value is None:
            continue
        section, _, name = key.rpartition(".")
        if section:
            job.setdefault(section, {})[name] = value
        else:
            job[key] = value
    if "data" in keys:
        job["data"] = str(svc.allowed_data_path(job.get("data") or svc.default_data))
    section = tf.section_of(objective)
    _check_settings(svc, objective, section, job.get(section) or {})
    what, n_available = available(svc, objective, values.get("source"), values.get("stage"), job.get("data"))
    if what == "questions":
        settings = job.setdefault(section, {})
        offset = int(settings.get("offset") or 0)
        if offset:  # the rounds skip the file's first `offset` questions, then keep the usable ones
            usable = set(usable_questions(svc, objective, job.get("data")))
            n_available = sum(q.id in usable for q in svc.runtime(job.get("data")).dataset.questions[offset:])
        asked = int(settings.get("questions") or 0) or n_available  # dynakrag: 0 explores every question
    else:
        asked = int(job.get(what) or 0)
    if n_available == 0:
        raise ValueError(f"Not launched: {_nothing(what, objective, job)}")
    capped = asked > n_available
    if capped:
        if what == "questions":
            job[section]["questions"] = n_available
        else:
            job[what] = n_available
    job["base_model"] = svc.cfg.policy.model
    round_id = svc.store().enqueue_round(objective, job, max_attempts=svc.cfg.train.max_attempts)
    worker = svc.worker.describe() if svc.worker is not None else "no worker process started by this studio"
    note = (f"Capped: {asked} {what} asked, only {n_available} available, so the round uses {n_available}. "
            if capped else "")
    used = min(asked, n_available)
    parts = [objective]
    if "epochs" in job:
        parts.append(f"{job['epochs']} epoch(s)")
    if "lr" in job:
        parts.append(f"lr {job['lr']:g}")
    if "kl" in job:
        parts.append(f"KL {job['kl']}")
    parts.append(f"up to {used} pairs" if what == "pairs" else f"{used} {what}")
    return Launch(f"{note}Round #{round_id} queued ({', '.join(parts)}); {worker}.", round_id, capped)


def _checked(key: str, value: Any) -> Any:
    """A field's value as the job stores it (None: leave the key out), or ValueError naming the field."""
    spec = tf.spec(key)
    if key in ("source", "stage"):
        return none_if_all(value)
    if key == "max_steps":
        value = int(value or 0)
        if value < 0:
            raise ValueError("max steps must be >= 0 (0: no cap)")
        return value or None
    if spec.kind in ("choice", "radio"):
        if value not in spec.choices:
            raise ValueError(f"{spec.label}: choose one of {', '.join(spec.choices)}")
        return value
    if spec.kind == "data":
        return str(value).strip() if value else None
    if value is None or value == "":
        raise ValueError(f"{spec.label}: a value is needed")
    try:
        number = int(value) if spec.kind == "int" else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{spec.label}: {value!r} is not a number") from None
    if spec.kind == "int" and number != float(value):
        raise ValueError(f"{spec.label}: a whole number is needed, got {value}")
    problem = spec.problem(number)  # the same bounds the page's input shows (app/common/training_fields.py)
    if problem is not None:
        raise ValueError(problem)
    return number


def _check_settings(svc: Services, objective: str, section: str | None, settings: Mapping[str, Any]) -> None:
    """The nested settings as the round will read them (the same config classes), so a bad combination is refused
    here rather than failing the round."""
    if section is None:
        return
    try:
        if section == "arena":
            from training.arena_grpo import ArenaGrpoConfig

            ArenaGrpoConfig(**settings)
        elif section == "r2ag":
            from training.r2ag_grpo import R2agGrpoConfig

            R2agGrpoConfig(**settings)
        elif section == "dynakrag":
            from training.dynakrag_round import ROUND_KEYS

            apply_overrides(svc.cfg, {f"dynakrag.{k}": v for k, v in settings.items() if k not in ROUND_KEYS})
    except (EvoRagError, TypeError) as exc:
        raise ValueError(f"Not launched: {objective} settings: {exc}") from None


def _nothing(what: str, objective: str, job: Mapping[str, Any]) -> str:
    if what == "pairs":
        return (f"no queued pairs match the source/stage filters for {objective.upper()}; queue pairs on the Episode "
                "tab or by `evorag rollout` first.")
    if what == "episodes":
        return (f"no finished episodes are stored for {objective.upper()}; run episodes on the Episode tab or by "
                "`evorag rollout` first.")
    need = NEEDS_TEXT[QUESTION_NEEDS.get(objective, "gold")]
    return f"no {need} in {Path(str(job.get('data'))).name} (after the offset) for {objective.upper()}; pick another data file."


def cancel_round(svc: Services, round_id: int | None) -> str:
    """Cancel a queued round (it never starts) or ask the worker to stop a running one at its next step (its pairs
    go back to the queue, no adapter is registered)."""
    if round_id in (None, ""):
        raise ValueError("choose a queued or running round to cancel")
    r = svc.store().cancel_round(int(round_id))
    if r.status == "cancelled":
        return f"Round #{r.id} cancelled before it started."
    return f"Round #{r.id}: cancel requested; the worker stops it at its next training step and releases its pairs."
