"""One rollout set, many reward variants: re-score -> pairs -> one training round -> evaluation, resumable.

    rollouts  the base policy's sibling-branch rollouts of the training questions, stored once (<out>/rollouts.db,
              or the rollout episodes of an existing store: `rollouts_from`);
    per variant (<out>/variants/<name>/):
      store   every stored rollout re-scored under the variant (`load_rollout` -> `rescore_rollout`) and saved into
              the variant's own store with a fresh `PairSelector` (same margins, same balance): only the weights,
              returns, winners and pairs differ between variants;
      round   one training round of `objective` (dpo | grpo | ppo) on that store, reference = the base model, the
              same seed and step budget for every variant (the worker's `process_one`, in this process);
      eval    the adapter's greedy episodes on the evaluation questions (disjoint from training), JSON lines;
    base      the base policy on the same evaluation questions.

`rows_from` (another run's folder) reuses that run's finished rows instead of computing them again: its base
evaluation, and each variant whose weights (schedule, preset, table) equal one of its variants - e.g. the presets'
Full row is the schedules' time-dynamic row - provided the two runs share the config, the data and slices, the
objective, step budget, seed and evaluation T_max, and the very rollout episodes (the same store URL and episode
ids). The evaluation lines are copied into this run (its table and p-values stand on their own); the adapter stays
where the other run trained it. A reused record says so (`reused_from`) and its minutes are not this run's.

`workers` > 1 runs the rollouts on a process pool (pairs/executors.py: the same episodes and pairs as one process)
and the evaluations on another (evaluation/pool.py: each worker loads the model once for the base and every
adapter); the rounds run in this process. The worker count is not part of the plan: a run may resume with another.

Every finished phase is written to <out>/state.json at once; a rerun with the same plan skips what is done (an
evaluation resumes question by question; a variant whose round did not finish has its store rebuilt and its round
run again). A rerun naming other variants of the same plan adds them to the run (`--variants two-stage` after a
`--variants no-reward` run: one more re-score, round and evaluation, the rest kept). A different plan or config in
the same folder is refused. `report.py` turns the state into the table
and figure.
"""
from __future__ import annotations

import json
import logging
import re
import shutil
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable

from evorag_core.config import Config, apply_overrides, to_dict
from evorag_core.errors import ConfigError
from evorag_core.pairs.rescore import Variant

__all__ = ["AblationPlan", "AblationRun", "run_ablation", "load_state"]

log = logging.getLogger("evorag.ablate")


@dataclass(frozen=True)
class AblationPlan:
    """What an ablation run compares, and on what (the fingerprint a resumed run must match)."""

    name: str  # schedules | presets | a tuning run's name
    variants: tuple[Variant, ...]
    reference: str  # the variant the table compares every row with
    data: Path  # the data file; its questions [train) and [eval) slices, disjoint
    train: tuple[int, int]
    eval: tuple[int, int]
    out: Path
    objective: str = "dpo"
    max_steps: int = 2  # optimiser steps per round at most (the same budget for every variant)
    seed: int = 0
    eval_t_max: int = 8  # T_max of the evaluation episodes
    rollouts_from: str | None = None  # a store URL whose rollout episodes of the training questions are used

    def __post_init__(self) -> None:
        (tl, th), (el, eh) = self.train, self.eval
        if not (0 <= tl < th and 0 <= el < eh):
            raise ConfigError(f"empty or negative slices: train {tl}:{th}, eval {el}:{eh}")
        if max(tl, el) < min(th, eh):
            raise ConfigError(f"the training slice {tl}:{th} and the evaluation slice {el}:{eh} overlap")
        if self.reference not in {v.name for v in self.variants}:
            raise ConfigError(f"reference {self.reference!r} is not one of the variants")

    def fingerprint(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "variants"}
        d["variants"] = [{"name": v.name, **_definition(v)} for v in self.variants]
        d["data"], d["out"] = str(self.data), str(self.out)
        return json.loads(json.dumps(d, default=list))  # as state.json holds it


