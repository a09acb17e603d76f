"""`evorag eval`: run a method over a data file; per-question JSON lines and a summary."""
from __future__ import annotations

import argparse
from pathlib import Path

from evorag_core.evaluation.runner import REFUSAL_KEYS, SUMMARY_KEYS, Progress, evaluate, extra_metric_keys
from evorag_core.methods.registry import METHODS, MethodOptions, build_method
from evorag_core.cli.common import (add_answerer, add_common, config_from_args, home_from_args, print_json,
                                    runtime_from_args)
from evorag_core.errors import ConfigError

__all__ = ["add_parser", "main"]

def add_parser(sub: argparse._SubParsersAction, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="evaluate a method on a data file")
    add_common(p)
    p.add_argument("--method", required=True, choices=sorted(METHODS))
    p.add_argument("--limit", type=int, default=None, help="first N questions")
    p.add_argument("--corpus", choices=["pooled", "per-question"], default=None)
    p.add_argument("--k", type=int, default=None, help="passages per SEARCH")
    p.add_argument("--stage", choices=["discovery", "refinement"], default=None)
    p.add_argument("--script", type=Path, default=None, help="for --method script")
    p.add_argument("--adapter", default=None,
                   help="LoRA adapter (store name or folder) for LM methods, in its role: a registered reader adapter "
                        "reads the answers only (answer.adapter), the policy then runs the base model")
    add_answerer(p)
    p.add_argument("--rank-with-rm", dest="rank_with_rm", type=Path, default=None, metavar="FOLDER",
                   help="--method agent: best-of-K by this saved preference model (K = policy.siblings)")
    p.add_argument("--out", type=Path, default=None, help="per-question results (JSON lines)")
    p.add_argument("--resume", action="store_true", help="skip questions already in --out")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="run the questions on N processes, each loading the method once (one torch thread each "
                        "unless policy.threads); results are written in question order, as with one")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar on stderr (questions done / total, running EM/F1, ETA)")
    p.add_argument("--db", default=None, metavar="URL",
                   help="store each question's episode here for the studio's Traces tab "
                        "(default $EVORAG_DB_URL or <home>/evorag.db)")
    p.add_argument("--no-store", dest="store", action="store_false",
                   help="do not store the episodes (only --out and the summary)")
    return p


def _recorder(args: argparse.Namespace, cfg, rt, method):
    """The EvalRecorder that stores this run's episodes, or None with --no-store."""
    if not args.store:
        return None
    from evorag_core.evaluation.traces import EvalRecorder, run_name
    from evorag_core.store import open_store
    from evorag_core.cli.worker import db_url_from_args

    store = open_store(db_url_from_args(args, rt.home))
    return EvalRecorder(store, method=args.method, label=method.label, run=run_name(args.method, rt.dataset.name),
                        data_path=str(rt.dataset.path), stage=cfg.reward.stage, schedule=cfg.reward.schedule,
                        adapter=str(args.adapter) if args.adapter else None)


def _pool(args: argparse.Namespace, cfg, rt, adapter: str | None):
    from evorag_core.evaluation.pool import EvalPool, EvalSpec
    from evorag_core.methods.base import MethodOptions

    options = MethodOptions(adapter=adapter, script=args.script, rank_with_rm=args.rank_with_rm)
    spec = EvalSpec(cfg, str(rt.home), str(args.data), threads=cfg.policy.threads or 1, method=args.method,
                    options=options, corpus_from=tuple(str(f) for f in args.corpus_from))
    return EvalPool(spec, args.workers)


def main(args: argparse.Namespace) -> int:
    from evorag_core.adapters.role import applied_spec

    cfg = config_from_args(args, {"env.corpus": args.corpus, "env.top_k": args.k, "reward.stage": args.stage})
    cfg, adapter = applied_spec(cfg, args.adapter, home_from_args(args))  # the policy's adapter, or the reader's
    rt = runtime_from_args(args, cfg)
    method = build_method(args.method, rt, MethodOptions(adapter=adapter, script=args.script,
                                                          rank_with_rm=args.rank_with_rm))
    questions = rt.dataset.questions[: args.limit] if args.limit else rt.dataset.questions
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    pool = _pool(args, cfg, rt, adapter) if args.workers > 1 else None
    recorder = _recorder(args, cfg, rt, method)
    try:
        with Progress(len(questions), desc=f"eval {args.method}", disable=not args.progress) as show:

            def on_result(res, done) -> None:
                show(res, done)
                if recorder is not None:
                    recorder(res, done)

            summary, results = evaluate(method, questions, out_path=args.out, resume=args.resume, on_result=on_result,
                                        run=pool.runner() if pool is not None else None)
    finally:
        if pool is not None:
            pool.close()
        if recorder is not None:
            recorder.store.close()
    if recorder is not None:
        summary["run"] = recorder.run
        summary["stored_episodes"] = len(recorder.episode_ids)
        summary["db"] = recorder.store.url
        if recorder.failed:
            summary["store_errors"] = recorder.failed
    backend = getattr(method, "backend", None)
    if pool is None and backend is not None and hasattr(backend, "tokens_generated"):
        summary["tokens_per_second"] = backend.tokens_generated / summary["seconds"] if summary["seconds"] else 0.0
    summary["data"] = str(args.data)
    summary["corpus"] = cfg.env.corpus
    if args.json:
        print_json(summary)
    else:
        print(f"method: {summary['label']}")
        for key in (*SUMMARY_KEYS, *[k for k in REFUSAL_KEYS if k in summary], *extra_metric_keys(results)):
            val = summary[key]
            shown = f"{val:.4f}" if isinstance(val, float) else ("n/a" if val is None else val)
            print(f"  {key:<17} {shown}")
        if args.out:
            print(f"  results written to {args.out}")
        if recorder is not None:
            print(f"  {len(recorder.episode_ids)} episodes stored as run {recorder.run!r} in {recorder.store.url} "
                  "(studio: Traces tab)")
            if recorder.failed:
                print(f"  {recorder.failed} episodes NOT stored: {recorder.last_error}")
    return 0
