"""The training objectives, one registry: the CLI (`evorag train --objective`), the settings check (`[train]
objective`), the worker (which training module runs a queued round) and the studio's Training tab all read it.

Every objective runs as a queued round: `module` is the `training` module whose `run(job, store, on_progress)` the
worker calls (`training/objectives/<folder>/round.py`); `config` names the class of the objective's own settings
(the job's nested object, `training/objectives/<folder>/config.py`), or None when [train] holds them all. Both are
dotted paths, imported by the trainer (`training.rounds`, `training.launch`): the library does not import `training`.
A new objective is its folder under training/objectives/ and one line here.

`in_process` marks the one that `evorag train` runs in its own process instead of queueing it (DynaKrag's controller
fit: seconds of forests after the exploration's LM calls). `data` is what a round trains on;
`artifact` what it produces (a LoRA adapter registered in the store, or the DynaKrag controller folder that
`evorag eval --method dynakrag` loads); `studio` marks the objectives the Training tab launches; `logs_kl` whether a
round logs a per-step KL to its reference (the tab's KL chart), `logs_loss` whether it logs a loss per step.

`fields` are the job keys a round of the objective reads, in the order the Training tab shows them (the keys of
training/job.py; `section.key` is a key of the objective's nested settings object, its `section`: `arena` / `r2ag`
(ArenaGrpoConfig, R2agGrpoConfig), `dynakrag` (DynakragRoundConfig's keys and the `[dynakrag]` section's for this
round)).
`charts` are the per-step metrics the round reports in its progress dicts (besides loss and KL), one chart each.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, Mapping

__all__ = ["Chart", "Objective", "OBJECTIVES", "WORKER_OBJECTIVES", "STUDIO_OBJECTIVES", "EVALUATE_JOB"]


@dataclass(frozen=True)
class Chart:
    """One chart of the Training tab: the per-step progress keys drawn as lines (each where the round logged it)."""

    title: str
    keys: tuple[str, ...]
    y: str = "value"


@dataclass(frozen=True)
class Objective:
    name: str
    module: str  # the training module whose run(job, store, on_progress) the worker calls
    data: Literal["pairs", "episodes", "questions"]
    studio: bool
    logs_kl: bool
    summary: str
    fields: tuple[str, ...] = ()
    charts: tuple[Chart, ...] = ()
    logs_loss: bool = True
    artifact: Literal["adapter", "controller"] = "adapter"
    in_process: bool = False  # `evorag train` runs it in its own process (the studio queues it for the worker)
    config: str | None = None  # "module.Class" of the objective's own settings (None: [train]'s only)
    needs: Literal["passages", "gold"] = "gold"  # data "questions": what makes a question usable (its own passages,
    #                                            or gold passages in the corpus); the rounds skip the others

    @property
    def section(self) -> str | None:
        """The job key of the nested settings object its fields fill (`arena`, `r2ag`, `dynakrag`), or None."""
        return next((k.split(".", 1)[0] for k in self.fields if "." in k), None)


_GRPO_REWARD = ("reward", "format", "accuracy", "relevance", "bonus")

OBJECTIVES: Mapping[str, Objective] = MappingProxyType({o.name: o for o in (
    Objective("dpo", "training.objectives.dpo.round", "pairs", True, False, "DPO (TRL) on queued preference pairs",
              fields=("pairs", "source", "stage", "epochs", "lr", "beta", "max_steps"),
              charts=(Chart("Reward margin (chosen - rejected)", ("margin",), "margin"),
                      Chart("Pair accuracy (chosen preferred)", ("accuracy",), "accuracy"))),
    Objective("grpo", "training.objectives.grpo.round", "episodes", True, True,
              "step-level GRPO on stored episodes' siblings",
              fields=("episodes", "stage", "epochs", "lr", "kl", "max_steps"),
              charts=(Chart("Policy loss", ("policy_loss",), "loss"),
                      Chart("Clipped share and ratio", ("clip_frac", "ratio_mean")))),
    Objective("ppo", "training.objectives.ppo.round", "episodes", True, True,
              "PPO with a value head and GAE on stored episodes",
              fields=("episodes", "stage", "epochs", "lr", "kl", "vf_coef", "max_steps"),
              charts=(Chart("Policy and value loss", ("policy_loss", "value_loss"), "loss"),
                      Chart("Clipped share", ("clip_frac", "value_clip_frac"), "share"))),
    Objective("arena-grpo", "training.objectives.arena_grpo.round", "questions", True, True,
              "ARENA's GRPO on the data file's questions",
              fields=("data", "arena.questions", "arena.offset", "arena.group_size", "arena.questions_per_step",
                      "arena.temperature", "arena.max_new_tokens", "arena.bonus", "epochs", "lr", "kl", "max_steps"),
              charts=(Chart("Reward (group means)", _GRPO_REWARD, "reward"),),
              config="training.objectives.arena_grpo.config.ArenaGrpoConfig", needs="passages"),
    Objective("r2ag-grpo", "training.objectives.r2ag_grpo.round", "questions", True, True,
              "R²AG's tree-steering GRPO on the data file",
              fields=("data", "r2ag.questions", "r2ag.offset", "r2ag.group_size", "r2ag.states_per_step",
                      "r2ag.iterations", "r2ag.temperature", "r2ag.max_new_tokens", "epochs", "lr", "kl", "max_steps"),
              charts=(Chart("Reward (group means)", ("reward", "multi_hit", "joint_hit", "average_precision", "format"),
                            "reward"),
                      Chart("Forest (tree states)", ("forest",), "states")),
              config="training.objectives.r2ag_grpo.config.R2agGrpoConfig"),
    Objective("dynakrag", "training.objectives.dynakrag.round", "questions", True, False,
              "fit the DynaKrag controller on the data file (no adapter: evorag eval --method dynakrag loads it)",
              fields=("data", "dynakrag.questions", "dynakrag.offset", "dynakrag.train_rollouts",
                      "dynakrag.continuation_target", "dynakrag.n_estimators", "dynakrag.min_samples_leaf"),
              charts=(Chart("Exploration: support recall at each rollout's end", ("final_support",), "recall"),
                      Chart("Transitions collected", ("transitions",), "transitions")),
              logs_loss=False, artifact="controller", in_process=True,
              config="training.objectives.dynakrag.config.DynakragRoundConfig"),
)})
WORKER_OBJECTIVES: tuple[str, ...] = tuple(OBJECTIVES)
STUDIO_OBJECTIVES: tuple[str, ...] = tuple(n for n, o in OBJECTIVES.items() if o.studio)
# The other kind of job in the rounds queue: gated promotion's evaluation of an adapter (training/evaluate_round.py;
# no training, so not an objective: `evorag train` and the Training tab's objective list do not offer it)
EVALUATE_JOB = "evaluate"
