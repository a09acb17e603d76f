"""Compare handler: one question run to the end by two policies, one after the other, then aligned
(`app/tabs/compare/view.py`), with the chosen replies' log-probabilities under both models (`shift.py`). Both
episodes are stored like any studio episode, so they are also in the store's history."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

from app.common import views
from app.common.handlers import adapter_lookup
from app.common.pickers import policy_options
from app.common.services import Services
from app.common.session import EpisodeSession, EpisodeSettings
from app.tabs.compare import view as cmp
from app.tabs.compare.shift import compare_shift

__all__ = ["CompareStatus", "compare_policies"]

LM_CHOICES = ("oracle",)  # besides lm:* values: the script policy needs a script, so it is not offered here


@dataclass(frozen=True)
class CompareStatus:
    progress: str  # HTML: what is running now, or what ran
    result: str  # HTML: the comparison, "" until both episodes are done


def _check_choice(choice: str) -> None:
    if not choice:
        raise ValueError("choose a policy for both sides (A and B)")
    if choice not in LM_CHOICES and not choice.startswith("lm:"):
        raise ValueError(f"compare runs the oracle or a language-model policy, not {choice!r}")


def compare_policies(svc: Services, settings: EpisodeSettings, policy_b: str) -> Iterator[CompareStatus]:
    """Run `settings` (its policy is side A) to the end, then the same question with `policy_b`; yields the
    progress after every step and finally the comparison. The same settings (stage, schedule, preset) for both."""
    policy_a = settings.policy
    for choice in (policy_a, policy_b):
        _check_choice(choice)
    if policy_a == policy_b:
        raise ValueError("A and B are the same policy; pick two different ones (for instance base and an adapter)")
    if settings.free_question.strip():
        raise ValueError("compare runs a question of the data file (typed questions have no gold answer to grade)")
    rt = svc.runtime(settings.data_path or None)
    question = rt.dataset.get(settings.question_id) if settings.question_id else rt.dataset.questions[0]
    settings = replace(settings, question_id=question.id, script="")
    label_a, label_b = cmp.side_labels(policy_options(svc), policy_a, policy_b)
    sessions: list[EpisodeSession] = []
    for side, choice, label in (("A", policy_a, label_a), ("B", policy_b, label_b)):
        yield CompareStatus(views.message_html(f"{side} · {label}: loading the policy and starting…", "info"), "")
        policy = svc.policies.make(choice, adapter_lookup=adapter_lookup(svc))
        session = EpisodeSession.start(replace(settings, policy=choice), rt, policy, svc.store_or_none())
        while not session.done:
            step = session.step()
            yield CompareStatus(views.message_html(
                f"{side} · {label}: step t={step.t} done ({session.step_seconds[-1]:.1f} s)", "info"), "")
        sessions.append(session)
    a, b = sessions
    result = cmp.compare(question, a.record, label_a, b.record, label_b, ids=(a.db_id, b.db_id))
    yield CompareStatus(views.message_html("Scoring the chosen replies under both models…", "info"), "")
    shift = compare_shift(svc, rt.corpus_for(question).passages, (policy_a, policy_b), (a.record, b.record),
                          (label_a, label_b), adapter_lookup(svc))
    done = (f"Ran both: A {len(a.record.steps)} steps, B {len(b.record.steps)} steps "
            f"({sum(a.step_seconds) + sum(b.step_seconds):.1f} s).")
    yield CompareStatus(views.message_html(done, "ok"), cmp.comparison_html(result) + shift)
