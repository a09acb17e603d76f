"""DynaKrag benchmark: train the controller on a slice of each benchmark sample, then compare the learned
controller with the uniform-valid one (paired bootstrap on per-question F1), run the paper's ablations (no
sufficiency check, no terminal compression), sweep the retrieval cap, and run `fixed-k` / `ircot` on the same
questions when those eval methods exist. Writes one JSON file.

    python -m bench.dynakrag [--datasets hotpotqa,2wiki] [--train 30] [--eval 30] [--eval-from N] [--caps 1,2,3,4]
                             [--sweep-eval N] [--ablation-eval N] [--threads 2] [--compress-tokens 96]
                             [--config FILE] [--set SECTION.KEY=VALUE ...] [--phases train,learned_vs_uniform,...]
                             [--out bench/results/dynakrag.json]

Split: the first --train questions of each file train the controller; --eval questions from --eval-from (default:
right after the training ones) are evaluated (disjoint). Corpus: the project default, `pooled` (all passages of the file, de-duplicated), so retrieval is over
~3,000 (HotpotQA) / ~1,800 (2Wiki) passages rather than a question's own 10. Per-question results go to
<out stem>/<dataset>/<run>.jsonl and are resumed when present (--fresh to start over); trained controllers are
kept in <out stem>/<dataset>/controller (--retrain to refit). The load average is recorded: the machine is shared.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from evorag_core.cli.common import config_from_args
from evorag_core.config import home_dir
from evorag_core.data.datasets import load_dataset
from evorag_core.errors import EvoRagError
from evorag_core.evaluation.runner import evaluate
from evorag_core.metrics import paired_bootstrap
from evorag_core.methods.dynakrag import LearnedController, UniformController, load_models
from evorag_core.methods.dynakrag.lm import EvidenceLM
from evorag_core.methods.dynakrag.method import DynaKragMethod, make_context_factory, method_label
from evorag_core.methods.dynakrag.training import train_dynakrag
from evorag_core.runtime import Runtime
from evorag_core.types import Dataset

from bench.record import settings

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpotqa": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl"}
BASELINES = ("fixed-k", "ircot")
PHASES = ("train", "learned_vs_uniform", "ablations", "cap_sweep", "baselines")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="hotpotqa,2wiki")
    p.add_argument("--train", type=int, default=30, help="training questions per data set (file order)")
    p.add_argument("--eval", type=int, default=30, help="evaluation questions per data set")
    p.add_argument("--eval-from", type=int, default=None,
                   help="file position of the first evaluation question (default: right after the training ones)")
    p.add_argument("--caps", default="1,2,3,4", help="retrieval caps of the sweep (learned controller)")
    p.add_argument("--sweep-eval", type=int, default=0, help="sweep on the first N evaluation questions (0: all)")
    p.add_argument("--ablation-eval", type=int, default=0,
                   help="no-sufficiency / no-compression ablations on the first N evaluation questions (0: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--compress-tokens", type=int, default=96)
    p.add_argument("--answer-tokens", type=int, default=24)
    p.add_argument("--gap-tokens", type=int, default=16)
    p.add_argument("--train-rollouts", type=int, default=None, help="default: [dynakrag] train_rollouts")
    p.add_argument("--resamples", type=int, default=10_000)
    p.add_argument("--home", type=Path, default=None)
    p.add_argument("--config", type=Path, default=None, help="TOML config (default configs/default.toml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value, as on the evorag CLI (e.g. policy.model=ID policy.device=cuda "
                        "for a larger generator); the flags above win for the keys they set")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "dynakrag.json")
    p.add_argument("--retrain", action="store_true")
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--no-baselines", action="store_true")
    p.add_argument("--phases", default=",".join(PHASES),
                   help="phases to run, in this order: " + ", ".join(PHASES) + " (train always runs or loads)")
    return p.parse_args(argv)


def bench_config(args: argparse.Namespace):
    """configs/default.toml (or --config) with --set, then the bench's own flags."""
    return config_from_args(args, {"policy.threads": args.threads, "dynakrag.compress_tokens": args.compress_tokens,
                                   "dynakrag.answer_tokens": args.answer_tokens, "dynakrag.gap_tokens": args.gap_tokens,
                                   "dynakrag.train_rollouts": args.train_rollouts})


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def run(method, questions, path: Path, fresh: bool):
    t0 = time.perf_counter()
    summary, results = evaluate(method, questions, out_path=path, resume=not fresh)
    log(f"  {method.label}: n={summary['n']} EM {summary['em']:.3f} F1 {summary['f1']:.3f} "
        f"({time.perf_counter() - t0:.0f} s)")
    return summary, results


