"""The GPU paths end to end on one machine: policy backend, agent episode, rollouts, one DPO / GRPO / PPO round each,
adapter hot swap; prints figures and writes JSON (default bench/results/gpu_check.json).

    python -m bench.gpu_check --device cuda --random-from .gpu/smollm2 --hash-embedder \
        [--dtypes float32,bfloat16] [--train-dtypes bfloat16,float32,bfloat16-weights] [--questions 12] \
        [--epochs 4] [--accelerate] [--set SECTION.KEY=VALUE ...] [--home DIR] [--out PATH]

Model: `--model FOLDER` (a transformers folder, e.g. the embedded model's dequantized cache) or `--random-from
FOLDER`: a folder with a model's config.json and tokenizer, from which a *randomly initialised* model of that
architecture is built (seeded) and saved under the home folder; `--shrink` makes it 2 layers of width 64 (a CPU smoke
run of this script). A random SmolLM2-135M has the real model's shapes, tokenizer and chat template, so its speed and
memory are the real model's; what it writes is noise, so its episodes, pairs and rewards say nothing about quality.
`--hash-embedder` replaces the MiniLM embedder by hashed 64-d vectors (no model; retrieval quality is not what this
checks). Nothing is downloaded: run it with HF_HUB_OFFLINE=1.

Per policy dtype (`--dtypes`): backend load; prefill of an agent prompt; greedy decode at batch 1 (128 tokens, end
tokens ignored), and transformers' own `generate` on the same model for reference; batched sibling sampling n = 4 and
8 (64 tokens each); `LMPolicy.candidates(k=4)`; prefix-cache consistency (choice scores on a warm cache vs. a cold
one); on CUDA, kernel time and kernels per decode step (torch.profiler); one agent episode on the demo set to its end
(its first query generated, `policy.first_query = "generate"`). Then, on the backend of the configured
`policy.dtype`: sibling-branch rollouts of `--questions` demo questions into a SQLite store; an untimed set of
one-step warm-up rounds (a process's first rounds pay one-time CUDA and library set-up); and per training dtype
(`--train-dtypes`; `bfloat16-weights` also loads the base in bf16) one DPO (its share of the stored pairs), GRPO and
PPO round of `--epochs` epochs, run by the worker (`training.worker.process_one`, LoRA). Each adapter is activated
and hot-swapped into the running backend by the watcher, which then decodes again and scores the pairs' completions.
Seconds per round and peak GPU memory (`torch.cuda.max_memory_allocated`, the backend's own model included; `base_mb`
= allocated before the round).
`--accelerate`: rounds of `--accelerate-objectives` (default grpo; `dpo,grpo` for both) by `accelerate launch -m
training.worker --once` (DeepSpeed ZeRO-2 from training/accelerate/zero2.yaml if deepspeed is installed, else one
plain process; the JSON says which, and `deepspeed_log` holds the launch's DeepSpeed engine / ZeRO lines: only the DPO
round goes through TRL's Trainer and so through DeepSpeed). `--train-dtypes none` skips the in-process rounds.
A section that fails is recorded with its traceback under `errors` and the others still run; `ok` is true only when
every section ran and every round succeeded and was hot-swapped in.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from evorag_core.env.actions import action_name
from evorag_core.config import Config, apply_overrides, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.methods.base import run_episode
from evorag_core.policy.agent import LMPolicy
from evorag_core.lm.hf_backend import TransformersBackend
from evorag_core.policy.prompts import LABELS
from evorag_core.adapters.watcher import AdapterWatcher, PinnedPolicy
from evorag_core.runtime import Runtime
from evorag_core.env.state import AgentView, Hop
from training.worker import quiet_progress_bars

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo" / "demo.jsonl"
PACKAGES = ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "sqlalchemy", "pyarrow", "deepspeed",
            "vllm")


class HashEmbedder:
    """Deterministic 64-d unit vectors from a text hash (no model): the environment's query embeddings and the
    dense retriever work, their content does not matter here."""

    dim, model_id = 64, "hash-64"

    def encode(self, texts, batch_size=None) -> np.ndarray:
        rows = [np.frombuffer(hashlib.sha512(t.encode()).digest(), dtype=np.uint8)[:64] for t in texts]
        vecs = np.array(rows, dtype=np.float32).reshape(len(texts), 64) - 127.5
        return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-6)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], runs: int = 3) -> tuple[float, Any]:
    """Median wall seconds of `runs` calls (after one untimed warm-up call) and the last result."""
    fn()
    times, out = [], None
    for _ in range(runs):
        _sync()
        start = time.perf_counter()
        out = fn()
        _sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def _mb(n: int) -> float:
    return round(n / (1 << 20), 1)


def environment(device: str) -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    out: dict[str, Any] = {"python": platform.python_version(), "packages": versions, "device": device,
                           "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(gpu=props.name, gpu_memory_mb=_mb(props.total_memory), capability=list(torch.cuda.get_device_capability(0)),
                   cuda=torch.version.cuda, bf16_supported=torch.cuda.is_bf16_supported())
    return out


def random_model(source: Path, home: Path, *, shrink: bool, seed: int = 0) -> Path:
    """A randomly initialised model with `source`'s config (shrunk to 2 x 64 with `shrink`) and tokenizer, saved
    under `home/models/` (reused when already there)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out = home / "models" / f"random-{source.name}{'-shrunk' if shrink else ''}-s{seed}"
    if (out / "config.json").is_file():
        return out
    config = AutoConfig.from_pretrained(source)
    if shrink:
        config.update({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "head_dim": 16})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


