"""R²AG retrieval benchmark: the retrieval tree (scripted steering and LM steering on the embedded SmolLM2-135M)
against single-step retrieval SR@5 / SR@10 with the same hybrid retriever, on the same questions. Writes one JSON.

    python -m bench.r2ag [--datasets hotpotqa,2wiki,musique] [--limit 20] [--steerings scripted,lm]
                         [--max-iterations 5] [--max-frontier 4] [--max-new-tokens 160] [--threads 2]
                         [--adapter NAME|FOLDER] [--out bench/results/r2ag.json]

Corpus: each sample's pooled passages (the project default: all passages of the file, de-duplicated), so a query
searches ~3,000 (HotpotQA) / ~1,800 (2Wiki) / ~2,900 (MuSiQue) passages. The first --limit questions with gold of
each file are used. Metrics per (data set, method): recall, full recall, documents retrieved per question, mAP,
latency (s) and iterations; for the tree also recall@5 / @10 of its first 5 / 10 documents (the tree at SR's
budget). The "all" rows are question-weighted means over the data sets. The JSON is rewritten after every (data set,
steering) so an interrupted run keeps what finished. The load average is recorded: the machine is shared.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from evorag_core.config import home_dir, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.methods.r2ag.method import TreeBuilder, make_steering
from evorag_core.methods.r2ag.metrics import SR_KS, list_metrics, retrieval_report
from evorag_core.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpotqa": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="hotpotqa,2wiki,musique")
    p.add_argument("--limit", type=int, default=20, help="questions per data set (file order)")
    p.add_argument("--steerings", default="scripted,lm")
    p.add_argument("--max-iterations", type=int, default=None, help="default: [r2ag] max_iterations")
    p.add_argument("--max-frontier", type=int, default=None, help="default: [r2ag] max_frontier")
    p.add_argument("--max-new-tokens", type=int, default=None, help="LM steering reply budget ([r2ag] default)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--adapter", default=None, help="LoRA adapter for the LM steering (store name or folder)")
    p.add_argument("--home", type=Path, default=None)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "r2ag.json")
    return p.parse_args(argv)


def log(msg: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def r2ag_config(args: argparse.Namespace):
    cfg = load_config()
    r2ag = cfg.r2ag
    for name in ("max_iterations", "max_frontier", "max_new_tokens"):
        value = getattr(args, name)
        if value is not None:
            r2ag = replace(r2ag, **{name: value})
    return replace(cfg, r2ag=r2ag, policy=replace(cfg.policy, threads=args.threads))


def lm_backend(cfg, home: Path, adapter: str | None):
    from evorag_core.lm.backends import load_backend

    rt = Runtime(cfg, home, load_dataset(BENCHMARKS / FILES["hotpotqa"]))
    backend, name = load_backend(rt, adapter)
    if name:
        backend.activate(name)
    return backend


def main(argv=None) -> int:
    import torch

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = r2ag_config(args)
    home = (args.home or home_dir()).resolve()
    home.mkdir(parents=True, exist_ok=True)
    steerings = [s.strip() for s in args.steerings.split(",") if s.strip()]
    backend = lm_backend(cfg, home, args.adapter) if "lm" in steerings else None
    out = {"settings": {"limit": args.limit, "datasets": args.datasets, "steerings": steerings,
                        "r2ag": cfg.r2ag.__dict__, "retriever": cfg.r2ag.retriever, "threads": args.threads,
                        "corpus": "pooled (per data file)", "adapter": args.adapter,
                        "lm": backend.model_id if backend is not None else None},
           "load_average_start": os.getloadavg(), "datasets": {}}
    shared_retrieval = None
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        dataset = load_dataset(BENCHMARKS / FILES[name])
        rt = Runtime(cfg, home, dataset)
        if shared_retrieval is not None:
            rt.__dict__["retrieval"] = shared_retrieval  # one embedder for every data set
        shared_retrieval = rt.retrieval
        questions = [q for q in dataset.questions if rt.corpus_for(q).gold_for(q)][: args.limit]
        retriever_for = lambda corpus: rt.retrieval.retriever_for(corpus, cfg.r2ag.retriever)  # noqa: E731
        retriever_for(rt.pooled_corpus)  # build / load the index before timing anything
        out["datasets"][name] = {"questions": len(questions), "passages": len(rt.pooled_corpus)}
        for steering_name in steerings:
            steering = make_steering(replace(cfg.r2ag, steering=steering_name), backend)
            builder = TreeBuilder(steering, cfg.r2ag, rt.corpus_for, retriever_for)

            def keep(q, tree, rt=rt, steering_name=steering_name):
                m = list_metrics(tree.retrieved(), rt.corpus_for(q).gold_for(q))
                log(f"  {name} {steering_name} {q.id}: recall {m.recall:.2f} docs {m.docs} it {tree.iterations}")

            t0 = time.perf_counter()
            report = retrieval_report(questions, rt.corpus_for, builder.grow, retriever_for,
                                      label=f"r2ag[{steering_name}]", on_tree=keep)
            out["datasets"][name].update(report)
            out["datasets"][name][f"r2ag[{steering_name}]"]["wall_s"] = time.perf_counter() - t0
            log(f"{name} {steering_name}: " + json.dumps({k: round(v, 3) for k, v in report[f'r2ag[{steering_name}]'].items()}))
            for k in SR_KS:
                log(f"{name} sr@{k}: " + json.dumps({m: round(v, 3) for m, v in report[f'sr@{k}'].items()}))
            _pool(out)
            out["load_average_end"] = os.getloadavg()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=2) + "\n")
    _pool(out)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    log(f"wrote {args.out}")
    return 0


def _pool(out: dict) -> None:
    """The "all" rows: question-weighted means of the per-data-set rows, per method."""
    out["all"] = {}
    methods = {m for d in out["datasets"].values() for m, row in d.items() if isinstance(row, dict)}
    for method in sorted(methods):
        rows = [(d[method]["questions"], d[method]) for d in out["datasets"].values() if method in d]
        n = sum(w for w, _ in rows)
        if n:
            keys = [key for key in rows[0][1] if key not in ("questions", "wall_s")]
            out["all"][method] = {"questions": n, **{key: sum(w * r[key] for w, r in rows) / n for key in keys}}


if __name__ == "__main__":
    raise SystemExit(main())
