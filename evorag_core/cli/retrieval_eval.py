"""`evorag retrieval-eval`: support recall@k, full recall@k, MRR, queries/s and index build time per retriever."""
from __future__ import annotations

import argparse
from dataclasses import replace

from evorag_core.cli.common import add_common, config_from_args, home_from_args, print_json

__all__ = ["add_parser", "main"]


def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="evaluate bm25, dense and rrf retrieval with the question as the query")
    add_common(p)
    p.add_argument("--corpus", choices=["pooled", "per-question"], default="pooled")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--limit", type=int, default=None, help="first N questions")
    p.add_argument("--method", choices=["single", "r2ag"], default="single",
                   help="single: bm25/dense/rrf with the question as the query; r2ag: the R2AG tree ([r2ag] settings) "
                        "beside single-step rrf SR@5/@10 on the same questions")
    p.add_argument("--adapter", default=None, help="LoRA adapter for the r2ag LM steering")
    return p


def main(args: argparse.Namespace) -> int:
    from evorag_core.data.datasets import load_dataset
    from evorag_core.retrieval.evaluate import evaluate_retrieval
    from evorag_core.types import Dataset

    cfg = config_from_args(args)
    if args.method == "r2ag":
        return _r2ag(args, cfg)
    dataset = load_dataset(args.data)
    if args.limit:
        dataset = Dataset(dataset.name, dataset.path, dataset.questions[: args.limit])
    report = evaluate_retrieval(dataset, args.corpus, args.k, cfg.retrieval, home_from_args(args))
    if args.json:
        print_json(report)
        return 0
    print(f"data: {args.data}  corpus: {args.corpus}  k = {args.k}")
    keys = sorted({k for row in report.values() if isinstance(row, dict) for k in row})
    print(f"{'retriever':<10}" + "".join(f"{k:>18}" for k in keys))
    for name, row in report.items():
        if isinstance(row, dict):
            print(f"{name:<10}" + "".join(f"{_fmt(row.get(k)):>18}" for k in keys))
    return 0


def _r2ag(args: argparse.Namespace, cfg) -> int:
    from evorag_core.methods.r2ag.method import build_tree_builder
    from evorag_core.methods.r2ag.metrics import retrieval_report
    from evorag_core.cli.common import runtime_from_args

    rt = runtime_from_args(args, replace(cfg, env=replace(cfg.env, corpus=args.corpus)))
    builder = build_tree_builder(rt, args.adapter)
    questions = rt.dataset.questions[: args.limit] if args.limit else rt.dataset.questions
    report = retrieval_report(questions, rt.corpus_for, builder.grow,
                              lambda corpus: rt.retrieval.retriever_for(corpus, cfg.r2ag.retriever),
                              label=f"r2ag[{builder.steering.name}]")
    if args.json:
        print_json(report)
        return 0
    print(f"data: {args.data}  corpus: {args.corpus}  retriever: {cfg.r2ag.retriever}")
    keys = sorted({k for row in report.values() for k in row})
    print(f"{'method':<16}" + "".join(f"{k:>12}" for k in keys))
    for name, row in report.items():
        print(f"{name:<16}" + "".join(f"{_fmt(row.get(k)):>12}" for k in keys))
    return 0


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "-" if v is None else str(v)