def demo_view(runtime: Runtime, hops: int = 3, per_hop: int = 3) -> AgentView:
    """An agent view of demo question 0 with `hops` hops of its own passages (a prompt of several hundred tokens)."""
    q = runtime.dataset.questions[0]
    passages = list(runtime.corpus_for(q).passages)[: hops * per_hop]
    chain = tuple(Hop(f"search {i + 1}: {q.question[:40]}", tuple(passages[i * per_hop:(i + 1) * per_hop]))
                  for i in range(hops))
    return AgentView(q.question, chain, (), hops + 1, 20)


def check_backend(cfg: Config, home: Path, runtime: Runtime, dtype: str) -> tuple[dict[str, Any], TransformersBackend]:
    policy_cfg = dataclasses.replace(cfg.policy, dtype=dtype, first_query="generate")  # the episode decodes too
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    backend = TransformersBackend(policy_cfg, home)
    lm = LMPolicy(backend, policy_cfg)
    view = demo_view(runtime)
    prompt = lm.prompt(view)
    n_prompt = len(backend.encode(prompt))
    out: dict[str, Any] = {"dtype": dtype, "device": backend.device, "model_dtype": backend.dtype,
                           "load_s": round(backend.load_seconds, 3), "prompt_tokens": n_prompt,
                           "half_decode_linears": backend.half_decode_linears,
                           "bf16_prefill_linears": backend.bf16_prefill_linears, "shared_prefix": backend.shared_prefix}

    def prefill():
        backend.reset_cache()
        backend.warm(prompt)

    sec, _ = _timed(prefill)
    out["prefill_s"], out["prefill_tok_s"] = round(sec, 4), round(n_prompt / sec, 1)

    backend.warm(prompt)
    sec, gen = _timed(lambda: backend.generate(prompt, 128, temperature=0.0, ignore_eos=True)[0], runs=5)
    again = backend.generate(prompt, 128, temperature=0.0, ignore_eos=True)[0]
    out.update(decode_batch1_tok_s=round(len(gen.token_ids) / sec, 1), decode_tokens=len(gen.token_ids),
               greedy_repeatable=gen.token_ids == again.token_ids)
    ids = torch.tensor([backend.encode(prompt)], device=backend.model.device)
    sec, _ = _timed(lambda: backend.model.generate(  # transformers' own loop, same model: the reference
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=128, min_new_tokens=128, do_sample=False,
        pad_token_id=backend.tokenizer.pad_token_id))
    out["hf_generate_batch1_tok_s"] = round(128 / sec, 1)  # includes one prefill of the prompt
    if torch.cuda.is_available():
        out["decode_profile"] = decode_profile(backend, prompt)
    for n in (4, 8):
        sec, gens = _timed(lambda: backend.generate(prompt, 64, temperature=0.8, n=n, seed=1, ignore_eos=True))
        tokens = sum(len(g.token_ids) for g in gens)
        out[f"siblings{n}_tok_s"] = round(tokens / sec, 1)
        out[f"siblings{n}_distinct"] = len({g.token_ids for g in gens})
    sec, cands = _timed(lambda: lm.candidates(view, 4, seed=3))
    out.update(candidates4_s=round(sec, 4), candidates4_actions=[action_name(c.action) for c in cands])

    labels = list(LABELS.values())
    backend.reset_cache()
    cold = backend.score_choices(prompt, labels)
    backend.reset_cache()
    backend.warm(lm.prompt(dataclasses.replace(view, chain=view.chain[:1], t=2)))  # a shorter view: shared head only
    reused = backend.cached_prompt_tokens
    warm = backend.score_choices(prompt, labels)
    out.update(prefix_cache_reused_tokens=backend.cached_prompt_tokens - reused,
               prefix_cache_max_abs_diff=max(abs(a - b) for a, b in zip(cold, warm)))

    policy = PinnedPolicy(lm, AdapterWatcher(_NullStore(), backend, min_interval_s=0.0))
    question = runtime.dataset.questions[1]
    backend.reset_cache()
    tokens0, start = backend.tokens_generated, time.perf_counter()
    record = run_episode(runtime.make_env(question), policy, question)
    _sync()
    out["episode"] = {"question": question.id, "steps": len(record.steps), "seconds": round(time.perf_counter() - start, 3),
                      "actions": [action_name(s.action) for s in record.steps], "done": record.done,
                      "generated_tokens": backend.tokens_generated - tokens0}
    if torch.cuda.is_available():
        out["peak_gpu_mb"] = _mb(torch.cuda.max_memory_allocated())
    return out, backend


