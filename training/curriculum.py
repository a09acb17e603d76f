"""The two-stage curriculum (SPEC §3, §5): Discovery -> Refinement, rounds of
rollout -> pairs -> preference model -> policy update -> dev evaluation, with the stage switch decided by the
EMA / tolerance / patience controller (`evorag_core.env.scheduler.StageSwitchController`) on the mean dev return.

Each round:
1. rollout: sibling-branch rollouts (`evorag_core.pairs.rollout.run_rollouts`) of the current policy (the active adapter,
   hot-swapped into one backend) on the next `train_per_round` training questions, with the stage's weights;
   episodes, siblings and pairs go to the store;
2. preference model: the multi-head model is fitted on the stored pairs (`evorag_core.preference`) and its held-out
   accuracy logged (too few pairs: logged and skipped);
3. policy update: a round of `train.objective` is queued (DPO: this stage's pairs; GRPO/PPO: this round's episodes;
   reference = the previous round's adapter) and run by the worker code (`training.worker.process_one`; if an
   external worker takes it first, its end is awaited); its adapter is activated (verified);
4. dev evaluation: greedy episodes on the dev questions with the stage's weights; the mean return goes to the
   controller, whose decision (stage, EMA, best, stale count) is logged.
The loop ends when both stages have run at least one round, or after `rounds` rounds.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from evorag_core.config import Config
from evorag_core.errors import TrainingError

if TYPE_CHECKING:
    from evorag_core.methods.base import EpisodePolicy
    from evorag_core.runtime import Runtime
    from evorag_core.store import Store
    from evorag_core.types import Question

__all__ = ["CurriculumPlan", "run_curriculum", "run_curriculum_command"]

log = logging.getLogger("evorag.curriculum")


@dataclass(frozen=True)
class CurriculumPlan:
    data: Path
    rounds: int = 6  # round budget
    train_per_round: int = 8  # rollout questions per round
    dev: int = 8  # dev questions (the data file's first ones; training uses the rest)
    decisions: list[dict[str, Any]] = field(default_factory=list, compare=False)


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


def run_curriculum(cfg: Config, home: Path, store, plan: CurriculumPlan,
                   on_decision: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run the curriculum (see the module docstring); returns one decision record per round."""
    from evorag_core.data.datasets import load_dataset
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.adapters.watcher import AdapterWatcher, PinnedPolicy
    from evorag_core.preference import PrefixEncoder, train_preference_model
    from evorag_core.pairs.rollout import run_rollouts
    from evorag_core.pairs.selection import PairSelector
    from evorag_core.runtime import Runtime
    from evorag_core.env.scheduler import StageSwitchController

    from evorag_core.adapters.registry import activate
    from training.worker import quiet_progress_bars

    quiet_progress_bars()
    if cfg.rollout.t_max > 0:
        cfg = replace(cfg, env=replace(cfg.env, t_max=cfg.rollout.t_max))
    dataset = load_dataset(plan.data)
    dev, pool = dataset.questions[: plan.dev], dataset.questions[plan.dev :]
    if not dev or not pool:
        raise TrainingError(f"{plan.data} has {len(dataset.questions)} questions: need more than --dev {plan.dev}")
    runtime = Runtime(cfg, home, dataset)
    backend = TransformersBackend(cfg.policy, home)
    watcher = AdapterWatcher(store, backend, min_interval_s=0.0)
    lm = LMPolicy(backend, cfg.policy, cfg.answer)
    controller = StageSwitchController(cfg.curriculum.ema_alpha, cfg.curriculum.epsilon, cfg.curriculum.patience)
    stages_run: set[str] = set()
    out: list[dict[str, Any]] = []
    for r in range(1, plan.rounds + 1):
        stage = controller.stage
        started = time.perf_counter()
        watcher.poll(force=True)
        backend.activate(watcher.current)
        offset = ((r - 1) * plan.train_per_round) % len(pool)
        questions = (list(pool) * 2)[offset : offset + min(plan.train_per_round, len(pool))]
        selector = PairSelector(balance_ratio=cfg.rollout.balance_ratio)
        episodes: list[int] = []
        stats = run_rollouts(questions, runtime.make_env, lm, store, cfg.rollout, selector,
                             policy_name=f"lm:{backend.model_id}+{watcher.current or 'base'}", stage=stage,
                             on_episode=lambda q, saved: episodes.append(saved.episode_id))
        selector.finish()
        record: dict[str, Any] = {"round": r, "stage": stage, "adapter_in": watcher.current,
                                  "rollout": stats.as_dict(), "episodes": episodes}
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
        values = ({"stage": stage, "pairs": 10_000} if objective == "dpo"
                  else {"episode_ids": episodes, "data": str(plan.data)})
        done = _policy_round(store, cfg, home, objective, {**values, "reference": "previous"})
        record["policy_round"] = {"id": done.id, "status": done.status, "error": done.error,
                                  "adapter": (done.metrics or {}).get("adapter"),
                                  "final_loss": (done.metrics or {}).get("final_loss")}
        if done.status == "succeeded":
            activate(store, done.metrics["adapter"], backend.model_id)
        dev_metrics = _dev_eval(runtime, PinnedPolicy(lm, watcher), dev, stage)
        next_stage = controller.update(dev_metrics["mean_return"])
        stages_run.add(stage)
        record.update(dev=dev_metrics, controller=dict(controller.history[-1]), next_stage=next_stage,
                      switched=next_stage != stage, seconds=time.perf_counter() - started)
        log.info("round %d (%s): dev mean return %.4f, EMA %.4f, stale %d -> next stage %s%s", r, stage,
                 dev_metrics["mean_return"], controller.ema, controller.stale, next_stage,
                 " (switch)" if next_stage != stage else "")
        out.append(record)
        if on_decision is not None:
            on_decision(record)
        if {"discovery", "refinement"} <= stages_run:
            log.info("both stages have run: curriculum done after %d round(s)", r)
            break
    else:
        log.info("round budget of %d reached (stages run: %s)", plan.rounds, ", ".join(sorted(stages_run)))
    return out


def run_curriculum_command(args, cfg: Config, home: Path, db_url: str) -> int:
    """`evorag train --curriculum`: prints the decisions (JSON lines with --json)."""
    import json

    from evorag_core.cli.common import DEFAULT_DATA, print_json
    from evorag_core.store import open_store

    plan = CurriculumPlan(data=Path(args.data) if args.data else DEFAULT_DATA,
                          rounds=args.rounds or cfg.curriculum.max_rounds, train_per_round=args.train_questions,
                          dev=args.dev)

    def show(record: dict[str, Any]) -> None:
        if not args.json:
            print(json.dumps({k: record[k] for k in ("round", "stage", "dev", "controller", "next_stage",
                                                     "policy_round")}, default=str), flush=True)

    with open_store(db_url) as store:
        decisions = run_curriculum(cfg, home, store, plan, on_decision=show)
    if args.json:
        print_json({"rounds": decisions})
    return 0 if all(d["policy_round"]["status"] == "succeeded" for d in decisions) else 1
