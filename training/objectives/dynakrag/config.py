"""DynaKrag's side of a `dynakrag` round: the job's `dynakrag` object holds the round's own keys
(`DynakragRoundConfig`: which of the data file's questions it explores) and any [dynakrag] key for this round's fit."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from evorag_core.config import Config, apply_overrides
from evorag_core.errors import ConfigError

if TYPE_CHECKING:
    from training.job import RoundJob

__all__ = ["DynakragRoundConfig", "ROUND_KEYS", "dynakrag_config_from_job"]


@dataclass(frozen=True)
class DynakragRoundConfig:
    """The round's own keys of the job's `dynakrag` object (the others are [dynakrag] keys)."""

    questions: int = 0  # questions explored (0: every question of the data file) ...
    offset: int = 0  # ... after skipping this many

    @classmethod
    def from_job(cls, job: RoundJob) -> DynakragRoundConfig:
        """The job's questions and offset, its [dynakrag] keys checked too (ConfigError naming a bad one)."""
        _, questions, offset = dynakrag_config_from_job(job)
        return cls(questions, offset)


ROUND_KEYS = tuple(f.name for f in dataclasses.fields(DynakragRoundConfig))  # the rest of the object: [dynakrag]


def dynakrag_config_from_job(job: RoundJob) -> tuple[Config, int, int]:
    """(the config with the job's [dynakrag] keys applied, questions (0: all), offset); a bad key or value is a
    ConfigError that names it."""
    raw = job.raw.get("dynakrag") or {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"round {job.round_id}: 'dynakrag' must be an object of [dynakrag] keys")
    if job.config is None:
        raise ConfigError(f"round {job.round_id}: the dynakrag round needs the job's whole config (RoundJob.from_config)")
    try:
        questions, offset = int(raw.get("questions") or 0), int(raw.get("offset") or 0)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"round {job.round_id}: bad dynakrag value ({exc})") from None
    if questions < 0 or offset < 0:
        raise ConfigError(f"round {job.round_id}: dynakrag.questions and dynakrag.offset must be >= 0")
    overrides = {f"dynakrag.{k}": v for k, v in raw.items() if k not in ROUND_KEYS}
    return apply_overrides(job.config, overrides), questions, offset