def decode_profile(backend: TransformersBackend, prompt: str, tokens: int = 32) -> dict[str, Any]:
    """GPU kernel time and kernel count per greedy decode step (torch.profiler) beside the wall time per step: when
    the kernels take a small share of the step, the step is bound by launching them from Python, not by the GPU."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    backend.warm(prompt)
    backend.generate(prompt, tokens, temperature=0.0, ignore_eos=True)
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            _sync()
            start = time.perf_counter()
            backend.generate(prompt, tokens, temperature=0.0, ignore_eos=True)
            _sync()
            wall = time.perf_counter() - start
        kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
        gpu_us = sum(e.self_device_time_total for e in kernels)
        return {"tokens": tokens, "wall_ms_per_token_profiled": round(wall * 1e3 / tokens, 2),
                "gpu_kernel_ms_per_token": round(gpu_us / 1e3 / tokens, 2),
                "kernels_per_token": round(sum(e.count for e in kernels) / tokens, 1)}
    except Exception as exc:  # noqa: BLE001 - a figure, not a check: say why it is missing
        return {"error": f"{type(exc).__name__}: {exc}"}


class _NullStore:
    """A store without adapters (the backend check runs on the base model)."""

    def active_adapter(self):
        return None


def _pair_logprobs(backend: TransformersBackend, pairs) -> list[float]:
    return [backend.sequence_logprob(p.prompt, p.chosen) for p in pairs]


def run_round(store, cfg: Config, home: Path, objective: str, job: dict[str, Any], backend, watcher, policy,
              probe_pairs, base_lps: list[float], probe_view: AgentView) -> dict[str, Any]:
    """Enqueue and run one round with the worker, activate its adapter, let the watcher hot-swap it in, decode."""
    from evorag_core.adapters.registry import activate
    from training.worker import WorkerOptions, process_one

    rid = store.enqueue_round(objective, job)
    cuda = torch.cuda.is_available()
    if cuda:
        _sync()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    done = process_one(store, cfg, home, "gpu-check", WorkerOptions(lease_s=120))
    _sync()
    out: dict[str, Any] = {"objective": objective, "round": rid, "status": done.status,
                           "wall_s": round(time.perf_counter() - start, 2)}
    if cuda:
        out.update(base_mb=_mb(base), peak_gpu_mb=_mb(torch.cuda.max_memory_allocated()))
    if done.status != "succeeded":
        out["error"] = done.error
        return out
    m = done.metrics
    steps = m.get("steps") or 0
    out.update(steps=steps, train_s=round(float(m.get("train_s", 0.0)), 2), setup_s=round(float(m.get("setup_s", 0.0)), 2),
               round_wall_s=round(float(m.get("wall_s", 0.0)), 2),
               seconds_per_step=round(float(m["train_s"]) / steps, 3) if steps and m.get("train_s") else None,
               final_loss=m.get("final_loss"), samples=m.get("samples", m.get("n_train")), adapter=m["adapter"])
    activate(store, m["adapter"], backend.model_id)
    policy.begin(None)  # the watcher injects and activates the adapter in the running backend
    out["hot_swapped"] = backend.active_adapter == m["adapter"] == policy.adapter
    start = time.perf_counter()
    decision = policy.lm.act(probe_view)
    gen = backend.generate(policy.lm.prompt(probe_view), 32, temperature=0.0, ignore_eos=True)[0]
    _sync()
    after = _pair_logprobs(backend, probe_pairs)
    out.update(decode_after_s=round(time.perf_counter() - start, 3), decode_after_tokens=len(gen.token_ids),
               action_after=action_name(decision.action),
               logprob_change_max=max(abs(a - b) for a, b in zip(after, base_lps)) if after else None)
    return out


def accelerate_round(cfg_args: list[str], home: Path, model: str, mixed_precision: str = "bf16") -> dict[str, Any]:
    """A GRPO round by `accelerate launch -m training.worker --once` in a child process."""
    deepspeed = importlib.util.find_spec("deepspeed") is not None
    if deepspeed:
        launch = ["--config_file", str(ROOT / "training" / "accelerate" / "zero2.yaml")]
    else:
        launch = ["--num_processes", "1", "--num_machines", "1", "--mixed_precision", mixed_precision,
                  "--dynamo_backend", "no"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *launch, "-m", "training.worker", "--once",
           "--home", str(home), "--model", model, *cfg_args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    # what says that DeepSpeed wrapped the model (its engine and ZeRO optimizer log these), not only that it imported
    markers = [line.strip()[:300] for line in out.splitlines()
               if any(m in line for m in ("DeepSpeedEngine", "ZeRO", "zero_optimization", "DeepSpeed info", "stage 2"))]
    return {"deepspeed": deepspeed, "launch": launch, "rc": proc.returncode, "wall_s": round(time.perf_counter() - start, 2),
            "deepspeed_log": markers[:30], "stderr_tail": proc.stderr[-1500:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a transformers model folder")
    src.add_argument("--random-from", type=Path, help="folder with config.json + tokenizer: random weights of that shape")
    p.add_argument("--shrink", action="store_true", help="with --random-from: 2 layers of width 64 (CPU smoke run)")
    p.add_argument("--hash-embedder", action="store_true", help="hashed query/passage vectors instead of MiniLM")
    p.add_argument("--dtypes", default="float32,bfloat16", help="policy dtypes to check the backend in")
    p.add_argument("--train-dtypes", default="bfloat16,float32,bfloat16-weights",
                   help="train.dtype of each set of rounds; bfloat16-weights: the base model loaded in bf16 as well; "
                        "none: no rounds in this process (only the accelerate ones)")
    p.add_argument("--questions", type=int, default=12, help="demo questions rolled out for the rounds")
    p.add_argument("--epochs", type=int, default=4, help="epochs of every round (more optimiser steps to time)")
    p.add_argument("--accelerate", action="store_true", help="also rounds under `accelerate launch`")
    p.add_argument("--accelerate-objectives", default="grpo",
                   help="objectives of the accelerate rounds (dpo goes through TRL's Trainer, so only a DPO round "
                        "engages DeepSpeed; GRPO and PPO are plain PyTorch loops)")
    p.add_argument("--home", type=Path, default=None, help="home folder (default: a fresh one under /tmp)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_check.json")
    args = p.parse_args(argv)

    home = args.home or Path(f"/tmp/evorag-gpu-check-{os.getpid()}")
    home.mkdir(parents=True, exist_ok=True)
    model = args.model or str(random_model(args.random_from, home, shrink=args.shrink))
    overrides = {"policy.model": model, "policy.device": args.device, "train.lr": 1e-3, "env.t_max": 6,
                 "rollout.t_max": 4, "policy.max_query_tokens": 16, "policy.max_answer_tokens": 12,
                 # each round is run and timed by itself: no gated-promotion evaluation queued between them
                 "promotion.evaluate": False}
    overrides.update(dict(s.split("=", 1) for s in args.set))
    cfg = apply_overrides(load_config(), overrides)
    report: dict[str, Any] = {"command": " ".join(sys.argv), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "model": model, "random_weights": bool(args.random_from), "shrunk": args.shrink,
                              "embedder": "hash-64" if args.hash_embedder else cfg.retrieval.dense_model,
                              "overrides": overrides, "environment": environment(args.device)}
    print(json.dumps(report["environment"]), flush=True)

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        if os.environ.get("OUT"):
            (Path(os.environ["OUT"]) / args.out.name).write_text(args.out.read_text(encoding="utf-8"), encoding="utf-8")

    runtime = Runtime(cfg, home, load_dataset(DEMO))
    if args.hash_embedder:
        from evorag_core.retrieval import RetrievalService

        runtime.retrieval = RetrievalService(cfg.retrieval, home, HashEmbedder())
    quiet_progress_bars()

    report["backend"], report["rounds"], errors = [], [], report.setdefault("errors", {})

    def attempt(name: str, fn: Callable[[], Any]) -> Any:
        """Run one section; a failure is recorded with its traceback and the remaining sections still run."""
        try:
            return fn()
        except Exception:  # noqa: BLE001 - the report is the point: every failure is written, none is hidden
            errors[name] = traceback.format_exc()[-4000:]
            print(f"FAILED {name}:\n{errors[name]}", flush=True)
            save()
            return None

    backend = None
    for dtype in args.dtypes.split(","):
        checked = attempt(f"backend_{dtype}", lambda: check_backend(cfg, home, runtime, dtype))
        if checked is None:
            continue
        result, loaded = checked
        print(json.dumps(result), flush=True)
        report["backend"].append(result)
        save()
        if backend is None and dtype == cfg.policy.dtype:
            backend = loaded  # the rollouts and hot swaps run on the configured dtype's backend
        else:
            del loaded
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    if backend is None:
        backend = attempt("backend_load", lambda: TransformersBackend(cfg.policy, home))
    if backend is not None:
        from evorag_core.store import open_store

        with open_store(f"sqlite:///{home / 'evorag.db'}") as store:
            train_and_swap(args, cfg, home, runtime, backend, store, report, overrides, model, attempt, save)
    failed = [r for r in report["rounds"] if r["status"] != "succeeded" or not r.get("hot_swapped")]
    n_dtypes = 0 if args.train_dtypes == "none" else len(args.train_dtypes.split(","))
    report["ok"] = (not errors and not failed and len(report["rounds"]) == 3 * n_dtypes
                    and all(b["episode"]["done"] for b in report["backend"]))
    save()
    print(f"ok={report['ok']} errors={sorted(errors)} -> {args.out}", flush=True)
    return 0 if report["ok"] else 1


def demo_rollouts(runtime: Runtime, lm: LMPolicy, backend, store, cfg: Config, questions: int) -> tuple[list, dict]:
    """Discovery-stage sibling rollouts of the first `questions` demo questions into `store`; returns the queued pairs
    and the figures (rollout stats, pairs queued, seconds, generated tokens)."""
    from evorag_core.pairs.rollout import PairSelector, run_rollouts

    selector = PairSelector(balance_ratio=cfg.rollout.balance_ratio)
    start, tokens0 = time.perf_counter(), backend.tokens_generated
    stats = run_rollouts(runtime.dataset.questions[:questions], runtime.make_env, lm, store, cfg.rollout, selector,
                         policy_name=f"lm:{backend.model_id}", stage="discovery")
    selector.finish()
    _sync()
    pairs = store.list_pairs(status="queued", limit=None)
    return pairs, {**stats.as_dict(), "pairs_queued": len(pairs), "seconds": round(time.perf_counter() - start, 2),
                   "generated_tokens": backend.tokens_generated - tokens0}


def train_and_swap(args, cfg: Config, home: Path, runtime: Runtime, backend, store, report: dict[str, Any],
                   overrides: dict[str, Any], model: str, attempt, save) -> None:
    """Rollouts into the store, then per training dtype a DPO, GRPO and PPO round, each adapter hot-swapped in."""
    from training.job import job_config

    watcher = AdapterWatcher(store, backend, min_interval_s=0.0)
    lm = LMPolicy(backend, cfg.policy)
    policy = PinnedPolicy(lm, watcher)

    def rollouts() -> list[Any]:
        pairs, report["rollouts"] = demo_rollouts(runtime, lm, backend, store, cfg, args.questions)
        print(json.dumps(report["rollouts"]), flush=True)
        save()
        return pairs

    pairs = attempt("rollouts", rollouts)
    if not pairs:
        return
    probe = pairs[:8]
    base_lps = _pair_logprobs(backend, probe)
    probe_view = demo_view(runtime, hops=1)
    train_dtypes = [] if args.train_dtypes == "none" else args.train_dtypes.split(",")
    share = max(1, (len(pairs) - len(train_dtypes)) // max(1, len(train_dtypes)))  # a warm-up DPO round takes one pair each
    report["warmup_rounds"] = []
    for warmup in (True, False):
        for tdt in train_dtypes:
            weights = "bfloat16" if tdt == "bfloat16-weights" else cfg.policy.dtype
            round_cfg = apply_overrides(cfg, {"train.dtype": tdt.removesuffix("-weights"), "policy.dtype": weights})
            steps = {"max_steps": 1, "epochs": 1} if warmup else {"epochs": args.epochs}
            jobs = [("dpo", job_config("dpo", pairs=1 if warmup else share, reference="base", **steps)),
                    ("grpo", job_config("grpo", reference="base", data=str(DEMO), **steps)),
                    ("ppo", job_config("ppo", reference="base", data=str(DEMO), **steps))]
            for objective, job in jobs:
                name = f"{'warmup_' if warmup else ''}round_{tdt}_{objective}"
                result = attempt(name, lambda: run_round(
                    store, round_cfg, home, objective, job, backend, watcher, policy, probe, base_lps, probe_view))
                if result is None:
                    continue
                result = {"train_dtype": tdt, **result}
                print(json.dumps(result), flush=True)
                report["warmup_rounds" if warmup else "rounds"].append(result)
                save()
    if args.accelerate:
        report["accelerate_rounds"] = []
        for objective in args.accelerate_objectives.split(","):
            def launched(objective: str = objective) -> None:
                if objective == "dpo":
                    job = job_config("dpo", pairs=len(store.list_pairs(status="queued", limit=None)), reference="base")
                else:
                    job = job_config(objective, reference="base", data=str(DEMO))
                rid = store.enqueue_round(objective, job)
                dtype = {"train.dtype": "bfloat16", **overrides}["train.dtype"]  # bf16 unless --set says otherwise
                cli = [f"--set={k}={v}" for k, v in {**overrides, "train.dtype": dtype}.items() if k != "policy.model"]
                result = accelerate_round(cli, home, model, "no" if dtype == "float32" else "bf16")
                row = store.get_round(rid)
                result.update(objective=objective, round=rid, status=row.status, error=row.error,
                              train_s=(row.metrics or {}).get("train_s"))
                report["accelerate_rounds"].append(result)
                report["accelerate"] = result  # the last one (older reports had a single GRPO round here)
                print(json.dumps(result), flush=True)
                save()

            attempt(f"accelerate_{objective}", launched)
        if any(r["status"] != "succeeded" for r in report["accelerate_rounds"]):
            why = "an accelerate round did not succeed (see accelerate_rounds)"
            report.setdefault("errors", {})["accelerate"] = why  # the dict main's `errors` names


if __name__ == "__main__":
    raise SystemExit(main())
