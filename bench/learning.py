"""Evidence that learning works: one round of each objective (DPO, GRPO, PPO) from the same rollouts of the embedded
SmolLM2-135M policy on CPU, and the adapters against the base policy on a disjoint slice. Writes JSON.

    python -m bench.learning [--train 0:16] [--eval 100:124] [--workers 2] [--threads 1] [--round-threads N]
                             [--max-length 512] [--batch 4] [--epochs 2] [--max-steps 12] [--lr 2e-4]
                             [--dtype float32] [--grad-ckpt] [--passage-chars 120] [--answer-chars 0] [--t-max 5]
                             [--siblings 4] [--max-states 3] [--heldout 0.25] [--pair-filter all|ans-better|reader]
                             [--ranker learned|lm] [--ranker-path FILE] [--reader-dumps JSONL[,JSONL]]
                             [--passage-order retrieval|reversed]
                             [--pair-against top|random] [--no-rollouts] [--no-agent-eval]
                             [--seed 0] [--objectives dpo,grpo,ppo] [--corpus per-question|pooled] [--rollouts-from DB]
                             [--home DIR] [--out bench/results/learning.json]

Phases (each resumable; finished phases are kept in <home>/learning_state.json, so a re-run continues):
1. rollouts: `evorag_core.pairs.rollout.run_rollouts` of the base policy on the training slice of
   ../shared/benchmarks/hotpotqa_dev300.jsonl, `--workers` processes with `--threads` torch threads each, into a
   SQLite store. `--corpus`: pooled (default, as in the config) = all ~3,000 passages of the file, for training and
   evaluation alike; per-question = each question's 10 passages. `--stage`, default Discovery: its schedule scores
   the branches, and the rounds' rewards use it too. Or `--rollouts-from DB`: a store bench/preference.py rolled
   out on the same slice with the same settings, copied in (checked: the slice's questions, one stage); or, with
   `--no-rollouts` (only with `--pair-filter reader --reader-dumps` and DPO), none: the round trains on the dumps'
   answer pairs alone, which makes a reader-only experiment fit in about an hour instead of three;
2. held-out pairs: the pairs of the last `--heldout` share of the training questions are set aside (discarded in
   the store, so no round trains on them; their episodes are left out of GRPO/PPO too); `--pair-filter ans-better`
   also discards the training pairs whose chosen branch does not have the higher answer score G^ans;
   `--pair-filter reader` discards every branch pair and builds answer pairs instead (evorag_core/pairs/
   reader_pairs.py: at each state of the stored episodes, the reader's best candidate by `ans` against its
   highest-ranked wrong ones, or a random draw of its wrong ones with `--pair-against random`, under the reader
   prompt); the held-out questions' answer pairs are phase 4's;
3. rounds: one round per objective from the same rollouts, reference = the base model, each in its own
   `evorag worker --once` process with the workers' whole CPU share (`--round-threads`, default workers x threads;
   its wall time and peak RSS are the round's);
4. pair accuracy: each adapter's implicit-reward accuracy on the held-out pairs, β[(log π − log π_base)(chosen) −
   (log π − log π_base)(rejected)] > 0 (for DPO this is its held-out reward accuracy);
5. evaluation: greedy episodes of the base policy and of each adapter on the eval slice (same questions for all,
   env T_max = `--eval-t-max`), EM, F1, avg steps, refusal rate, and the paired bootstrap (10,000 resamples) of each
   adapter against the base (skipped with `--no-agent-eval`);
6. with `--reader-dumps`, the reader alone: each policy answers the evaluation questions from their dumped passages
   (the same for every policy: only the answer the reader picks can change, the part the answer pairs train), EM and
   F1 per dump with the paired bootstrap of each adapter against the base.
`--passage-chars` applies everywhere (rollouts, training prompts, evaluation): with 120 characters per passage the
current turn of a prompt at t <= 3 fits in 512 tokens next to the system prompt (see training/seqlogp.py).
`--answer-chars` is the reader's passage cut (`answer.passage_chars`; 0: the same as `--passage-chars`): the reader's
prompt is not a training prompt, so it may read longer passages than the policy's turns.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.adapter_eval import evaluate_adapter, parse_slice as _slice, run_processes, summarize_against, write_slice
from bench.record import settings
from evorag_core.config import PASSAGE_ORDERS

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT.parent / "shared" / "benchmarks" / "hotpotqa_dev300.jsonl"
TARGETS = {"dpo_heldout_accuracy_min": 0.65, "steps_p_max": 0.05, "round_minutes_max": 15.0}
OBJECTIVES = ("dpo", "grpo", "ppo")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The config overrides every phase shares (as `--set` values)."""
    return {
        "policy.model": args.model, "policy.device": "cpu", "policy.threads": args.threads,
        "policy.passage_chars": args.passage_chars, "answer.passage_chars": args.answer_chars, "env.corpus": args.corpus, "env.t_max": args.t_max,
        "rollout.t_max": args.t_max, "rollout.siblings": args.siblings, "rollout.max_states": args.max_states,
        "reward.stage": args.stage, "train.max_length": args.max_length, "train.batch_size": args.batch,
        "train.epochs": args.epochs, "train.lr": args.lr, "train.dtype": args.dtype,
        "train.gradient_checkpointing": args.grad_ckpt, "train.lease_seconds": 600, "answer.ranker": args.ranker,
        "answer.passage_order": args.passage_order,
        **({"answer.ranker_path": str(Path(args.ranker_path).resolve())} if args.ranker_path else {}),
    }


