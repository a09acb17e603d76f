"""Launching a round, one home for `evorag train` and the studio's Training tab: what a round of an objective could
use now, a request capped to it, and the job checked as the worker will read it.

    available(objective, store, runtime, ...)  ("pairs" | "episodes" | "questions", how many there are now)
    cap(job, objective, store, runtime, ...)    the job with its request capped to what is available (`Capped`);
                                               ValueError "Not launched: ..." when nothing is
    check_job(objective, job, cfg, home)       `RoundJob.from_config` and the objective's config class (`from_job`):
                                               the ConfigError the worker would fail the round with, raised now
    settings_defaults()                         "section.key" -> default, from every objective's config class

The store and the data files' runtimes come as getters (the studio's `svc.store`, `svc.runtime`: cached, and read
only when the objective's data needs them). Light on purpose: torch-free apart from `import training`'s re-exports,
and the objectives' config modules are imported on first use.
"""
from __future__ import annotations

import dataclasses
import importlib
import weakref
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from evorag_core.errors import ConfigError
from evorag_core.objectives import OBJECTIVES

from training.job import RoundJob

if TYPE_CHECKING:
    from evorag_core.config import Config
    from evorag_core.runtime import Runtime
    from evorag_core.store import Store

__all__ = ["Capped", "available", "cap", "check_job", "config_class", "needs_text", "settings_defaults",
           "usable_questions"]

StoreFn = Callable[[], "Store"]
RuntimeFn = Callable[[str | None], "Runtime"]
_NEEDS_TEXT = {"passages": "questions with passages", "gold": "questions with gold passages"}


def config_class(objective: str) -> type | None:
    """The class of the objective's own settings (the registry's `config`), or None (unknown or [train] only)."""
    known = OBJECTIVES.get(objective)
    if known is None or known.config is None:
        return None
    module, _, name = known.config.rpartition(".")
    return getattr(importlib.import_module(module), name)


@lru_cache(maxsize=None)
def settings_defaults() -> dict[str, Any]:
    """Every nested settings key's default, e.g. {"arena.group_size": 4, ..., "dynakrag.questions": 0}."""
    out: dict[str, Any] = {}
    for name, objective in OBJECTIVES.items():
        cls = config_class(name)
        if cls is not None and objective.section is not None:
            out.update({f"{objective.section}.{k}": v for k, v in dataclasses.asdict(cls()).items()})
    return out


def needs_text(objective: str) -> str:
    """What the objective's usable questions are, in words ("questions with gold passages")."""
    return _NEEDS_TEXT[OBJECTIVES[objective].needs if objective in OBJECTIVES else "gold"]


_USABLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Runtime -> {need: question ids} (timer ticks)


def usable_questions(runtime: Runtime, objective: str) -> list[str]:
    """Ids of the data file's questions a round of `objective` trains on (in file order), worked out once per
    loaded data file (the studio's availability line is recomputed on every timer tick)."""
    need = OBJECTIVES[objective].needs if objective in OBJECTIVES else "gold"
    known = _USABLE.setdefault(runtime, {})
    if need not in known:
        if need == "passages":
            known[need] = [q.id for q in runtime.dataset.questions if q.passages]
        else:
            known[need] = [q.id for q in runtime.dataset.questions if runtime.corpus_for(q).gold_for(q)]
    return known[need]


def available(objective: str, store: StoreFn, runtime: RuntimeFn, source: str | None = None,
              stage: str | None = None, data: str | None = None) -> tuple[str, int]:
    """What a round of `objective` could use now: ("pairs", queued pairs matching the filters) for DPO,
    ("episodes", finished stored episodes of the stage) for GRPO/PPO, ("questions", usable questions of the data
    file) for ARENA, R²AG and DynaKrag (queued rounds that have not started yet may take pairs or episodes first)."""
    kind = OBJECTIVES[objective].data if objective in OBJECTIVES else "episodes"
    if kind == "questions":
        return "questions", len(usable_questions(runtime(data or None), objective))
    if kind == "pairs":
        return "pairs", sum(store().count_pairs("status", status="queued", source=source, stage=stage).values())
    return "episodes", store().count_finished_episodes(stage=stage)


@dataclass(frozen=True)
class Capped:
    """A launch's job with its request capped: `what` (pairs, episodes, questions), how many it asked for and how
    many there are."""

    job: dict[str, Any]
    what: str
    asked: int
    available: int

    @property
    def capped(self) -> bool:
        return self.asked > self.available

    @property
    def used(self) -> int:
        return min(self.asked, self.available)


def cap(job: Mapping[str, Any], objective: str, store: StoreFn, runtime: RuntimeFn, source: str | None = None,
        stage: str | None = None) -> Capped:
    """`job` (not modified) with a request for more pairs, episodes or questions than are available capped to what
    is available; ValueError ("Not launched: ...") when none is. A question objective counts the usable questions
    after its settings' offset, and asks for all of them when its `questions` is 0 (DynaKrag explores every one)."""
    job = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in job.items()}
    section = OBJECTIVES[objective].section if objective in OBJECTIVES else None
    what, n_available = available(objective, store, runtime, source, stage, job.get("data"))
    if what == "questions":
        settings = job.setdefault(section, {})
        offset = int(settings.get("offset") or 0)
        if offset:  # the rounds skip the file's first `offset` questions, then keep the usable ones
            rt = runtime(job.get("data") or None)
            usable = set(usable_questions(rt, objective))
            n_available = sum(q.id in usable for q in rt.dataset.questions[offset:])
        asked = int(settings.get("questions") or 0) or n_available  # dynakrag: 0 explores every question
    else:
        asked = int(job.get(what) or 0)
    if n_available == 0:
        raise ValueError(f"Not launched: {_nothing(what, objective, job)}")
    if asked > n_available:
        if what == "questions":
            job[section]["questions"] = n_available
        else:
            job[what] = n_available
    return Capped(job, what, asked, n_available)


def _nothing(what: str, objective: str, job: Mapping[str, Any]) -> str:
    if what == "pairs":
        return (f"no queued pairs match the source/stage filters for {objective.upper()}; queue pairs on the Episode "
                "tab or by `evorag rollout` first.")
    if what == "episodes":
        return (f"no finished episodes are stored for {objective.upper()}; run episodes on the Episode tab or by "
                "`evorag rollout` first.")
    return (f"no {needs_text(objective)} in {Path(str(job.get('data'))).name} (after the offset) for "
            f"{objective.upper()}; pick another data file.")


def check_job(objective: str, job: Mapping[str, Any], cfg: Config, home: Path) -> RoundJob:
    """The job read as the worker will read it: `RoundJob.from_config` (every job key and [train] value), then the
    objective's nested settings by its config class (`from_job`). A value the worker would fail the round for is a
    ConfigError here (its message without the worker's "round N: "), so nothing is queued."""
    try:
        read = RoundJob.from_config(0, objective, job, cfg, home)
        cls = config_class(read.objective)
        if cls is not None:
            cls.from_job(read)
    except ConfigError as exc:
        raise ConfigError(str(exc).removeprefix("round 0: ")) from None
    return read
