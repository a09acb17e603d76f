"""One browser session's episode, as the page's `gr.State` holds it: the settings the page picked
(`EpisodeSettings`) and the library's live episode started from them (`EpisodeSession`, an
`evorag_core.live.episode.LiveEpisode`: stepping, proposals, human steps, overrides, siblings and the store all live
there). Handlers mutate it in place (one session, one user, one event at a time)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from evorag_core.env.scheduler import PRESETS, SCHEDULES, STAGES
from evorag_core.errors import ConfigError
from evorag_core.live.episode import LiveEpisode, LivePolicy, free_question
from evorag_core.runtime import Runtime

if TYPE_CHECKING:
    from evorag_core.store import Store

__all__ = ["EpisodeSettings", "EpisodeSession", "free_question", "session_key"]


@dataclass(frozen=True)
class EpisodeSettings:
    data_path: str = ""  # empty: the studio's default data file
    question_id: str = ""  # empty: the first question of the file
    free_question: str = ""  # when set, asked instead of question_id, over the file's pooled corpus
    policy: str = "oracle"
    stage: str = "discovery"
    schedule: str = "time-dynamic"
    preset: str = "full"
    script: str = ""

    def check(self) -> None:
        for what, value, allowed in (("stage", self.stage, STAGES), ("schedule", self.schedule, SCHEDULES),
                                     ("preset", self.preset, tuple(PRESETS))):
            if value not in allowed:
                raise ConfigError(f"unknown {what} {value!r}; expected one of {', '.join(allowed)}")


class EpisodeSession(LiveEpisode):
    """The live episode of one browser session, started from the page's settings."""

    @classmethod
    def start(cls, settings: EpisodeSettings, runtime: Runtime, policy: LivePolicy, store: Store | None = None
              ) -> "EpisodeSession":
        """The typed question when there is one, else the picked question (the file's first when none is)."""
        settings.check()
        free = bool(settings.free_question.strip())
        if free:
            question = free_question(settings.free_question, runtime.dataset.name)
        elif settings.question_id:
            question = runtime.dataset.get(settings.question_id)
        else:
            question = runtime.dataset.questions[0]
        return cls.open(runtime, question, policy, store, stage=settings.stage, schedule=settings.schedule,
                        preset=settings.preset, free=free)


def session_key(request) -> str:
    """The browser session of an event's `gr.Request` ("" without one): the key of that page's Stop flags."""
    return getattr(request, "session_hash", None) or ""