def load_state(out: Path) -> dict[str, Any]:
    path = Path(out) / "state.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _config_fingerprint(cfg: Config) -> dict[str, Any]:
    """The settings that shape the results (all of them but the thread count and the device)."""
    d = to_dict(cfg)
    for key in ("threads", "device"):
        d["policy"].pop(key, None)
    return json.loads(json.dumps(d, default=str))


def _merged_variants(out: Path, held: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The variants of a run extended by `wanted`: the held ones in their order, then the new ones. A variant
    named in both must be defined the same (its rows would otherwise mix two definitions)."""
    by_name = {v["name"]: v for v in held}
    for v in wanted:
        if v["name"] in by_name and by_name[v["name"]] != v:
            raise ConfigError(f"{out} holds variant {v['name']!r} with other weights; use a new --out folder")
    return held + [v for v in wanted if v["name"] not in by_name]


class _State:
    """<out>/state.json. A rerun continues the run when everything but the variant list is the same plan and
    config; variants it names that the run lacks are added (their rows join the table), the finished ones are
    kept, so a researcher can extend an ablation by a row without redoing the rollouts, the base evaluation or the
    other rounds."""

    def __init__(self, plan: AblationPlan, cfg: Config):
        self.path = plan.out / "state.json"
        self.data = load_state(plan.out)
        fp, config = plan.fingerprint(), _config_fingerprint(cfg)
        if self.data:
            held = self.data.get("plan") or {}
            same = {k: v for k, v in held.items() if k != "variants"} == {k: v for k, v in fp.items() if k != "variants"}
            if not same or self.data.get("config") != config:
                what = "plan" if not same else "config (--config / --set values)"
                raise ConfigError(f"{plan.out} holds another ablation (its state.json has a different {what}); "
                                  "use a new --out folder")
            fp["variants"] = _merged_variants(plan.out, held.get("variants", []), fp["variants"])
        self.data["plan"], self.data["config"] = fp, config
        self.data.setdefault("variants", {})

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str))
        tmp.replace(self.path)  # a kill mid-write never leaves a torn state file


class AblationRun:
    """The shared parts of a run (config, model, runtimes, state) and its phases; `variant(v)` runs one variant
    (store -> round -> eval) unless the state has it, so a tuning search can add variants one trial at a time."""

    def __init__(self, plan: AblationPlan, cfg: Config, home: Path, workers: int = 1, rows_from: Path | None = None):
        from evorag_core.data.datasets import load_dataset
        from evorag_core.lm.loading import resolve_model
        from evorag_core.runtime import Runtime

        plan.out.mkdir(parents=True, exist_ok=True)
        self.plan, self.home = plan, home
        self.state = _State(plan, cfg)
        # one model folder for every phase and variant home (the embedded model is converted once, in `home`)
        self.cfg = apply_overrides(cfg, {"policy.model": str(resolve_model(cfg.policy.model, home)),
                                         "train.seed": plan.seed, "train.objective": plan.objective})
        self.dataset = load_dataset(plan.data)
        self.train_qs = self.dataset.questions[plan.train[0]:plan.train[1]]
        self.eval_qs = self.dataset.questions[plan.eval[0]:plan.eval[1]]
        c = self.cfg
        self.rollout_cfg = replace(c, env=replace(c.env, t_max=c.rollout.t_max or c.env.t_max))
        self.eval_rt = Runtime(replace(c, env=replace(c.env, t_max=plan.eval_t_max)), home, self.dataset)
        self.backend = _backend(c, home)
        self.workers = workers
        self.rows_from = Path(rows_from).resolve() if rows_from else None
        self._other: dict[str, Any] | None = None  # the rows_from run's state once read ({}: nothing to reuse)
        self._pool = None  # the evaluation pool (workers > 1), started on first use

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _eval_pool(self):
        if self.workers <= 1:
            return None
        if self._pool is None:
            from evorag_core.evaluation.pool import EvalPool, EvalSpec

            self._pool = EvalPool(EvalSpec(self.eval_rt.cfg, str(self.home), str(self.plan.data),
                                           threads=self.cfg.policy.threads or 1), self.workers)
        return self._pool

    @property
    def data(self) -> dict[str, Any]:
        return self.state.data

    def prepare(self) -> None:
        """The rollouts and the base model's evaluation (each once)."""
        from evorag_core.runtime import Runtime

        if "rollouts" not in self.data:
            rt = Runtime(self.rollout_cfg, self.home, self.dataset)
            self.data["rollouts"] = _rollouts(self.plan, self.rollout_cfg, rt, self.backend, self.train_qs,
                                              self.home, self.workers)
            self.state.save()
        if "base" not in self.data and (other := self._other_run()) is not None and other.get("base"):
            self.data["base"] = _reuse_eval(self.plan, other["base"], "base", self.rows_from)
            self.state.save()
        if "base" not in self.data:
            self.data["base"] = _evaluate(self.plan, self.eval_rt, self.backend, "base", None, self.eval_qs,
                                          self._eval_pool())
            self.state.save()

    def variant(self, variant: Variant, seed: int | None = None) -> dict[str, Any]:
        """Re-score, train (seed: the plan's unless given) and evaluate `variant`; returns its record."""
        record = self.data["variants"].get(variant.name, {})
        if "eval" in record:
            return record
        reused = self._reused_variant(variant)
        if reused is not None:
            self.data["variants"][variant.name] = reused
            self.state.save()
            return reused
        if record.get("round", {}).get("status") != "succeeded":
            record = {"store": _variant_store(self.plan, self.cfg, variant, self.data["rollouts"])}
            self.data["variants"][variant.name] = record
            self.state.save()
            record["round"] = _round(self.plan, self.cfg, variant, self.plan.seed if seed is None else seed)
            self.state.save()
        if record["round"].get("status") == "succeeded":
            record["eval"] = _evaluate(self.plan, self.eval_rt, self.backend, variant.name,
                                       record["round"]["adapter_path"], self.eval_qs, self._eval_pool())
        else:
            record["eval"] = None  # no adapter: the row says why (its round's error)
        self.state.save()
        return record

    def _other_run(self) -> dict[str, Any] | None:
        """The `rows_from` run's state when its rows can stand in this run's (see the module docstring); read once,
        after this run's rollouts are known."""
        if self.rows_from is None or "rollouts" not in self.data:
            return None
        if self._other is None:
            self._other = self._matching_run()
        return self._other or None

    def _matching_run(self) -> dict[str, Any]:
        other = load_state(self.rows_from)
        if not other:
            log.warning("%s holds no ablation state; nothing is reused", self.rows_from)
            return {}
        keys = ("data", "train", "eval", "objective", "max_steps", "seed", "eval_t_max")
        mine, theirs = self.data["plan"], other.get("plan") or {}
        same = (other.get("config") == self.data["config"] and all(theirs.get(k) == mine.get(k) for k in keys)
                and (other.get("rollouts") or {}).get("store") == self.data["rollouts"]["store"]
                and other["rollouts"].get("episode_ids") == self.data["rollouts"]["episode_ids"])
        if not same:
            log.warning("%s: its rows are not reused (another config, plan or rollout set)", self.rows_from)
        return other if same else {}

    def _reused_variant(self, variant: Variant) -> dict[str, Any] | None:
        other = self._other_run()
        if other is None:
            return None
        weights = _definition(variant)
        for held in other["plan"].get("variants", []):
            record = other.get("variants", {}).get(held["name"]) or {}
            if ({k: v for k, v in held.items() if k != "name"} == weights and record.get("eval")
                    and record.get("round", {}).get("status") == "succeeded"):
                return {"store": record["store"], "round": record["round"],
                        "eval": _reuse_eval(self.plan, record["eval"], variant.name, self.rows_from),
                        "reused_from": {"run": str(self.rows_from), "variant": held["name"]}}
        return None


def _definition(variant: Variant) -> dict[str, Any]:
    """A variant's weights as a plan's fingerprint holds them (without its name)."""
    table = [dict(variant.table.start), dict(variant.table.mid), dict(variant.table.end)]
    return json.loads(json.dumps({"schedule": variant.schedule, "preset": variant.preset, "table": table}))


def _reuse_eval(plan: AblationPlan, evaluated: dict[str, Any], name: str, source: Path) -> dict[str, Any]:
    """Another run's evaluation record, its per-question lines copied into this run's eval folder."""
    path = plan.out / "eval" / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(evaluated["results"], path)
    return {**evaluated, "results": str(path), "reused_from": str(source)}


def run_ablation(plan: AblationPlan, cfg: Config, home: Path,
                 on_variant: Callable[[str, dict[str, Any]], None] | None = None, workers: int = 1,
                 rows_from: Path | None = None) -> dict[str, Any]:
    """Run (or continue) the ablation; returns the state. `on_variant(name, record)` is called after each variant
    is done (the CLI prints it; a test interrupts there). `workers`: processes for the rollouts and evaluations.
    `rows_from`: another run's folder whose matching rows are reused (module docstring)."""
    run = AblationRun(plan, cfg, home, workers, rows_from)
    try:
        run.prepare()
        for variant in plan.variants:
            record = run.variant(variant)
            if on_variant is not None:
                on_variant(variant.name, record)
    finally:
        run.close()
    return run.data


# -- phases ---------------------------------------------------------------------------------------------------------

def _backend(cfg: Config, home: Path):
    from evorag_core.lm.backends import policy_backend

    return policy_backend(cfg.policy, home)


def _rollouts(plan: AblationPlan, cfg: Config, runtime, backend, questions, home: Path,
              workers: int = 1) -> dict[str, Any]:
    """The rollout episodes of the training questions: rolled out into <out>/rollouts.db (questions already there
    are skipped, so an interrupted phase continues; `workers` > 1: on a process pool, stored in question order),
    or found in `plan.rollouts_from`."""
    from evorag_core.pairs.rollout import run_rollouts
    from evorag_core.pairs.selection import PairSelector
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.store import open_store

    wanted = [q.id for q in questions]
    url = plan.rollouts_from or f"sqlite:///{plan.out / 'rollouts.db'}"
    started = time.perf_counter()
    with open_store(url) as store:
        if plan.rollouts_from is None:
            name = f"lm:{backend.model_id}"
            todo = [q for q in questions if not store.list_episodes(question_id=q.id, policy=name, limit=1)]
            selector = PairSelector(balance_ratio=cfg.rollout.balance_ratio)
            on_episode = lambda q, s: log.info("rollout %s: %d steps, %d pairs", q.id, s.steps,  # noqa: E731
                                               len(s.pair_ids))
            if workers > 1 and todo:
                from evorag_core.pairs.executors import WorkerSpec, local_results, store_rollouts, warm

                spec = WorkerSpec(cfg, str(home), str(plan.data), stage=cfg.reward.stage,
                                  threads=cfg.policy.threads or 1)
                warm(spec)
                index = {q.id: i for i, q in enumerate(runtime.dataset.questions)}
                order = [index[q.id] for q in todo]
                store_rollouts(local_results(spec, order, workers), order, store, selector, spec, name,
                               on_episode=on_episode)
            else:
                backend.activate(None)
                run_rollouts(todo, runtime.make_env, LMPolicy(backend, cfg.policy, cfg.answer), store, cfg.rollout,
                             selector, policy_name=name, stage=cfg.reward.stage, data_path=str(plan.data),
                             on_episode=on_episode)
            selector.finish()
        found: dict[str, int] = {}
        for e in store.list_episodes(limit=None):
            if e.source == "rollout" and e.question_id in wanted:
                found.setdefault(e.question_id, e.id)
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise ConfigError(f"{url} has no rollout episode of {len(missing)} training question(s): "
                          f"{', '.join(missing[:5])}")
    return {"store": url, "episode_ids": [found[q] for q in wanted], "minutes": (time.perf_counter() - started) / 60}


def _variant_store(plan: AblationPlan, cfg: Config, variant: Variant, rollouts: dict[str, Any]) -> dict[str, Any]:
    """The rollouts re-scored under `variant` in a fresh store of its own (rebuilt if an earlier attempt left one)."""
    from evorag_core.pairs.persist import load_rollout, save_rollout
    from evorag_core.pairs.rescore import rescore_rollout
    from evorag_core.pairs.selection import PairSelector
    from evorag_core.store import open_store

    folder = plan.out / "variants" / variant.name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    margin = min(cfg.rollout.policy_margin, cfg.rollout.preference_margin)
    selector = PairSelector(balance_ratio=cfg.rollout.balance_ratio)
    winners_changed = states = 0
    with open_store(rollouts["store"]) as source, open_store(_store_url(plan, variant)) as target:
        for episode_id in rollouts["episode_ids"]:
            original = load_rollout(source.get_episode(episode_id))
            scored = rescore_rollout(original, variant, margin)
            for a, b in zip(original.states, scored.states):
                states += 1
                winners_changed += _winner(a) != _winner(b)
            save_rollout(target, scored, selector, cfg.rollout, f"ablate:{variant.name}",
                         run=f"ablate-{plan.name}-{variant.name}", data_path=str(plan.data))
        selector.finish()
    stats = selector.stats
    return {"episodes": stats.episodes, "pairs_built": stats.pairs_built, "pairs": stats.pairs_kept,
            "branch_states": states, "winner_changed_vs_stored": winners_changed}


def _winner(state) -> str:
    return max(state.branches, key=lambda b: b.ret).completion


def _store_url(plan: AblationPlan, variant: Variant) -> str:
    return f"sqlite:///{plan.out / 'variants' / variant.name / 'store.db'}"


def _round(plan: AblationPlan, cfg: Config, variant: Variant, seed: int) -> dict[str, Any]:
    """One round of `plan.objective` on the variant's store, in this process through the worker's `process_one`
    (claim, train, register, finish); the adapter lands in <out>/variants/<name>/adapters/."""
    from evorag_core.store import open_store
    from evorag_core.objectives import OBJECTIVES
    from training.job import job_config
    from training.worker import WorkerOptions, new_worker_id, process_one

    values: dict[str, Any] = {"reference": "base", "seed": seed, "max_steps": plan.max_steps or None}
    cfg = replace(cfg, promotion=replace(cfg.promotion, evaluate=False))  # the ablation evaluates every row itself
    with open_store(_store_url(plan, variant)) as store:
        if OBJECTIVES[plan.objective].data == "pairs":
            values["pairs"] = 100_000  # every pair the variant's scoring produced
        else:
            values.update(episode_ids=[e.id for e in store.list_episodes(limit=None)], data=str(plan.data))
        rid = store.enqueue_round(plan.objective, job_config(plan.objective, **values))
        started = time.perf_counter()
        done = process_one(store, cfg, plan.out / "variants" / variant.name, new_worker_id(),
                           WorkerOptions(lease_s=max(600.0, cfg.train.lease_seconds), once=True))
        r = store.get_round(rid) if done is None else done
    m = r.metrics or {}
    keep = ("adapter", "adapter_path", "steps", "pairs", "n_train", "episodes", "first_loss", "final_loss", "wall_s")
    return {"round_id": rid, "status": r.status, "error": r.error, "minutes": (time.perf_counter() - started) / 60,
            **{k: m[k] for k in keep if k in m}}


def _evaluate(plan: AblationPlan, runtime, backend, name: str, adapter_path: str | None, questions,
              pool=None) -> dict[str, Any]:
    """Greedy episodes of the base model or one adapter on the evaluation questions (<out>/eval/<name>.jsonl,
    resumed question by question; on `pool`'s processes when given); returns the summary and the results file."""
    from evorag_core.adapters.load import load_verified
    from evorag_core.evaluation.runner import evaluate
    from evorag_core.methods.agent import agent_on

    adapter = None
    run = pool.runner(adapter_path or None) if pool is not None else None
    if adapter_path and run is None:
        adapter = re.sub(r"[^A-Za-z0-9_-]", "_", f"ablate-{name}")[:64]  # the backend's adapter-name rule
        load_verified(backend, adapter, adapter_path)
    path = plan.out / "eval" / f"{name}.jsonl"
    summary, _ = evaluate(agent_on(backend, runtime, adapter), questions, out_path=path, resume=True, run=run,
                          on_result=lambda r, rs: log.info("eval %s %d/%d %s em=%s steps=%d", name, len(rs),
                                                           len(questions), r.question_id, r.em, r.steps))
    return {"results": str(path), **{k: v for k, v in summary.items() if k not in ("method", "label")}}
