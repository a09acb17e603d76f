"""The Training tab's fields: how each job key an objective reads is asked for (label, kind, bounds) and its default.

Which fields an objective shows is the registry's (`evorag_core.objectives`, `Objective.fields`); this module only
says how a field looks. A key `section.name` is a key of the job's nested settings object, whose class the registry
names (`Objective.config`; defaults from there, `training.launch.settings_defaults`): `arena` and `r2ag` (the GRPO
configs in training/objectives/arena_grpo/config.py and r2ag_grpo/config.py), `dynakrag` (the round's own
`questions` (0: all) and `offset`, plus the `[dynakrag]` section of the studio's config).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from evorag_core.config import CONTINUATION_TARGETS, Allowed, Config, rule_of
from evorag_core.env.scheduler import STAGES
from evorag_core.objectives import OBJECTIVES
from evorag_core.store.records import PAIR_SOURCES

__all__ = ["KL_ESTIMATORS", "LR_STEP", "FieldSpec", "FIELDS", "FIELD_KEYS", "fields_of", "section_of", "defaults",
           "switch_values", "spec"]

KL_ESTIMATORS = ("k3", "k2")
LR_STEP = 1e-5  # ArrowUp on 5e-5 gives 6e-5 (Gradio's default step 1 would give 1.00005)


@dataclass(frozen=True)
class FieldSpec:
    """How one field is asked for. Its allowed values are one rule set for the page (the input's bounds) and the
    launch (`app.tabs.training.handlers`): the config setting's rule where the field is a setting (`rule`, e.g.
    "train.lr": `evorag_core.config` RULES), else `minimum` / `maximum` here."""

    key: str  # a job key (training/job.py), or section.key of a nested settings object
    label: str
    kind: Literal["int", "float", "choice", "radio", "data"]
    minimum: float | None = None
    step: float | None = None
    choices: tuple[str, ...] = ()
    elem: str = ""  # the element id where tests and docs name it already
    maximum: float | None = None
    rule: str = ""  # the config setting whose rule bounds this field ("" : minimum / maximum)

    @property
    def elem_id(self) -> str:
        return self.elem or "evo-f-" + self.key.replace(".", "-").replace("_", "-")

    @property
    def allowed(self) -> Allowed | None:
        """The config setting's rule (None without `rule`, or when the setting has none)."""
        return rule_of(self.rule) if self.rule else None

    @property
    def bounds(self) -> tuple[float | None, float | None]:
        """(lowest, highest) the input accepts, both inclusive (None: open)."""
        allowed = self.allowed
        if allowed is not None:
            return allowed.lo, allowed.hi
        return self.minimum, self.maximum

    def problem(self, number: float) -> str | None:
        """Why `number` is not allowed here, in words (None: allowed)."""
        allowed = self.allowed
        if allowed is not None:
            return None if allowed.ok(number) else f"{self.label} must be {allowed.what}, got {number:g}"
        if self.minimum is not None and number < self.minimum:
            return f"{self.label} must be at least {self.minimum:g}, got {number:g}"
        if self.maximum is not None and number > self.maximum:
            return f"{self.label} must be at most {self.maximum:g}, got {number:g}"
        return None


