"""Typed results of the store's service methods (frozen dataclasses; JSON columns come back as dicts/lists)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "ADAPTER_ROLES",
    "PAIR_SOURCES",
    "PAIR_STATUSES",
    "STEP_ACTORS",
    "ROUND_STATUSES",
    "ROUND_KL_KEYS",
    "USER_ROLES",
    "EPISODE_SOURCES",
    "DatasetInfo",
    "Outcome",
    "Finish",
    "Sibling",
    "Step",
    "Episode",
    "Judgment",
    "NewPair",
    "Pair",
    "Round",
    "NewLogLine",
    "RoundLogLine",
    "ExpiryReport",
    "Adapter",
    "ACTIVATION_KINDS",
    "Promotion",
    "Activation",
    "User",
    "ANNOTATION_KINDS",
    "ANNOTATION_SOURCES",
    "DECISIONS",
    "NewAnnotationItem",
    "AnnotationItem",
    "AnnotationLabel",
    "AnnotationProgress",
]

# human: a person picked one sampled candidate over another; human-correction: a person acted at a state instead of
# the policy (the Episode tab's "Act yourself"), so their action is preferred over the policy's proposal there;
# answer: two of the reader's candidate answers at one state, the one nearer the gold preferred (`evorag pairs answers`)
PAIR_SOURCES: tuple[str, ...] = ("rollout", "human", "human-correction", "answer")
# who took a step: the policy, or a person acting in its place (the Episode tab's "Act yourself")
STEP_ACTORS: tuple[str, ...] = ("policy", "human")
# queued -> claimed(round) -> consumed, or claimed -> released (= queued again); discarded by a person.
PAIR_STATUSES: tuple[str, ...] = ("queued", "claimed", "consumed", "discarded")
ROUND_STATUSES: tuple[str, ...] = ("queued", "running", "succeeded", "failed", "cancelled")
# per-step KL entries a round may report in `progress` and in `metrics["kl_history"]` rows: `kl` is the optimised
# estimator, `kl_k2` / `kl_k3` both estimates where an objective computes both (training/loop.py StepLog)
ROUND_KL_KEYS: tuple[str, ...] = ("kl", "kl_k2", "kl_k3")
USER_ROLES: tuple[str, ...] = ("admin", "reviewer", "annotator", "viewer")
# where an episode came from: a studio session, an evaluation run (`evorag eval`, the Evaluate tab), a rollout
EPISODE_SOURCES: tuple[str, ...] = ("studio", "eval", "rollout")


@dataclass(frozen=True)
class DatasetInfo:
    id: int
    name: str
    path: str
    n_questions: int
    created_at: datetime


@dataclass(frozen=True)
class Sibling:
    """A candidate action sampled at the same state as a step, with the return of its continued branch."""

    action: str
    argument: str | None = None
    logprob: float | None = None
    branch_return: float | None = None


@dataclass(frozen=True)
class Step:
    """One environment step. `passages` holds JSON values (pid strings or {pid, title, text} objects);
    `signals` are the seven r_t^(k) by name (ret, act, dup, bt, ref, step, ans), `weights` the w_k(t). `actor` says
    who took it: "policy", or "human" (a person acting in the policy's place; `annotator` is who)."""

    t: int
    action: str
    argument: str | None = None
    passages: tuple[Any, ...] = ()
    signals: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    reward: float = 0.0
    judge_verdict: str | None = None
    siblings: tuple[Sibling, ...] = ()
    actor: str = "policy"
    annotator: str | None = None


@dataclass(frozen=True)
class Outcome:
    """How an episode ended, graded: the answer (None: refused or no answer), EM and F1 (None: no gold to grade
    against, e.g. a typed question), whether it refused."""

    answer: str | None
    em: float | None
    f1: float | None
    refused: bool


@dataclass(frozen=True)
class Finish:
    """An episode's end as the store writes it: its return, its status ("finished", or "truncated": out of steps)
    and its graded outcome when known (`EpisodeOps.finish_episode`, or `add_step(..., finish=)` with its last step)."""

    total_return: float
    status: str = "finished"
    outcome: Outcome | None = None


@dataclass(frozen=True)
class Episode:
    """An episode row; `steps` is None when it was not loaded (listings), else ordered by t. `source`, `adapter`,
    `data_path`, `run` and the outcome (`answer`, `em`, `f1`, `refused`) are None where they were not recorded."""

    id: int
    question_id: str
    dataset: str
    question: str
    policy: str
    stage: str
    schedule: str
    config: dict[str, Any]
    status: str
    total_return: float | None
    created_at: datetime
    finished_at: datetime | None
    source: str | None = None  # studio | eval | rollout
    adapter: str | None = None
    data_path: str | None = None
    run: str | None = None
    answer: str | None = None
    em: float | None = None
    f1: float | None = None
    refused: bool | None = None
    n_steps: int | None = None
    steps: tuple[Step, ...] | None = None


@dataclass(frozen=True)
class Judgment:
    id: int
    episode_id: int
    t: int
    judge: str  # gold | llm | human | ...
    verdict: str
    is_override: bool
    who: str | None
    created_at: datetime


@dataclass(frozen=True)
class NewPair:
    """A preference pair to insert: `chosen` is preferred over `rejected` at the shared `prompt` (state)."""

    prompt: str
    chosen: str
    rejected: str
    source: str = "rollout"
    annotator: str | None = None
    margin: float | None = None
    stage: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pair:
    id: int
    prompt: str
    chosen: str
    rejected: str
    source: str
    annotator: str | None
    margin: float | None
    stage: str | None
    status: str
    round_id: int | None
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Round:
    """A training round; `progress` is {step, total, loss, eta} as last reported by its worker."""

    id: int
    objective: str
    config: dict[str, Any]
    status: str
    lease_owner: str | None
    lease_expires_at: datetime | None
    lease_seconds: float | None
    heartbeat_at: datetime | None
    progress: dict[str, Any] | None
    metrics: dict[str, Any] | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int
    max_attempts: int
    cancel_requested_at: datetime | None = None

    @property
    def status_label(self) -> str:
        """The status as people read it: a round claimed again after its worker died is "retrying (attempt 2/2)";
        one waiting for that claim is "queued to retry (attempt 2/2)"; a running round asked to cancel is
        "cancelling" until its worker stops between two steps."""
        if self.status == "running" and self.cancel_requested_at is not None:
            return "cancelling"
        if self.status == "running" and self.attempts > 1:
            return f"retrying (attempt {self.attempts}/{self.max_attempts})"
        if self.status == "queued" and self.attempts > 0:
            return f"queued to retry (attempt {self.attempts + 1}/{self.max_attempts})"
        return self.status


@dataclass(frozen=True)
class NewLogLine:
    """A log record to store for a round (`Store.add_round_logs`); created_at None: now."""

    level: str  # the logging level's name: INFO, WARNING, ERROR, ...
    message: str
    created_at: datetime | None = None


@dataclass(frozen=True)
class RoundLogLine:
    """One stored line of a round's log; `seq` numbers the round's lines from 1 across its attempts (a gap in it:
    lines the store left out to keep the round's log bounded, see store/round_logs.py)."""

    round_id: int
    seq: int
    created_at: datetime
    level: str
    message: str


@dataclass(frozen=True)
class ExpiryReport:
    """What `expire_leases` did: rounds marked failed, rounds put back in the queue, pairs released, and rounds
    asked to cancel whose worker died (cancelled)."""

    failed: tuple[int, ...] = ()
    requeued: tuple[int, ...] = ()
    released_pairs: int = 0
    cancelled: tuple[int, ...] = ()


@dataclass(frozen=True)
class Adapter:
    id: int
    name: str
    path: str
    base_model: str
    round_id: int | None
    objective: str | None
    checksum: str | None
    metrics: dict[str, Any]
    active: bool
    created_at: datetime
    role: str = "policy"  # what it is applied to: "policy" (every LM call) or "reader" (the answer read only)


ADAPTER_ROLES = ("policy", "reader")  # evorag_core/adapters/role.py says what each is applied to


# promoted: its evaluation passed and promotion.auto activated it; activated: an admin activated it (no failed
# evaluation, or none yet); forced: an admin activated it although its evaluation did not pass (reason required);
# deactivated: the base model went live
ACTIVATION_KINDS = ("promoted", "activated", "forced", "deactivated")


@dataclass(frozen=True)
class Promotion:
    """One promotion report: `adapter` evaluated against `against` (None: the base model)."""

    id: int
    adapter: str
    against: str | None
    round_id: int | None
    metric: str
    passed: bool | None  # None: no verdict (too few questions)
    verdict: str
    report: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class Activation:
    """Why `adapter` (None: the base model) went live, when, and who did it."""

    id: int
    adapter: str | None
    kind: str  # one of ACTIVATION_KINDS
    reason: str | None
    who: str | None
    promotion_id: int | None
    created_at: datetime


@dataclass(frozen=True)
class User:
    id: int
    name: str
    role: str
    created_at: datetime


# the annotation queue (store/annotations.py): a preference item is an agent state with K candidate actions, a refusal
# item an evidence set judged answerable / unanswerable
ANNOTATION_KINDS: tuple[str, ...] = ("preference", "refusal")
ANNOTATION_SOURCES: tuple[str, ...] = ("import", "rollout", "studio")
# rank: `ranking` holds tiers of candidate indices, best first; tie: no candidate better; skip: passed on (not a
# label: the item goes to someone else); answerable / unanswerable: a refusal item's verdict
DECISIONS: tuple[str, ...] = ("rank", "tie", "skip", "answerable", "unanswerable")


@dataclass(frozen=True)
class NewAnnotationItem:
    """An item to queue; `payload` is its content (evorag_core/pairs/annotation_items.py documents it); `key` names
    where it came from, and an item whose key is already queued is not queued again."""

    kind: str
    payload: dict[str, Any]
    source: str = "import"
    key: str | None = None


@dataclass(frozen=True)
class AnnotationItem:
    id: int
    kind: str
    source: str
    key: str | None
    payload: dict[str, Any]
    created_at: datetime
    resolution: dict[str, Any] | None = None  # {"decision": ..., "ranking": ...} set by a reviewer
    resolved_by: str | None = None
    resolved_at: datetime | None = None


@dataclass(frozen=True)
class AnnotationLabel:
    id: int
    item_id: int
    annotator: str
    decision: str
    ranking: list[list[int]] | None
    created_at: datetime


@dataclass(frozen=True)
class AnnotationProgress:
    """An annotator's progress (items labelled, items still open to them, items skipped: not labelled) and the
    queue's (items with all their labels or resolved, of all items)."""

    done: int  # items labelled (rank, tie or a refusal verdict); skips are not counted
    open: int
    queue_done: int
    queue_total: int
    skipped: int = 0