def _config(args: argparse.Namespace, **extra: Any):
    from evorag_core.config import apply_overrides, load_config

    return apply_overrides(load_config(), {**_settings(args), **extra})


def _set_flags(args: argparse.Namespace) -> list[str]:
    return [a for k, v in _settings(args).items() for a in ("--set", f"{k}={v}")]


def _write_slice(path: Path, lo: int, hi: int) -> Path:
    return write_slice(DATA, path, lo, hi)


def _corpus_source(args: argparse.Namespace, dataset):
    """The dataset whose passages make the corpus: each question's own (per-question), or every question's of the
    whole data file (pooled: the same corpus for the training and the evaluation slice, ~3,000 passages)."""
    from evorag_core.data.datasets import load_dataset

    return load_dataset(DATA) if args.corpus == "pooled" else dataset


def _spawn(args: argparse.Namespace, mode: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT),
               OMP_NUM_THREADS=str(args.threads))
    argv = [sys.executable, str(Path(__file__).resolve()), *mode, "--home", str(args.home),
            *sys.argv[1:]]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT)


def _wait_all(procs: list[tuple[subprocess.Popen, Path]]) -> None:
    for proc, log in procs:
        if proc.wait() != 0:
            raise SystemExit(f"a bench process failed (exit {proc.returncode}); see {log}")


# -- phase 1: rollouts ----------------------------------------------------------------------------------------------

