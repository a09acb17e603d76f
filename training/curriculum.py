"""The two-stage curriculum (SPEC §3, §5): Discovery -> Refinement, rounds of
rollout -> pairs -> preference model -> policy update -> dev evaluation, with the stage switch decided by the
EMA / tolerance / patience controller (`evorag_core.env.scheduler.StageSwitchController`) on the mean dev return.

Each round:
1. rollout: sibling-branch rollouts (`evorag_core.pairs.rollout.run_rollouts`) of the current policy (the active adapter,
   hot-swapped into one backend) on the next `train_per_round` training questions, with the stage's weights;
   episodes, siblings and pairs go to the store;
2. preference model: the multi-head model is fitted on the stored pairs (`evorag_core.preference`) and its held-out
   accuracy logged (too few pairs: logged and skipped);
3. policy update: a round of `train.objective` is queued (DPO: the pairs this round's rollout stored - up to what
   `max_steps` trains on, the oldest first; GRPO/PPO: this round's episodes; reference = the adapter the round rolled
   out with) and run by the worker code (`training.worker.process_one`; if an
   external worker takes it first, its end is awaited); its adapter is activated (verified);
4. dev evaluation: greedy episodes on the dev questions with the stage's weights; the mean return goes to the
   controller, whose decision (stage, EMA, improvement, stale count) is logged.
The loop ends when both stages have run at least one round, or after `rounds` rounds.

`single_stage` runs every round in one stage for the whole budget (the controller's EMA is still logged): the
single-stage baseline the curriculum is measured against (bench/curriculum.py). `done` resumes a run: the records of
the rounds already finished (as `evorag train --curriculum --state FILE` keeps them, one JSON line per round) replay
the controller, and the loop goes on at the next round; a round cut off mid-way is run again from its rollout (the
cut-off attempt's stored pairs stay queued, but the redone DPO round trains on its own rollout's pairs only).

Why a DPO round claims only its own rollout's pairs (`pairs_after`): claiming the stage's oldest queued pairs, with
`max_steps` capping a round below what a rollout stores, made later rounds train on the first rounds' pairs (rolled
out by older policies) and never on their own (docs/curriculum.md, the session-sized HotpotQA run).

`curriculum_summary` gives what the run measured: the controller's settings, the switch (round, EMA, improvement,
stale count) and the dev-return curve.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from evorag_core.config import Config
from evorag_core.env.scheduler import STAGES, StageSwitchController
from evorag_core.errors import ConfigError, TrainingError
from evorag_core.objectives import OBJECTIVES

if TYPE_CHECKING:
    from evorag_core.methods.base import EpisodePolicy
    from evorag_core.runtime import Runtime
    from evorag_core.store import Store
    from evorag_core.types import Question

__all__ = ["CurriculumPlan", "controller_step", "curriculum_summary", "replay_controller", "run_curriculum",
           "run_curriculum_command", "read_state", "STAGES_BOTH"]

STAGES_BOTH = frozenset({"discovery", "refinement"})

log = logging.getLogger("evorag.curriculum")


@dataclass(frozen=True)
class CurriculumPlan:
    data: Path
    rounds: int = 6  # round budget
    train_per_round: int = 8  # rollout questions per round
    dev: int = 8  # dev questions (the data file's first ones; training uses the rest)
    single_stage: str | None = None  # every round in this stage, for the whole budget (no switch): the baseline
    corpus_from: tuple[Path, ...] = ()  # retrieve from the pooled passages of these files instead of data's own
    max_steps: int | None = None  # optimiser steps per policy round at most (None: the round's epochs)
    decisions: list[dict[str, Any]] = field(default_factory=list, compare=False)


def controller_step(controller: StageSwitchController, stage: str, mean_return: float,
                    single_stage: str | None = None) -> dict[str, Any]:
    """Feed one round's mean dev return to the controller; the round record's decision fields: the controller's
    log entry (mean return, EMA, improvement, stale count, its stage), the next round's stage and whether it switched.
    With `single_stage` the next stage is that stage whatever the controller says (its entry is still logged)."""
    chosen = controller.update(mean_return)
    next_stage = single_stage or chosen
    return {"controller": dict(controller.history[-1]), "next_stage": next_stage, "switched": next_stage != stage}


def replay_controller(cfg: Config, records: Sequence[dict[str, Any]],
                      single_stage: str | None = None) -> StageSwitchController:
    """A controller fed the dev returns of finished rounds (resume); fails when its decisions differ from the
    recorded ones (the records were written with other [curriculum] settings or another --single-stage)."""
    controller = StageSwitchController(cfg.curriculum.ema_alpha, cfg.curriculum.epsilon, cfg.curriculum.patience)
    stage = single_stage or controller.stage
    for i, record in enumerate(records, start=1):
        if record.get("round") != i or record.get("stage") != stage:
            raise TrainingError(f"curriculum state: record {i} is round {record.get('round')} in stage "
                                f"{record.get('stage')!r}; the replay expects round {i} in {stage!r}")
        decision = controller_step(controller, stage, float(record["dev"]["mean_return"]), single_stage)
        if decision["next_stage"] != record.get("next_stage"):
            raise TrainingError(f"curriculum state: round {i} recorded next stage {record.get('next_stage')!r}, the "
                                f"controller with these settings says {decision['next_stage']!r}")
        stage = decision["next_stage"]
    return controller


def curriculum_summary(records: Sequence[dict[str, Any]], cfg: Config,
                       single_stage: str | None = None) -> dict[str, Any]:
    """What a run measured: the controller's settings, when the stage switch fired (the round after whose dev
    evaluation it fired, with that round's EMA, improvement over the best EMA before it and stale count; None when it
    did not), the dev-return curve per round and the final adapter (the one live after the last round)."""
    switch = next((r for r in records if r.get("switched")), None)
    trained = [r["policy_round"]["adapter"] for r in records
               if r.get("policy_round", {}).get("status") == "succeeded" and r["policy_round"].get("adapter")]
    final = _adapter_out(records[-1]) if records else None
    return {
        "controller": {"ema_alpha": cfg.curriculum.ema_alpha, "epsilon": cfg.curriculum.epsilon,
                       "patience": cfg.curriculum.patience},
        "single_stage": single_stage,
        "rounds": len(records),
        "stages_run": sorted({r["stage"] for r in records}),
        "switch": None if switch is None else {
            "round": switch["round"], "first_refinement_round": switch["round"] + 1,
            "mean_return": switch["controller"]["mean_return"], "ema": switch["controller"]["ema"],
            "improvement": switch["controller"]["improvement"], "stale": switch["controller"]["stale"]},
        "dev_curve": [{"round": r["round"], "stage": r["stage"], "mean_return": r["dev"]["mean_return"],
                       "ema": r["controller"]["ema"], "improvement": r["controller"]["improvement"],
                       "stale": r["controller"]["stale"], "em": r["dev"].get("em"), "f1": r["dev"].get("f1"),
                       "avg_steps": r["dev"].get("avg_steps"), "seconds": r.get("seconds")} for r in records],
        "final_adapter": final,
        "all_rounds_trained": len(trained) == len(records),
    }


def read_state(path: Path) -> list[dict[str, Any]]:
    """The round records a `--state` file holds (one JSON line per finished round); [] when it does not exist."""
    import json

    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _dev_eval(runtime: Runtime, policy: EpisodePolicy, questions: Sequence[Question], stage: str) -> dict[str, float]:
    from evorag_core.methods.base import result_from_episode, run_episode

    results = []
    for q in questions:
        start = time.perf_counter()
        record = run_episode(runtime.make_env(q), policy, q, stage=stage)
        results.append(result_from_episode(q, record, time.perf_counter() - start))
    n = max(len(results), 1)
    return {"mean_return": sum(r.total_return or 0.0 for r in results) / n, "em": sum(r.em for r in results) / n,
            "f1": sum(r.f1 for r in results) / n, "avg_steps": sum(r.steps for r in results) / n}


def _policy_round(store: Store, cfg: Config, home: Path, objective: str, values: dict[str, Any], poll_s: float = 2.0):
    """Queue a round and see it finished: run it here (worker code), or wait for the worker that took it."""
    from training.job import job_config
    from training.worker import WorkerOptions, new_worker_id, process_one

    # the curriculum judges its rounds on its own dev slice and activates them itself: no promotion job is queued
    # after them (process_one below would otherwise run that job before the next round)
    cfg = replace(cfg, promotion=replace(cfg.promotion, evaluate=False))
    rid = store.enqueue_round(objective, job_config(objective, **values),
                              max_attempts=cfg.train.max_attempts)
    worker_id = new_worker_id()
    while True:
        current = store.get_round(rid)
        if current.status in ("succeeded", "failed", "cancelled"):
            return current
        if current.status == "queued":
            process_one(store, cfg, home, worker_id, WorkerOptions(lease_s=float(cfg.train.lease_seconds)))
        else:
            time.sleep(poll_s)


def _adapter_out(record: dict[str, Any]) -> str | None:
    """The adapter live after a round: the one it trained (when it did), else the one it started with."""
    trained = record.get("policy_round", {})
    return trained.get("adapter") if trained.get("status") == "succeeded" else record.get("adapter_in")


def _finished(records: Sequence[dict[str, Any]], plan: CurriculumPlan) -> bool:
    return len(records) >= plan.rounds or (plan.single_stage is None and STAGES_BOTH <= {r["stage"] for r in records})


def run_curriculum(cfg: Config, home: Path, store, plan: CurriculumPlan,
                   on_decision: Callable[[dict[str, Any]], None] | None = None,
                   done: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Run the curriculum (see the module docstring); returns one decision record per round (`done`'s first)."""
    from evorag_core.data.datasets import load_dataset
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.adapters.watcher import AdapterWatcher, PinnedPolicy
    from evorag_core.preference import PrefixEncoder, train_preference_model
    from evorag_core.pairs.rollout import run_rollouts
    from evorag_core.pairs.selection import PairSelector
    from evorag_core.runtime import Runtime

    from evorag_core.adapters.registry import activate
    from training.worker import quiet_progress_bars

    if plan.single_stage is not None and plan.single_stage not in STAGES:
        raise ConfigError(f"single stage {plan.single_stage!r}: expected one of {', '.join(STAGES)}")
    controller = replay_controller(cfg, done, plan.single_stage)
    out: list[dict[str, Any]] = list(done)
    if _finished(out, plan):
        return out
    quiet_progress_bars()
    if cfg.rollout.t_max > 0:
        cfg = replace(cfg, env=replace(cfg.env, t_max=cfg.rollout.t_max))
    dataset = load_dataset(plan.data)
    dev, pool = dataset.questions[: plan.dev], dataset.questions[plan.dev :]
    if not dev or not pool:
        raise TrainingError(f"{plan.data} has {len(dataset.questions)} questions: need more than --dev {plan.dev}")
    from evorag_core.data.datasets import pooled_corpus

    corpus = pooled_corpus(plan.corpus_from) if plan.corpus_from else None
    runtime = Runtime(cfg, home, dataset, corpus)
    backend = TransformersBackend(cfg.policy, home)
    watcher = AdapterWatcher(store, backend, min_interval_s=0.0)
    lm = LMPolicy(backend, cfg.policy, cfg.answer)
    stage = out[-1]["next_stage"] if out else (plan.single_stage or controller.stage)
    if out:  # resume: the policy the finished rounds left live (a cut-off round may have activated its own)
        left = _adapter_out(out[-1])
        if left is None:
            store.deactivate_adapters()
        else:
            activate(store, left, backend.model_id, reason="curriculum: resumed with the adapter its rounds left live")
    for r in range(len(out) + 1, plan.rounds + 1):
        started = time.perf_counter()
        watcher.poll(force=True)
        backend.activate(watcher.current)
        offset = ((r - 1) * plan.train_per_round) % len(pool)
        questions = (list(pool) * 2)[offset : offset + min(plan.train_per_round, len(pool))]
        selector = PairSelector(balance_ratio=cfg.rollout.balance_ratio)
        episodes: list[int] = []
        floor = store.last_pair_id()  # the DPO round trains on the pairs stored after this: this rollout's own
        stats = run_rollouts(questions, runtime.make_env, lm, store, cfg.rollout, selector,
                             policy_name=f"lm:{backend.model_id}+{watcher.current or 'base'}", stage=stage,
                             on_episode=lambda q, saved: episodes.append(saved.episode_id))
        selector.finish()
        record: dict[str, Any] = {"round": r, "stage": stage, "adapter_in": watcher.current,
                                  "rollout": stats.as_dict(), "episodes": episodes, "pairs_after": floor}
        try:
            encoder = PrefixEncoder.from_backend(backend, ((cfg.preference.layer, cfg.preference.pooling),))
            pm = train_preference_model(store, cfg, home / "preference" / f"curriculum-{r}", encoder=encoder,
                                        home=home)
            record["preference"] = {"overall_accuracy": pm.overall_accuracy, "train_pairs": pm.train_pairs,
                                    "eval_pairs": pm.eval_pairs,
                                    "heads": {k: h.accuracy for k, h in pm.heads.items()}}
        except TrainingError as exc:
            record["preference"] = {"skipped": str(exc)}
        objective = cfg.train.objective
        values = ({"stage": stage, "pairs": 10_000, "pairs_after": floor} if OBJECTIVES[objective].data == "pairs"
                  else {"episode_ids": episodes, "data": str(plan.data)})
        # reference: the policy this round rolled out with (in an unbroken run the live adapter, `previous`; named,
        # so that a resumed round does not start from the adapter a cut-off attempt registered)
        done = _policy_round(store, cfg, home, objective,
                             {**values, "reference": watcher.current or "base", "max_steps": plan.max_steps})
        record["policy_round"] = {"id": done.id, "status": done.status, "error": done.error,
                                  "adapter": (done.metrics or {}).get("adapter"),
                                  "final_loss": (done.metrics or {}).get("final_loss")}
        if done.status == "succeeded":
            activate(store, done.metrics["adapter"], backend.model_id, reason=f"curriculum round {r}")
        dev_metrics = _dev_eval(runtime, PinnedPolicy(lm, watcher), dev, stage)
        record.update(dev=dev_metrics, **controller_step(controller, stage, dev_metrics["mean_return"],
                                                         plan.single_stage),
                      seconds=time.perf_counter() - started)
        log.info("round %d (%s): dev mean return %.4f, EMA %.4f, stale %d -> next stage %s%s", r, stage,
                 dev_metrics["mean_return"], controller.ema, controller.stale, record["next_stage"],
                 " (switch)" if record["switched"] else "")
        out.append(record)
        if on_decision is not None:
            on_decision(record)
        stage = record["next_stage"]
        if _finished(out, plan):
            break
    log.info("curriculum done after %d round(s) (stages run: %s)", len(out),
             ", ".join(sorted({r["stage"] for r in out})))
    return out