_G = "Replies per question (G)"
FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("data", "Data file (the questions it trains on)", "data", elem="evo-train-data"),
    FieldSpec("pairs", "Pairs to use", "int", 1, 1, elem="evo-n-pairs"),
    FieldSpec("episodes", "Episodes (newest stored)", "int", 1, 1, elem="evo-n-episodes"),
    FieldSpec("source", "Pair source", "choice", choices=("all", *PAIR_SOURCES)),
    FieldSpec("stage", "Stage", "choice", choices=("all", *STAGES)),
    FieldSpec("arena.questions", "Questions to use", "int", 1, 1),
    FieldSpec("arena.offset", "Skip the first N questions", "int", 0, 1),
    FieldSpec("arena.group_size", _G, "int", 2, 1),
    FieldSpec("arena.questions_per_step", "Questions per step", "int", 1, 1),
    FieldSpec("arena.temperature", "Rollout temperature", "float", 0.05, 0.05, maximum=2.0),
    FieldSpec("arena.max_new_tokens", "Max new tokens", "int", 1, 16),
    FieldSpec("arena.bonus", "Bonus (0: no-bonus ablation)", "float", 0, 1),
    FieldSpec("r2ag.questions", "Questions to use", "int", 1, 1),
    FieldSpec("r2ag.offset", "Skip the first N questions", "int", 0, 1),
    FieldSpec("r2ag.group_size", "Expansions per state (G)", "int", 2, 1),
    FieldSpec("r2ag.states_per_step", "Tree states per step", "int", 1, 1),
    FieldSpec("r2ag.iterations", "Iterations (progressive passes)", "int", 1, 1),
    FieldSpec("r2ag.temperature", "Rollout temperature", "float", 0.05, 0.05, maximum=2.0),
    FieldSpec("r2ag.max_new_tokens", "Max new tokens", "int", 1, 16),
    FieldSpec("dynakrag.questions", "Questions to explore (0: all)", "int", 0, 1),
    FieldSpec("dynakrag.offset", "Skip the first N questions", "int", 0, 1),
    FieldSpec("dynakrag.train_rollouts", "Rollouts per question", "int", 1, 1, rule="dynakrag.train_rollouts"),
    FieldSpec("dynakrag.continuation_target", "Continuation target", "choice", choices=tuple(CONTINUATION_TARGETS)),
    FieldSpec("dynakrag.n_estimators", "Trees per forest", "int", 1, 10, rule="dynakrag.n_estimators"),
    FieldSpec("dynakrag.min_samples_leaf", "Min samples per leaf", "int", 1, 1, rule="dynakrag.min_samples_leaf"),
    FieldSpec("epochs", "Epochs", "int", 1, 1, elem="evo-epochs", rule="train.epochs"),
    FieldSpec("lr", "Learning rate (e.g. 5e-5)", "float", None, LR_STEP, elem="evo-lr", rule="train.lr"),
    FieldSpec("beta", "DPO beta", "float", None, 0.01, rule="train.beta"),
    FieldSpec("vf_coef", "Value loss weight", "float", 0, 0.1),
    FieldSpec("kl", "KL estimator", "radio", choices=KL_ESTIMATORS),
    FieldSpec("max_steps", "Max steps (0: no cap)", "int", 0, 1, elem="evo-max-steps"),
)
FIELD_KEYS: tuple[str, ...] = tuple(f.key for f in FIELDS)
_SPEC = {f.key: f for f in FIELDS}

# An objective's own defaults where they differ from the shared ones (ARENA optimises k2; k3 is its ablation).
_OBJECTIVE_DEFAULTS: Mapping[str, Mapping[str, Any]] = {"arena-grpo": {"kl": "k2"}}


def fields_of(objective: str) -> tuple[str, ...]:
    """The field keys `objective` shows (the registry's `fields`); none for an unknown objective."""
    known = OBJECTIVES.get(objective)
    return known.fields if known is not None else ()


def section_of(objective: str) -> str | None:
    """The nested settings object the objective's fields fill (arena, r2ag, dynakrag), or None."""
    known = OBJECTIVES.get(objective)
    return known.section if known is not None else None


def defaults(cfg: Config, default_data: str) -> dict[str, Any]:
    """Every field's default value: the studio's [train] and [dynakrag] sections, the objectives' config classes'
    defaults (the nested settings)."""
    from training.launch import settings_defaults

    t = cfg.train
    out: dict[str, Any] = {"data": default_data, "pairs": 64, "episodes": 32, "source": "all", "stage": "all",
                           "epochs": t.epochs, "lr": t.lr, "beta": t.beta, "vf_coef": 0.5, "kl": t.kl, "max_steps": 0}
    out.update({k: v for k, v in settings_defaults().items() if k in _SPEC})
    out.update({k: getattr(cfg.dynakrag, k.split(".", 1)[1]) for k in FIELD_KEYS
                if k.startswith("dynakrag.") and k not in out})
    return out


def switch_values(objective: str, shared: Mapping[str, Any]) -> dict[str, Any]:
    """The values a switch to `objective` sets: its own defaults, and the shared default (from `shared`) for the
    fields another objective has its own default for (so switching back restores it)."""
    keys = sorted(set().union(*_OBJECTIVE_DEFAULTS.values()))
    own = _OBJECTIVE_DEFAULTS.get(objective, {})
    return {k: own.get(k, shared[k]) for k in keys}


def spec(key: str) -> FieldSpec:
    return _SPEC[key]