def bootstrap(a, b, resamples: int, key: str = "f1") -> dict:
    """Paired bootstrap of a - b on the per-question `key` (f1, support_recall, ...) over shared question ids."""
    by_id = {r.question_id: r for r in b}
    pairs = [(getattr(r, key), getattr(by_id[r.question_id], key)) for r in a if r.question_id in by_id]
    res = paired_bootstrap([x for x, _ in pairs], [y for _, y in pairs], resamples, seed=0)
    return asdict(res)


def baselines(rt, questions, folder: Path, fresh: bool) -> dict:
    from evorag_core.methods.registry import METHODS, MethodOptions

    out = {}
    for name in BASELINES:
        if name not in METHODS:
            out[name] = {"status": "not in the method registry"}
            continue
        try:
            method = METHODS[name](MethodOptions(), rt)
        except (EvoRagError, TypeError, AttributeError, ValueError) as exc:  # reported in the JSON, not hidden
            out[name] = {"status": f"could not build: {type(exc).__name__}: {exc}"}
            continue
        summary, results = run(method, questions, folder / f"{name}.jsonl", fresh)
        out[name] = {"summary": summary, "results": results}
    return out


class Bench:
    """One data set: its runtime, split, trained controller, and the runs done so far (kept as JSON lines)."""

    def __init__(self, name: str, args, backend, home: Path, stem: Path):
        self.name, self.args = name, args
        self.path = BENCHMARKS / FILES[name]
        ds = load_dataset(self.path)
        self.train_qs = ds.questions[: args.train]
        start = args.train if args.eval_from is None else args.eval_from
        if start < args.train:
            raise SystemExit(f"--eval-from {start} overlaps the {args.train} training questions")
        self.eval_qs = ds.questions[start: start + args.eval]
        self.sweep_qs = self.eval_qs[: args.sweep_eval] if args.sweep_eval else self.eval_qs
        self.cfg = bench_config(args)
        self.dk = self.cfg.dynakrag
        self.rt = Runtime(self.cfg, home, ds)
        self.dataset, self.backend = ds, backend
        self.folder = stem / name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.lm = EvidenceLM(backend, self.dk, self.cfg.answer)
        self.report: dict = {"file": str(self.path), "train_questions": len(self.train_qs),
                             "eval_questions": len(self.eval_qs), "sweep_questions": len(self.sweep_qs),
                             "eval_ids": [q.id for q in self.eval_qs]}
        self.results: dict[str, list] = {}
        self.models = None

    def train(self) -> None:
        model_dir = self.folder / "controller"
        t0 = time.perf_counter()
        if self.args.retrain or not (model_dir / "controller.json").is_file():
            log(f"{self.name}: training on {len(self.train_qs)} questions")
            metrics = train_dynakrag(Dataset(self.dataset.name, self.dataset.path, self.train_qs), self.rt, self.dk,
                                     model_dir, backend=self.backend,
                                     on_progress=lambda i, n: log(f"  explored {i}/{n}") if i % 5 == 0 else None)
            self.report["train_seconds"] = time.perf_counter() - t0
        else:
            metrics = json.loads((model_dir / "controller.json").read_text())["metrics"]
        self.report["training"] = metrics
        self.models = load_models(model_dir)

    def method(self, cfg_d, controller) -> DynaKragMethod:
        return DynaKragMethod(cfg_d, controller, make_context_factory(self.rt, cfg_d, self.lm),
                              lambda q: self.rt.corpus_for(q).gold_for(q), method_label(cfg_d))

    def main_runs(self) -> None:
        learned = self.method(self.dk, LearnedController(self.models, self.dk))
        uniform_cfg = replace(self.dk, controller="uniform")
        uniform = self.method(uniform_cfg, UniformController(self.dk.seed))
        runs = self.report.setdefault("runs", {})
        for key, m in (("learned", learned), ("uniform", uniform)):
            runs[key], self.results[key] = run(m, self.eval_qs, self.folder / f"{key}.jsonl", self.args.fresh)
        comparisons = self.report.setdefault("comparisons", {})
        for key in ("f1", "support_recall"):  # the answer, and what the controller is trained for (Eq. 1)
            comparisons[f"learned_vs_uniform_{key}"] = bootstrap(
                self.results["learned"], self.results["uniform"], self.args.resamples, key)

    def baselines(self) -> None:
        base = baselines(self.rt, self.eval_qs, self.folder, self.args.fresh)
        self.report["baselines"] = {k: v.get("summary", v) for k, v in base.items()}
        for bname, info in base.items():
            if "results" in info:
                self.report["comparisons"][f"learned_vs_{bname}_f1"] = bootstrap(
                    self.results["learned"], info["results"], self.args.resamples)

    def ablations(self) -> None:
        """The paper's ablations of the learned controller: no sufficiency check, no terminal compression; each
        paired with the full learned controller on the same questions."""
        out = self.report.setdefault("ablations", {})
        qs = self.eval_qs[: self.args.ablation_eval] if self.args.ablation_eval else self.eval_qs
        for key, change in (("no_sufficiency", {"sufficiency": False}), ("no_compression", {"compression": False})):
            cfg_a = replace(self.dk, **change)
            summary, results = run(self.method(cfg_a, LearnedController(self.models, cfg_a)), qs,
                                   self.folder / f"learned_{key}.jsonl", self.args.fresh)
            out[key] = {"summary": summary,
                        "full_vs_ablation_f1": bootstrap(self.results["learned"], results, self.args.resamples)}

    def sweep(self) -> None:
        sweep = self.report.setdefault("cap_sweep", {})
        for cap in [int(c) for c in self.args.caps.split(",") if c]:
            cfg_c = replace(self.dk, retrieval_cap=cap)
            name = "learned" if cap == self.dk.retrieval_cap else f"learned_cap{cap}"
            sweep[cap], _ = run(self.method(cfg_c, LearnedController(self.models, cfg_c)), self.sweep_qs,
                                self.folder / f"{name}.jsonl", False if name == "learned" else self.args.fresh)