def run_curriculum_command(args, cfg: Config, home: Path, db_url: str) -> int:
    """`evorag train --curriculum`: prints each round's decision as a JSON line, then the summary (with --json: one
    object, the rounds and the summary). `--state FILE` appends each finished round's record to FILE and resumes
    from it."""
    import json

    from evorag_core.cli.common import DEFAULT_DATA, print_json
    from evorag_core.store import open_store

    plan = CurriculumPlan(data=Path(args.data) if args.data else DEFAULT_DATA,
                          rounds=args.rounds or cfg.curriculum.max_rounds, train_per_round=args.train_questions,
                          dev=args.dev, single_stage=args.single_stage,
                          corpus_from=tuple(Path(p) for p in args.corpus_from), max_steps=args.max_steps)
    state: Path | None = Path(args.state) if args.state else None
    done = read_state(state) if state is not None else []

    def show(record: dict[str, Any]) -> None:
        if state is not None:
            state.parent.mkdir(parents=True, exist_ok=True)
            with state.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, default=str) + "\n")
        if not args.json:
            print(json.dumps({k: record[k] for k in ("round", "stage", "dev", "controller", "next_stage",
                                                     "policy_round")}, default=str), flush=True)

    with open_store(db_url) as store:
        decisions = run_curriculum(cfg, home, store, plan, on_decision=show, done=done)
    summary = curriculum_summary(decisions, cfg, plan.single_stage)
    if args.json:
        print_json({"rounds": decisions, "summary": summary})
    else:
        print(json.dumps({"summary": {k: v for k, v in summary.items() if k != "dev_curve"}}, default=str))
    return 0 if summary["all_rounds_trained"] else 1
