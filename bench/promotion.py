"""What the promotion gate costs and what it says: one candidate adapter evaluated against the base model on a
held-out slice, as the worker's evaluation job runs it (`evorag_core.promotion.gate`). Writes JSON.

    python -m bench.promotion --data ../shared/benchmarks/hotpotqa_dev300.jsonl --questions 100:200 \\
        --method fixed-k --workers 2 --adapter ADAPTER_FOLDER [--home DIR] [--out bench/results/promotion_speed.json]

The adapter folder is registered in a scratch store under the bench's home (its base model: [policy] model); each
side's results are cached under <home>/promotion/, so a rerun would measure nothing: the bench clears that cache
unless --keep-cache. Reported: seconds of each side (the base side is what a live adapter costs once; a
candidate costs its own side only afterwards), questions per minute, the verdict and the paired differences.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--questions", default="100:200")
    ap.add_argument("--method", choices=["agent", "fixed-k"], default="fixed-k")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--adapter", type=Path, required=True, help="a LoRA adapter folder (with evorag_adapter.json)")
    ap.add_argument("--against", default="base")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--home", type=Path, default=ROOT / ".evorag")
    ap.add_argument("--keep-cache", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "promotion_speed.json")
    args = ap.parse_args(argv)

    from evorag_core.adapters.files import read_adapter_meta
    from evorag_core.adapters.registry import register_verified
    from evorag_core.config import load_config
    from evorag_core.lm.loading import base_model_id
    from evorag_core.promotion.gate import evaluate_candidate
    from evorag_core.store import open_store

    overrides = dict(o.split("=", 1) for o in args.overrides)
    overrides.update({"promotion.data": str(args.data.resolve()), "promotion.questions": args.questions,
                      "promotion.method": args.method, "promotion.auto": "false"})
    cfg = load_config(None, overrides)
    home = args.home.resolve()
    base_id = base_model_id(cfg.policy.model, home)
    store = open_store(f"sqlite:///{home / 'promotion_bench.db'}")
    name = "candidate"
    meta = read_adapter_meta(args.adapter)
    try:
        row = store.get_adapter(name)
    except KeyError:
        row = register_verified(store, name, args.adapter, base_model_id=base_id, checksum=meta["sha256"])
    if not args.keep_cache:  # measure both sides from scratch
        shutil.rmtree(home / "promotion", ignore_errors=True)
    started = time.perf_counter()
    report = evaluate_candidate(store, cfg, home, name, against=args.against, workers=args.workers,
                                on_progress=lambda e: print(f"\r{e['phase']} {e['step']}/{e['total']}", end="",
                                                            file=sys.stderr, flush=True))
    print(file=sys.stderr)
    r = report.report
    n = r["candidate"]["summary"]["n"]
    out = {
        "command": "python -m bench." + Path(__file__).stem + " " + " ".join(argv if argv is not None else sys.argv[1:]),
        "data": str(args.data), "questions": args.questions, "method": args.method, "workers": args.workers,
        "n": n, "wall_s": round(time.perf_counter() - started, 1),
        "candidate_s": r["candidate"]["seconds"], "against_s": r["against"]["seconds"],
        "candidate_q_per_min": round(60 * n / max(r["candidate"]["seconds"], 1e-9), 1),
        "verdict": report.verdict, "passed": report.passed,
        "candidate": r["candidate"]["summary"], "against": r["against"]["summary"],
        "f1_diff": {k: r["comparison"]["f1"][k] for k in ("diff", "ci_low", "ci_high", "p_value")},
        "changed": r["comparison"].get("changes", {}).get("changed"),
        "adapter": str(args.adapter), "adapter_sha256": meta["sha256"], "row": row.name,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("n", "wall_s", "candidate_s", "against_s", "candidate_q_per_min",
                                          "verdict")}, indent=2))
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