def write(report: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


def main(argv=None) -> int:
    args = parse_args(argv)
    wanted = {"train", *(x for x in args.phases.split(",") if x)}
    if unknown := wanted - set(PHASES):
        raise SystemExit(f"unknown phase(s) {', '.join(sorted(unknown))}; choose from {', '.join(PHASES)}")
    if args.no_baselines:
        wanted.discard("baselines")
    if wanted & {"ablations", "baselines"} and "learned_vs_uniform" not in wanted:
        raise SystemExit("the ablations and baselines are paired with the learned run: add learned_vs_uniform")
    steps = {"train": Bench.train, "learned_vs_uniform": Bench.main_runs, "ablations": Bench.ablations,
             "cap_sweep": Bench.sweep, "baselines": Bench.baselines}
    phases = [(name, steps[name]) for name in PHASES if name in wanted]
    import torch

    torch.set_num_threads(args.threads)
    from evorag_core.lm.backends import policy_backend

    home = (args.home or home_dir()).resolve()
    cfg = bench_config(args)
    backend = policy_backend(cfg.policy, home)
    stem = args.out.with_suffix("")
    start = time.perf_counter()
    benches = [Bench(name, args, backend, home, stem) for name in args.datasets.split(",") if name]
    report = {"settings": {**settings(args),
                           "corpus": cfg.env.corpus, "model": backend.model_id,
                           "dynakrag": asdict(benches[0].dk) if benches else None,
                           "pairing": "per question (same question ids); F1 of learned minus the other method",
                           "load_average_start": os.getloadavg()},
              "datasets": {b.name: b.report for b in benches}, "phases_done": []}
    for phase, fn in phases:
        for b in benches:
            fn(b)
        if phase == "learned_vs_uniform" and len(benches) > 1:
            report["pooled_learned_vs_uniform_f1"] = bootstrap(
                [r for b in benches for r in b.results["learned"]], [r for b in benches for r in b.results["uniform"]],
                args.resamples)
        report["phases_done"].append(phase)
        report["seconds"] = time.perf_counter() - start
        report["load_average_now"] = os.getloadavg()
        write(report, args.out)
        log(f"{phase} done; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