def rollout_part(args: argparse.Namespace, lo: int, hi: int) -> None:
    """Child process: roll out questions [lo, hi) of the data file (skipping those already in the store)."""
    import torch

    from evorag_core.data.datasets import load_dataset
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.pairs.rollout import PairSelector, run_rollouts
    from evorag_core.runtime import Runtime
    from evorag_core.store import open_store

    cfg = _config(args)
    torch.set_num_threads(args.threads)
    dataset = load_dataset(args.train_file)
    runtime = Runtime(cfg, args.home, _corpus_source(args, dataset))
    backend = TransformersBackend(cfg.policy, args.home)
    name = f"lm:{backend.model_id}"
    with open_store(args.db) as store:
        todo = [q for q in dataset.questions[lo:hi] if not store.list_episodes(question_id=q.id, policy=name, limit=1)]
        selector = PairSelector(balance_ratio=cfg.rollout.balance_ratio)
        started = time.perf_counter()

        def show(question, saved) -> None:
            print(f"{question.id}: episode {saved.episode_id}, {saved.steps} steps, {len(saved.pair_ids)} pairs, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)

        run_rollouts(todo, runtime.make_env, LMPolicy(backend, cfg.policy, cfg.answer), store, cfg.rollout, selector,
                     policy_name=name, stage=args.stage, on_episode=show)
        selector.finish()


def phase_rollouts(args: argparse.Namespace) -> dict[str, Any]:
    from evorag_core.store import open_store

    lo, hi = _slice(args.train)
    n = hi - lo
    parts = [(i * n // args.workers, (i + 1) * n // args.workers) for i in range(args.workers)]
    started, cpu0, load0 = time.perf_counter(), _children_cpu(), os.getloadavg()[0]
    procs = []
    for a, b in parts:
        log = args.home / f"learning_rollout_{a}_{b}.log"
        procs.append((_spawn(args, ["--rollout-part", f"{a}:{b}"], log), log))
    _wait_all(procs)
    with open_store(args.db) as store:
        episodes = store.list_episodes(limit=100_000)
        pairs = store.count_pairs("status")
    return {"questions": n, "episodes": len(episodes), "pairs": sum(pairs.values()),
            "minutes": (time.perf_counter() - started) / 60, "cpu_minutes": (_children_cpu() - cpu0) / 60,
            "load_avg_start": load0, "load_avg_end": os.getloadavg()[0], "workers": args.workers}


def reuse_rollouts(args: argparse.Namespace) -> dict[str, Any]:
    """Phase 1 from a SQLite store another run rolled out (bench/preference.py with the same slice and settings):
    the file is copied in as this run's store, after checking that its episodes are exactly the training slice's
    questions, all of one stage."""
    import sqlite3
    from contextlib import closing

    from evorag_core.data.datasets import load_dataset
    from evorag_core.store import open_store

    source = Path(args.rollouts_from).resolve()
    target = args.home / "bench_learning.db"
    if target.exists():
        raise SystemExit(f"{target} exists; --rollouts-from starts a run in an empty --home")
    with open_store(f"sqlite:///{source}") as store:
        episodes = store.list_episodes(limit=100_000)
        pairs = store.count_pairs("status")
    wanted = {q.id for q in load_dataset(args.train_file).questions}
    got = {e.question_id for e in episodes}
    stages = {e.stage for e in episodes}
    if got != wanted or stages != {args.stage}:
        raise SystemExit(f"{source}: its episodes cover {len(got & wanted)} of the {len(wanted)} training questions "
                         f"(+{len(got - wanted)} others), stages {sorted(stages)}; expected the --train slice at "
                         f"stage {args.stage}")
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)  # the backup API, not a file copy: a store in WAL mode may hold pages in its -wal file
    return {"questions": len(wanted), "episodes": len(episodes), "pairs": sum(pairs.values()),
            "reused_from": str(source), "workers": args.workers}


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


# -- phase 2: held-out pairs ----------------------------------------------------------------------------------------

def phase_heldout(args: argparse.Namespace) -> dict[str, Any]:
    from evorag_core.data.datasets import load_dataset
    from evorag_core.store import open_store

    questions = [q.id for q in load_dataset(args.train_file).questions]
    held = set(questions[len(questions) - round(args.heldout * len(questions)):]) if args.heldout > 0 else set()
    with open_store(args.db) as store:
        pairs = store.list_pairs(limit=None)
        held_pairs = [p for p in pairs if p.metadata.get("question_id") in held]
        for p in held_pairs:
            if p.status == "queued":
                store.discard_pair(p.id)
        filtered = [p for p in pairs if p.metadata.get("question_id") not in held and not _passes(args, p)]
        for p in filtered:
            if p.status == "queued":
                store.discard_pair(p.id)
        train_episodes = [e.id for e in store.list_episodes(limit=100_000) if e.question_id not in held]
    return {"heldout_questions": sorted(held), "heldout_pair_ids": [p.id for p in held_pairs],
            "train_pairs": len(pairs) - len(held_pairs) - len(filtered), "pair_filter": args.pair_filter,
            "filtered_out": len(filtered), "train_episode_ids": sorted(train_episodes)}


def _passes(args: argparse.Namespace, pair: Any) -> bool:
    """`--pair-filter`: all pairs, or only those whose chosen branch has the higher outcome part of its return
    (G^ans, the reader's answer score): pairs that teach answering better, not only saving a step. Measured on the
    2026-11-27 rollouts (HotpotQA 0:64): of 465 training pairs 199 differ in G^ans, and in 78 of those the chosen
    branch has the *lower* G^ans (it won on the process signals); `ans-better` keeps the other 121."""
    if args.pair_filter == "all":
        return True
    if args.pair_filter == "reader":  # the round trains on answer pairs only (phase_reader_pairs)
        return False
    chosen, rejected = pair.metadata.get("signals_chosen", {}), pair.metadata.get("signals_rejected", {})
    return chosen.get("ans", 0.0) > rejected.get("ans", 0.0) + 1e-9


def phase_reader_pairs(args: argparse.Namespace, held: dict[str, Any]) -> dict[str, Any]:
    """`--pair-filter reader`: answer pairs (evorag_core/pairs/reader_pairs.py) at every state of the stored rollout
    episodes whose reader passages hold a right candidate, under the reader prompt; the training questions' pairs
    are queued for the rounds, the held-out questions' discarded and become the held-out pairs of phase 4."""
    import torch

    from evorag_core.data.datasets import load_dataset
    from evorag_core.lm.backends import policy_backend
    from evorag_core.pairs.reader_pairs import episode_reader_pairs
    from evorag_core.policy.agent import reader_passages
    from evorag_core.reader.span import SpanReader
    from evorag_core.store import open_store
    from training.rollout_data import PassageResolver, replay_episode

    cfg = _config(args)
    torch.set_num_threads(args.threads * args.workers)
    gold = {q.id: q.answers for q in load_dataset(args.train_file).questions}
    reader = SpanReader(policy_backend(cfg.policy, args.home), cfg.answer, cfg.policy.passage_chars)
    heldout = set(held["heldout_questions"])
    started = time.perf_counter()
    train_ids, held_ids, states = [], [], 0
    with open_store(args.db) as store:
        resolve = PassageResolver(str(DATA), store)
        for listed in store.list_episodes(limit=None):
            if listed.source != "rollout" or listed.question_id not in gold:
                continue
            episode = store.get_episode(listed.id)
            replay = replay_episode(episode, resolve, args.t_max)
            views = [(s.t, s.view) for s in replay.steps] + [(len(replay.steps) + 1, replay.final_view)]
            states += len(views)
            pairs = episode_reader_pairs(episode, views, reader, gold[episode.question_id],
                                         lambda v: reader_passages(v, cfg.policy.reader_passages),
                                         against=args.pair_against)
            _add_pairs(store, pairs, episode.question_id in heldout, train_ids, held_ids)
        dumps = _dump_pairs(args, reader, heldout, store) if args.reader_dumps else {}
    for source in dumps.values():
        train_ids += source.pop("train_ids")
        held_ids += source.pop("heldout_ids")
    held["heldout_branch_pair_ids"] = held["heldout_pair_ids"]
    held["heldout_pair_ids"] = held_ids
    return {"train_pairs": len(train_ids), "heldout_pairs": len(held_ids), "states": states,
            "minutes": (time.perf_counter() - started) / 60, "dumps": dumps}


def _add_pairs(store: Any, pairs: list[Any], held_out: bool, train_ids: list[int], held_ids: list[int]) -> None:
    """Store answer pairs: a held-out question's are discarded at once (no round claims them; phase 4 scores them)."""
    ids = store.add_pairs(pairs)
    if held_out:
        for i in ids:
            store.discard_pair(i)
        held_ids += ids
    else:
        train_ids += ids


def _evaluation_ids(args: argparse.Namespace) -> set[str]:
    """The ids of the evaluation slice's questions (no answer pair may come from them)."""
    from evorag_core.data.datasets import load_dataset

    el, eh = _slice(args.eval)
    return {q.id for q in load_dataset(DATA).questions[el:eh]}


def _dump_pairs(args: argparse.Namespace, reader: Any, heldout: set[str], store: Any) -> dict[str, Any]:
    """`--reader-dumps`: answer pairs also at the states bench/answer_dump.py dumped (a question with the passages its
    reader read: fixed-k's top hits, or the agent's passages at its ANSWER step), `--dump-max-pairs` per state.
    Every dumped question of the evaluation slice is left out; a held-out question's pairs are held out. A question
    whose dumped candidates hold nothing right (none scores `min_best` by `ans`, and not yes/no) is not read again:
    the reader's candidates are the dump's, so it could give no pair."""
    from tqdm import tqdm

    from evorag_core.env.signals import answer_score
    from evorag_core.pairs.reader_pairs import state_reader_pairs
    from evorag_core.types import Passage

    evaluated = _evaluation_ids(args)
    out: dict[str, Any] = {}
    for path in [Path(p) for p in args.reader_dumps.split(",") if p]:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        kept = [r for r in rows if r["id"] not in evaluated and r.get("passages")
                and (r.get("yes_no", {}).get("is") or any(answer_score(c["text"], r["answers"]) >= 0.5
                                                          for c in r.get("candidates", [])))]
        train_ids: list[int] = []
        held_ids: list[int] = []
        for row in tqdm(kept, desc=f"answer pairs {path.name}", file=sys.stdout, mininterval=30):
            passages = [Passage(p["pid"], p["title"], p["text"]) for p in row["passages"]]
            pairs = state_reader_pairs(reader, row["question"], passages, row["answers"],
                                       {"question_id": row["id"], "set": row["set"], "dump": path.name},
                                       stage=args.stage, max_pairs=args.dump_max_pairs, against=args.pair_against)
            _add_pairs(store, pairs, row["id"] in heldout, train_ids, held_ids)
        out[path.name] = {"rows": len(rows), "left_out_eval": sum(r["id"] in evaluated for r in rows),
                          "read": len(kept), "train_ids": train_ids, "heldout_ids": held_ids,
                          "train_pairs": len(train_ids), "heldout_pairs": len(held_ids),
                          "train_questions": len({r["id"] for r in kept if r["id"] not in heldout})}
    return out


# -- phase 3: rounds ------------------------------------------------------------------------------------------------

def phase_round(args: argparse.Namespace, objective: str, held: dict[str, Any]) -> dict[str, Any]:
    from evorag_core.store import open_store
    from training.job import job_config

    values: dict[str, Any] = {"reference": "base", "seed": args.seed, "max_steps": args.max_steps or None}
    if objective == "dpo":
        # TRL's DPO runs chosen and rejected (2 x batch sequences) and builds full-vocabulary logits: at batch 4 x 512
        # tokens its worker reached 7.4 GB RSS and was OOM-killed on the shared 23 GB machine; 2 x 2 accumulation
        # keeps the effective batch of 4 with half the activations.
        half = max(args.batch // 2, 1)
        values.update(pairs=100_000, train={"batch_size": half, "grad_accum": max(args.batch // half, 1)})
    else:
        values.update(episode_ids=held["train_episode_ids"],
                      data=str(DATA if args.corpus == "pooled" else args.train_file))
    with open_store(args.db) as store:
        queued = store.count_pairs("status").get("queued", 0)
        rid = store.enqueue_round(objective, job_config(objective, **values))
    if objective == "dpo" and args.max_steps and args.max_steps * args.batch / args.epochs < queued:
        # the round claims only the pairs its steps use (training/objectives/dpo/round.claim_size), the oldest first: with more
        # training pairs than max_steps x batch / epochs, the later ones (e.g. --reader-dumps') are never trained on
        print(f"bench.learning: the {objective} round trains on {args.max_steps * args.batch // args.epochs} of "
              f"{queued} queued pairs (the oldest); --epochs 1 --max-steps "
              f"{-(-queued // args.batch)} would use them all", file=sys.stderr)
    log = args.home / f"learning_round_{objective}.log"
    # The round runs alone on the machine (rollouts are done, evaluation has not begun): it gets the workers' whole
    # CPU share, as a studio's worker would (policy.threads, default: all cores). Until 2026-11-24 it got
    # --threads (1), half of a 2-core machine, and the DPO round took 18 minutes instead of about 11.
    threads = args.round_threads or args.threads * args.workers
    argv = [sys.executable, "-m", "evorag_core.cli.main", "worker", "--once", "--home", str(args.home), "--db", args.db,
            *_set_flags(args), "--set", f"policy.threads={threads}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=str(threads))
    load0 = os.getloadavg()[0]
    with log.open("a") as fh:
        code = subprocess.call(argv, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    with open_store(args.db) as store:
        r = store.get_round(rid)
    if code != 0 or r.status != "succeeded":
        return {"round_id": rid, "status": r.status, "error": r.error, "exit_code": code}
    m = r.metrics or {}
    keep = ("adapter", "adapter_path", "steps", "samples", "pairs", "n_train", "episodes", "first_loss", "final_loss",
            "final_kl", "kl_end", "final_rewards_accuracies", "final_rewards_margins", "surrogate_start",
            "surrogate_end", "first_value_loss", "final_value_loss", "wall_s", "setup_s", "train_s",
            "seconds_per_step", "peak_rss_mb", "truncated_prompts", "loss_history")
    return {"round_id": rid, "status": r.status, "minutes": (r.finished_at - r.started_at).total_seconds() / 60,
            "queued_pairs": queued, "threads": threads, "load_avg_start": load0, "load_avg_end": os.getloadavg()[0],
            **{k: m[k] for k in keep if k in m}}


# -- phase 4: held-out pair accuracy --------------------------------------------------------------------------------

def phase_pair_accuracy(args: argparse.Namespace, held: dict[str, Any], rounds: dict[str, Any]) -> dict[str, Any]:
    import torch

    from evorag_core.lm.loading import load_model
    from evorag_core.store import open_store
    from training.objectives.dpo.trainer import pair_margins
    from training.objectives.dpo.round import pair_examples
    from evorag_core.adapters.files import load_adapter
    from evorag_core.lm.loading import base_model_id

    cfg = _config(args)
    torch.set_num_threads(args.threads * args.workers)  # one process here: the workers' whole share of the CPU
    with open_store(args.db) as store:
        pairs = [store.get_pair(i) for i in held["heldout_pair_ids"]]
    out: dict[str, Any] = {"pairs": len(pairs)}
    if not pairs:
        return out
    for objective, r in rounds.items():
        if r.get("status") != "succeeded":
            continue
        model, tokenizer, _ = load_model(args.model, args.home, device="cpu")
        examples, _ = pair_examples(pairs, tokenizer, cfg.train.max_length)
        policy = load_adapter(model, Path(r["adapter_path"]), base_model_id(args.model, args.home))
        margins = pair_margins(policy, tokenizer, examples, beta=cfg.train.beta, max_length=cfg.train.max_length,
                               ref_adapter_name=None, batch_size=args.batch)
        out[objective] = {"accuracy": sum(m > 0 for m in margins) / len(margins),
                          "mean_margin": sum(margins) / len(margins), "n": len(margins)}
    return out


# -- phase 5: evaluation --------------------------------------------------------------------------------------------

def eval_part(args: argparse.Namespace, name: str, adapter_path: str | None) -> None:
    """Child process: greedy episodes of one policy on the eval slice; results appended to JSON lines (resumable)."""
    import torch

    from evorag_core.data.datasets import load_dataset

    cfg = _config(args, **{"env.t_max": args.eval_t_max})
    torch.set_num_threads(args.threads)
    evaluate_adapter(cfg, args.home, args.eval_file, _corpus_source(args, load_dataset(args.eval_file)), name,
                     adapter_path, args.home / f"learning_eval_{name}.jsonl")


def phase_eval(args: argparse.Namespace, rounds: dict[str, Any]) -> dict[str, Any]:
    from evorag_core.evaluation.runner import load_results

    policies = [("base", None)] + [(o, r["adapter_path"]) for o, r in rounds.items() if r.get("status") == "succeeded"]
    base_file = args.home / "learning_eval_base.jsonl"
    if args.base_eval_from and not base_file.exists():
        # Another run's base-policy episodes on the same slice with the same settings (the base policy does not
        # depend on the pairs): copied as they are; the resumable evaluation runs whatever questions they lack.
        base_file.write_bytes(Path(args.base_eval_from).read_bytes())
    started = time.perf_counter()
    run_processes([(lambda log, name=name, path=path: _spawn(args, ["--eval-part", name, "--adapter-path", path or ""],
                                                            log), args.home / f"learning_eval_{name}.log")
                   for name, path in policies], args.workers)
    results = {name: load_results(args.home / f"learning_eval_{name}.jsonl") for name, _ in policies}
    out: dict[str, Any] = {"minutes": (time.perf_counter() - started) / 60, "t_max": args.eval_t_max}
    out.update(summarize_against(results, [(name, "base") for name in results if name != "base"]))
    return out


# -- phase 6: the reader alone on fixed passages -------------------------------------------------------------------

def _eval_dump_rows(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """(dump name, row) for every `--reader-dumps` row of a question of the evaluation slice (no pair came from these)."""
    evaluated = _evaluation_ids(args)
    out = []
    for path in [Path(p) for p in args.reader_dumps.split(",") if p]:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out += [(path.name, r) for r in rows if r["id"] in evaluated and r.get("passages")]
    return out


def reader_part(args: argparse.Namespace, name: str, adapter_path: str | None) -> None:
    """Child process: one policy's reader (the base model, or `adapter_path` active) answers each evaluation question
    from its dumped passages; rows appended to <home>/learning_reader_<name>.jsonl (resumable)."""
    import torch

    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.metrics import exact_match, f1_score
    from evorag_core.reader.answers import Reader
    from evorag_core.types import Passage

    cfg = _config(args)
    torch.set_num_threads(args.threads)
    backend = TransformersBackend(cfg.policy, args.home)
    if adapter_path:
        backend.load_adapter(name, adapter_path)
        backend.activate(name)
    reader = Reader(backend, cfg.answer, cfg.policy.passage_chars)
    out = args.home / f"learning_reader_{name}.jsonl"
    done = {(r["dump"], r["question_id"]) for r in map(json.loads, out.read_text().splitlines())} if out.exists() else set()
    with out.open("a") as fh:
        for dump, row in _eval_dump_rows(args):
            if (dump, row["id"]) in done:
                continue
            passages = [Passage(p["pid"], p["title"], p["text"]) for p in row["passages"]]
            (answer,) = reader.read(row["question"], passages)
            fh.write(json.dumps({"dump": dump, "question_id": row["id"], "prediction": answer.text, "kind": answer.kind,
                                 "gold": row["answers"], "em": exact_match(answer.text, row["answers"]),
                                 "f1": f1_score(answer.text, row["answers"])}) + "\n")
            fh.flush()


def phase_reader_eval(args: argparse.Namespace, rounds: dict[str, Any]) -> dict[str, Any]:
    """The reader alone: each policy answers the evaluation questions from the dumped passages (`--reader-dumps`:
    fixed-k's top hits, the base agent's passages at its ANSWER step), the same passages for every policy, so what
    changes is only which answer the reader picks - the part of the episodes the answer pairs train. Paired
    bootstrap of each adapter against the base, per dump."""
    from evorag_core.metrics import paired_bootstrap

    policies = [("base", None)] + [(o, r["adapter_path"]) for o, r in rounds.items() if r.get("status") == "succeeded"]
    started = time.perf_counter()
    run_processes([(lambda log, name=name, path=path: _spawn(args, ["--reader-part", name, "--adapter-path", path or ""],
                                                            log), args.home / f"learning_reader_{name}.log")
                   for name, path in policies], 1)
    rows = {name: [json.loads(line) for line in (args.home / f"learning_reader_{name}.jsonl").read_text().splitlines()]
            for name, _ in policies}
    out: dict[str, Any] = {"minutes": (time.perf_counter() - started) / 60}
    for dump in sorted({r["dump"] for r in rows["base"]}):
        base = {r["question_id"]: r for r in rows["base"] if r["dump"] == dump}
        entry: dict[str, Any] = {"n": len(base), "base": {m: sum(r[m] for r in base.values()) / len(base)
                                                          for m in ("em", "f1")}}
        for name in rows:
            if name == "base":
                continue
            mine = {r["question_id"]: r for r in rows[name] if r["dump"] == dump and r["question_id"] in base}
            ids = sorted(mine)
            entry[name] = {
                "n": len(ids), **{m: sum(mine[i][m] for i in ids) / max(len(ids), 1) for m in ("em", "f1")},
                "changed": sum(mine[i]["prediction"] != base[i]["prediction"] for i in ids),
                "vs_base": {m: paired_bootstrap([mine[i][m] for i in ids], [base[i][m] for i in ids]).__dict__
                            for m in ("em", "f1")},
            }
        out[dump] = entry
    return out


# -- driver ---------------------------------------------------------------------------------------------------------

def _targets(state: dict[str, Any]) -> dict[str, Any]:
    acc = state.get("pair_accuracy", {}).get("dpo", {}).get("accuracy")
    rounds = state.get("rounds", {})
    ev = state.get("eval", {})
    fewer_steps, not_significantly_lower, f1_above = {}, {}, {}
    for o in OBJECTIVES:
        cmp = ev.get(o, {}).get("vs_base")
        if cmp:
            f1_above[o] = cmp["f1"]["diff"] > 0 and cmp["f1"]["p_value"] < 0.05  # issue #22's learning target
            fewer = cmp["steps"]["diff"] < 0 and cmp["steps"]["p_value"] < TARGETS["steps_p_max"]
            fewer_steps[o] = fewer and cmp["f1"]["diff"] >= 0
            not_significantly_lower[o] = fewer and (cmp["f1"]["diff"] >= 0 or cmp["f1"]["p_value"] >= 0.05)
    reader_f1_above = {  # the same target for the reader alone on each dump's passages (phase 6)
        dump: {o: entry[o]["vs_base"]["f1"]["diff"] > 0 and entry[o]["vs_base"]["f1"]["p_value"] < 0.05
               for o in OBJECTIVES if o in entry}
        for dump, entry in state.get("reader_eval", {}).items() if isinstance(entry, dict) and "base" in entry}
    return {
        "dpo_heldout_accuracy": acc, "dpo_heldout_accuracy_met": acc is not None and acc >= 0.65,
        "fewer_steps_without_lower_f1_p<0.05": fewer_steps, "any_objective_met": any(fewer_steps.values()),
        "fewer_steps_f1_not_significantly_lower": not_significantly_lower,
        "f1_above_base_p<0.05": f1_above, "reader_f1_above_base_p<0.05": reader_f1_above,
        "round_minutes": {o: r.get("minutes") for o, r in rounds.items()},
        "rounds_within_15_min": {o: (r.get("minutes") or 1e9) <= TARGETS["round_minutes_max"] for o, r in rounds.items()},
    }


def _machine(args: argparse.Namespace) -> dict[str, Any]:
    """The host, with what decides training speed: CPU model and whether train.dtype resolved to bf16 natively."""
    from evorag_core.lm.half_decode import cpu_has_native_bf16, cpu_model
    from training.precision import resolve_train_dtype

    return {"cpus": os.cpu_count(), "platform": platform.platform(), "cpu_model": cpu_model(),
            "native_bf16": cpu_has_native_bf16(), "train_dtype": resolve_train_dtype(args.dtype, "cpu"),
            "load_avg_now": os.getloadavg()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with the paths every phase derives from `--home`."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", default="0:16", help="training slice START:STOP of the data file")
    ap.add_argument("--eval", default="100:124", help="evaluation slice START:STOP (disjoint from --train)")
    ap.add_argument("--workers", type=int, default=2, help="parallel rollout/eval processes")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--round-threads", type=int, default=0,
                    help="torch threads of a training round (default 0: workers x threads, the whole share)")
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=12, help="optimiser steps per round at most (0: no cap)")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                    help="train.dtype (auto: bf16 only where the CPU has native bf16, else float32)")
    ap.add_argument("--grad-ckpt", action="store_true")
    ap.add_argument("--passage-chars", type=int, default=120)
    ap.add_argument("--answer-chars", type=int, default=0, help="the reader's passage cut (0: --passage-chars)")
    ap.add_argument("--rollouts-from", type=Path, default=None,
                    help="phase 1 from this SQLite store (rolled out with the same slice and settings) instead of "
                         "rolling out again")
    ap.add_argument("--corpus", choices=["per-question", "pooled"], default="pooled",
                    help="retrieval corpus: each question's 10 passages, or all passages of the data file pooled")
    ap.add_argument("--t-max", type=int, default=5, help="T_max of the rollouts")
    ap.add_argument("--stage", choices=["discovery", "refinement"], default="discovery",
                    help="curriculum stage of the rollouts and rounds (its schedule scores the branches)")
    ap.add_argument("--eval-t-max", type=int, default=8, help="T_max of the evaluation episodes")
    ap.add_argument("--siblings", type=int, default=4)
    ap.add_argument("--max-states", type=int, default=3)
    ap.add_argument("--heldout", type=float, default=0.25, help="share of training questions whose pairs are held out")
    ap.add_argument("--base-eval-from", default=None, metavar="JSONL",
                    help="reuse another run's base-policy evaluation lines (same eval slice and settings)")
    ap.add_argument("--pair-filter", choices=["all", "ans-better", "reader"], default="all",
                    help="train on all pairs, or only on those whose chosen branch has the higher answer score G^ans "
                         "(held-out pairs are kept whole either way), or only on answer pairs under the reader "
                         "prompt built from the rollouts' states (reader)")
    ap.add_argument("--reader-dumps", default="", metavar="JSONL[,JSONL]",
                    help="with --pair-filter reader: answer pairs also at the states of these bench/answer_dump.py "
                         "files (the evaluation slice's questions left out)")
    ap.add_argument("--dump-max-pairs", type=int, default=1, help="answer pairs per dumped state at most")
    ap.add_argument("--pair-against", choices=["top", "random"], default="top",
                    help="answer pairs reject the reader's highest-ranked wrong candidates (top) or a seeded random "
                         "draw of its wrong candidates (random)")
    ap.add_argument("--no-rollouts", action="store_true",
                    help="no phase 1: with --pair-filter reader --reader-dumps --objectives dpo, train on the dumps' "
                         "answer pairs alone")
    ap.add_argument("--no-agent-eval", action="store_true",
                    help="skip phase 5 (the agent's episodes); the reader-alone phase 6 still runs")
    ap.add_argument("--ranker", choices=["learned", "lm"], default="learned",
                    help="answer.ranker everywhere: the learned ranker (default) or the LM's span scores alone")
    ap.add_argument("--ranker-path", default="",
                    help="with --ranker learned: a refitted weight file (e.g. bench/results/ranker_dev.json, fitted "
                         "without the HotpotQA evaluation questions); default the packaged one")
    ap.add_argument("--passage-order", choices=PASSAGE_ORDERS, default="retrieval",
                    help="answer.passage_order of every reader prompt: the answer pairs' and the reader's evaluation")
    ap.add_argument("--seed", type=int, default=0, help="the rounds' training seed (LoRA init, pair order)")
    ap.add_argument("--objectives", default=",".join(OBJECTIVES))
    ap.add_argument("--model", default="embedded", help="policy model (a folder for smoke runs; default embedded)")
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("EVORAG_HOME", ROOT / ".evorag")))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "learning.json")
    ap.add_argument("--rollout-part", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--eval-part", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--adapter-path", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--reader-part", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.no_rollouts and not (args.pair_filter == "reader" and args.reader_dumps and args.objectives == "dpo"):
        ap.error("--no-rollouts needs --pair-filter reader, --reader-dumps and --objectives dpo (GRPO and PPO train "
                 "on rollout episodes)")
    args.home = args.home.resolve()
    args.home.mkdir(parents=True, exist_ok=True)
    args.db = f"sqlite:///{args.home / 'bench_learning.db'}"
    args.train_file = args.home / "learning_train.jsonl"
    args.eval_file = args.home / "learning_eval.jsonl"
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.rollout_part:
        return rollout_part(args, *_slice(args.rollout_part))
    if args.eval_part:
        return eval_part(args, args.eval_part, args.adapter_path or None)
    if args.reader_part:
        return reader_part(args, args.reader_part, args.adapter_path or None)

    (tl, th), (el, eh) = _slice(args.train), _slice(args.eval)
    if max(tl, el) < min(th, eh):
        raise SystemExit(f"--train {args.train} and --eval {args.eval} overlap")
    state_file = args.home / "learning_state.json"
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file.is_file() else {}

    def save() -> None:
        state_file.write_text(json.dumps(state, indent=2, default=str))
        result = {"settings": settings(args, lambda k: k.endswith("_part") or k == "adapter_path"),
                  "config": _settings(args), "machine": _machine(args),
                  **state, "targets": _targets(state)}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str))

    if "rollouts" not in state:
        _write_slice(args.train_file, tl, th)
        if args.no_rollouts:
            state["rollouts"] = {"questions": th - tl, "episodes": 0, "pairs": 0, "skipped": "--no-rollouts"}
        else:
            state["rollouts"] = reuse_rollouts(args) if args.rollouts_from else phase_rollouts(args)
        save()
    if "heldout" not in state:
        state["heldout"] = phase_heldout(args)
        save()
    if args.pair_filter == "reader" and "reader_pairs" not in state:
        state["reader_pairs"] = phase_reader_pairs(args, state["heldout"])
        save()
    state.setdefault("rounds", {})
    for objective in [o for o in args.objectives.split(",") if o]:
        if state["rounds"].get(objective, {}).get("status") != "succeeded":
            if objective in state["rounds"]:  # an earlier attempt failed or its worker died: keep the record
                state.setdefault("failed_attempts", []).append({"objective": objective, **state["rounds"][objective]})
            state["rounds"][objective] = phase_round(args, objective, state["heldout"])
            save()
    trained = {o for o, r in state["rounds"].items() if r.get("status") == "succeeded"}
    if "pair_accuracy" not in state or not trained <= set(state["pair_accuracy"]):
        state["pair_accuracy"] = phase_pair_accuracy(args, state["heldout"], state["rounds"])
        save()
    if not args.no_agent_eval and ("eval" not in state or not trained <= set(state["eval"])):
        _write_slice(args.eval_file, el, eh)
        state["eval"] = phase_eval(args, state["rounds"])
        save()
    if args.reader_dumps and ("reader_eval" not in state or not trained <= set(state["reader_eval"].get("policies", []))):
        state["reader_eval"] = {**phase_reader_eval(args, state["rounds"]), "policies": sorted(trained)}
        save()
    print(json.dumps(_targets(state), indent=2))


if __name__ == "__main__":
    main()
