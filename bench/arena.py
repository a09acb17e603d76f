"""ARENA figures (the paper's Table 3 metrics) for the policy LM; writes JSON (default bench/results/arena.json).

    python -m bench.arena [--limit 20 | --questions 60:100] [--answer-span] [--note TEXT] [--threads 1] [--passage-chars 300] [--demo] [--max-new-tokens 192]
                          [--train-steps 0 | --adapter-dir DIR] [--train-questions 8] [--train-offset 100] [--group 4] [--kl k2]
                          [--results-dir DIR] [--out PATH]

Per-question (distractor) setting on the HotpotQA, 2Wiki and MuSiQue samples in ../shared/benchmarks: the first
--limit questions of each file, references = the question's own passages. Reports EM, F1, format score, relevance
score (and accuracy/bonus/reward, the other reward parts) of the base model. With --train-steps N > 0 it then runs
one small arena-grpo round (training.objectives.arena_grpo.round.train_arena_grpo: LoRA, G = --group replies per question, KL
estimator --kl) on --train-questions questions per file taken from index --train-offset on (disjoint from the
evaluated ones when offset >= limit), evaluates the trained adapter on the same questions, and adds the paired
bootstrap (10,000 resamples) of base vs adapter per data set. The per-step KL under both estimators and the reward
parts are recorded (--adapter-dir evaluates an adapter trained earlier instead). Per-question results go to
--results-dir as JSON lines; a re-run with the same --results-dir keeps the questions already evaluated. The load average is recorded because
the machine may be shared.

--questions START:END evaluates that slice of each file instead of the first --limit. --answer-span runs the base
model with `arena.answer_span = true` (the final answer is the shared span reader's, `[answer]` settings of
configs/default.toml, over the references the reply selected) and reports, per data set, "off" (the generated
<answer>, exactly what answer_span = false answers: the same greedy reply, kept in each result) against "on", with
the paired bootstrap on/off of EM and F1 (`evaluation.compare_results`); one generation per question serves both.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from evorag_core.config import PolicyConfig, TrainConfig, home_dir, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.evaluation.runner import compare_results, evaluate, summarize
from evorag_core.reader.arena.generator import ArenaGenerator
from evorag_core.methods.arena.method import ArenaMethod, span_reader
from evorag_core.methods.base import QuestionResult
from evorag_core.reader.arena.prompt import ArenaConfig
from evorag_core.lm.hf_backend import TransformersBackend

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpotqa": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl"}
REPORT = ("n", "em", "f1", "format_score", "relevance_score", "accuracy_score", "bonus_score", "reward", "fallback_rate",
          "seconds")


def _evaluate_all(backend, cfg: ArenaConfig, datasets, picked: slice, label: str, results_dir: Path,
                  reader=None) -> dict:
    out = {}
    for name, dataset in datasets.items():
        method = ArenaMethod(ArenaGenerator(backend, cfg), label, reader)
        path = results_dir / f"{label}-{name}.jsonl"
        start = time.perf_counter()
        summary, results = evaluate(method, dataset.questions[picked], out_path=path, resume=True)
        out[name] = {"summary": {k: summary[k] for k in REPORT}, "results_file": str(path), "_results": results}
        print(f"[{label}] {name}: " + ", ".join(f"{k} {summary[k]:.3f}" for k in REPORT[1:5])
              + f" ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    return out


def _generated(result: QuestionResult) -> QuestionResult:
    """An answer_span result as answer_span = false answers it: the generated <answer> kept in its extras."""
    arena = result.extras["arena"]
    return dataclasses.replace(result, prediction=arena["generated_answer"], em=arena["generated_em"],
                               f1=arena["generated_f1"], refused=False)


def _answer_span_report(evaluated: dict) -> dict:
    out = {}
    for name, v in evaluated.items():
        on = v["_results"]
        off = [_generated(r) for r in on]
        sources: dict[str, int] = {}
        for r in on:
            src = r.extras["arena"]["span_evidence_from"]
            sources[src] = sources.get(src, 0) + 1
        out[name] = {
            "off": {k: summarize(off)[k] for k in ("n", "em", "f1", "refusal_rate")},
            "on": {k: summarize(on)[k] for k in ("n", "em", "f1", "refusal_rate")},
            "bootstrap_on_vs_off": {k: compare_results(on, off)[k] for k in ("n", "em", "f1")},
            "span_evidence_from": sources,
            "answers_changed": sum(r.prediction != g.prediction for r, g in zip(on, off)),
        }
    return out


def _train(args, datasets, home: Path, out_dir: Path) -> tuple[Path, dict]:
    from evorag_core.lm.loading import load_model
    from training.objectives.arena_grpo.config import ArenaGrpoConfig
    from training.objectives.arena_grpo.round import train_arena_grpo
    from training.lora import attach_lora, save_adapter
    from evorag_core.lm.loading import base_model_id

    questions = [q for ds in datasets.values()
                 for q in [q for q in ds.questions[args.train_offset:] if q.passages][: args.train_questions]]
    train = dataclasses.replace(TrainConfig(), lr=args.lr, kl=args.kl, kl_coef=args.kl_coef, seed=args.seed,
                                epochs=1, lora_dropout=0.0)
    cfg = ArenaGrpoConfig(group_size=args.group, questions=len(questions), questions_per_step=args.questions_per_step,
                          max_new_tokens=args.max_new_tokens, passage_chars=args.passage_chars, demo=args.demo)
    model, tokenizer, _ = load_model("embedded", home, device="cpu")
    policy = attach_lora(model, train)
    base_id = base_model_id("embedded", home)

    def show(entry):
        print(f"[train] step {int(entry['step'])}/{int(entry['total'])} loss {entry['loss']:.4f} reward "
              f"{entry['reward']:.2f} format {entry['format']:.2f} kl_k2 {entry['kl_k2']:.5f} kl_k3 {entry['kl_k3']:.5f} "
              f"({entry['elapsed_s']:.0f} s)", file=sys.stderr, flush=True)

    log, samples = train_arena_grpo(policy, tokenizer, questions, train, cfg, show, max_steps=args.train_steps,
                                    model_id=base_id)
    meta = {"round_id": None, "objective": "arena-grpo", "base_model_id": base_id,
            "metrics": {"history": log.history}, "samples": samples}
    save_adapter(policy, out_dir, meta, overwrite=True)
    info = {"questions": [q.id for q in questions], "train": dataclasses.asdict(train), "arena": dataclasses.asdict(cfg),
            "history": log.history, "samples": samples, "adapter_dir": str(out_dir)}
    return out_dir, info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--home", type=Path, default=None, help="home folder (the converted model is cached there)")
    p.add_argument("--limit", type=int, default=20, help="evaluated questions per data file")
    p.add_argument("--questions", default=None, metavar="START:END",
                   help="evaluate this slice of each data file instead of the first --limit")
    p.add_argument("--answer-span", action="store_true",
                   help="base model with arena.answer_span = true; report off (generated) vs on (span reader)")
    p.add_argument("--note", default="", help="free text kept in the JSON (e.g. what else ran on the machine)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--passage-chars", type=int, default=300, help="cut each reference (0: full text)")
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--demo", action="store_true", help="one demonstration exchange in the prompt (not the paper's)")
    p.add_argument("--train-steps", type=int, default=0, help="optimiser steps of the arena-grpo round (0: no round)")
    p.add_argument("--adapter-dir", type=Path, default=None,
                   help="evaluate this trained adapter (e.g. an earlier run's <results-dir>/adapter) instead of training")
    p.add_argument("--train-questions", type=int, default=8, help="training questions per data file")
    p.add_argument("--train-offset", type=int, default=100, help="training questions start at this index")
    p.add_argument("--questions-per-step", type=int, default=2)
    p.add_argument("--group", type=int, default=4, help="G sampled replies per question")
    p.add_argument("--kl", choices=["k2", "k3"], default="k2")
    p.add_argument("--kl-coef", type=float, default=0.04)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--datasets", default=",".join(FILES), help="comma-separated subset of " + ",".join(FILES))
    p.add_argument("--results-dir", type=Path, default=None, help="per-question JSON lines (default: a temp folder)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "arena.json")
    args = p.parse_args(argv)

    if args.answer_span and (args.train_steps > 0 or args.adapter_dir is not None):
        p.error("--answer-span measures the base model only (no --train-steps / --adapter-dir)")
    if args.questions:
        start_s, _, end_s = args.questions.partition(":")
        picked = slice(int(start_s or 0), int(end_s) if end_s else None)
    else:
        picked = slice(0, args.limit)
    torch.set_num_threads(args.threads)
    home = args.home or home_dir()
    results_dir = args.results_dir or Path(tempfile.mkdtemp(prefix="arena-bench-"))
    results_dir.mkdir(parents=True, exist_ok=True)
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    datasets = {n: load_dataset(BENCHMARKS / FILES[n]) for n in names}
    started = time.perf_counter()
    load_before = os.getloadavg()
    cfg = ArenaConfig(max_new_tokens=args.max_new_tokens, passage_chars=args.passage_chars, demo=args.demo)
    backend = TransformersBackend(PolicyConfig(device="cpu", threads=args.threads), home)
    report: dict = {
        "setting": "per-question (distractor): references = the question's own passages, data-set order",
        "model": backend.model_id, "limit": args.limit, "questions": args.questions, "arena": dataclasses.asdict(cfg),
        "threads": args.threads, "note": args.note,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "loadavg_start": load_before},
    }
    reader = None
    if args.answer_span:
        answer_cfg = load_config().answer
        reader = span_reader(backend, answer_cfg, cfg)
        report["answer"] = dataclasses.asdict(answer_cfg)
    base = _evaluate_all(backend, cfg, datasets, picked, "base-span" if reader else "base", results_dir, reader)
    report["base"] = {n: v["summary"] for n, v in base.items()}
    if reader is not None:
        report["answer_span"] = _answer_span_report(base)
    if args.train_steps > 0 or args.adapter_dir is not None:
        if args.adapter_dir is not None:
            adapter_dir = args.adapter_dir
            meta = json.loads((adapter_dir / "evorag_adapter.json").read_text(encoding="utf-8"))
            info = {"adapter_dir": str(adapter_dir), "history": meta.get("metrics", {}).get("history", []),
                    "note": "trained by an earlier run; evaluated here"}
        else:
            adapter_dir, info = _train(args, datasets, home, results_dir / "adapter")
        report["training"] = info
        backend.load_adapter("arena", adapter_dir)
        backend.activate("arena")
        trained = _evaluate_all(backend, cfg, datasets, picked, "adapter", results_dir)
        report["adapter"] = {n: v["summary"] for n, v in trained.items()}
        report["bootstrap"] = {n: compare_results(trained[n]["_results"], base[n]["_results"]) for n in names}
    report["results_dir"] = str(results_dir)
    report["seconds"] = time.perf_counter() - started
    report["machine"]["loadavg_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("base", "adapter", "answer_span") if k in report}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
