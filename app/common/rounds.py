"""Queue a training round for the worker and cancel one: shared by the Training tab (every objective) and the
DynaKrag tab (its controller's round). A launch is checked against what exists (pairs, episodes or usable questions)
and against the round's own config classes before anything is queued."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from evorag_core.errors import EvoRagError
from evorag_core.objectives import STUDIO_OBJECTIVES

from app.common import training_fields as tf
from app.common.handlers import none_if_all
from app.common.services import Services

__all__ = ["OBJECTIVES", "Launch", "available", "launch_job", "cancel_round"]

OBJECTIVES = STUDIO_OBJECTIVES  # the objectives the studio launches (evorag_core.objectives)


@dataclass(frozen=True)
class Launch:
    """What Launch did: the message to show, the round queued, and whether the request was capped."""

    message: str
    round_id: int
    capped: bool = False


def available(svc: Services, objective: str, source: str | None = None, stage: str | None = None,
              data: str | None = None) -> tuple[str, int]:
    """What a round of `objective` could use now (training.launch.available): ("pairs", n), ("episodes", n) or
    ("questions", n); "all" as a source or stage filter is no filter."""
    from training import launch as tl

    return tl.available(objective, svc.store, svc.runtime, none_if_all(source), none_if_all(stage), data)


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
    from training import launch as tl

    try:  # the job as the worker will read it (its nested settings by the objective's config class)
        tl.check_job(objective, job, svc.cfg, svc.home)
    except EvoRagError as exc:
        raise ValueError(f"Not launched: {objective} settings: {exc}") from None
    capped = tl.cap(job, objective, svc.store, svc.runtime, none_if_all(values.get("source")),
                    none_if_all(values.get("stage")))
    job, what, asked, n_available = capped.job, capped.what, capped.asked, capped.available
    job["base_model"] = svc.cfg.policy.model
    round_id = svc.store().enqueue_round(objective, job, max_attempts=svc.cfg.train.max_attempts)
    worker = svc.worker.describe() if svc.worker is not None else "no worker process started by this studio"
    note = (f"Capped: {asked} {what} asked, only {n_available} available, so the round uses {n_available}. "
            if capped.capped else "")
    used = capped.used
    parts = [objective]
    if "epochs" in job:
        parts.append(f"{job['epochs']} epoch(s)")
    if "lr" in job:
        parts.append(f"lr {job['lr']:g}")
    if "kl" in job:
        parts.append(f"KL {job['kl']}")
    parts.append(f"up to {used} pairs" if what == "pairs" else f"{used} {what}")
    return Launch(f"{note}Round #{round_id} queued ({', '.join(parts)}); {worker}.", round_id, capped.capped)


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


def cancel_round(svc: Services, round_id: int | None) -> str:
    """Cancel a queued round (it never starts) or ask the worker to stop a running one at its next step (its pairs
    go back to the queue, no adapter is registered)."""
    if round_id in (None, ""):
        raise ValueError("choose a queued or running round to cancel")
    r = svc.store().cancel_round(int(round_id))
    if r.status == "cancelled":
        return f"Round #{r.id} cancelled before it started."
    return f"Round #{r.id}: cancel requested; the worker stops it at its next training step and releases its pairs."
