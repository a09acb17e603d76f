"""Does the order of the reader's passages matter to the 135M reader? The LM's span scores with the dumped passages
in reverse order (`answer.passage_order = "reversed"`: the first-ranked passage last, nearest the question), and the
answer ranker refit on them, against the dumped retrieval-order scores.

    python -m bench.answer_dump --sets hotpot:0:300,2wiki:0:182,musique:0:146 --out DUMPS/fixedk.jsonl
    python -m bench.reader_order --dump DUMPS/fixedk.jsonl --scores DUMPS/reversed.jsonl \\
        --out bench/results/reader_order_dev.json
    python -m bench.answer_ranker fit --dump DUMPS/fixedk_reversed.jsonl --dev-only --out RANKER.json

The ranker's dev questions (`bench.answer_ranker`: HotpotQA 0:60, 2Wiki 0:50 and 100:182, MuSiQue 50:146), those
not yes/no with candidates, are scored again under the reversed prompt (`--scores`: one line per question, resumable;
the model is loaded only for questions not yet there). Then 5-fold CV of the linear ranker (the same folds) with the
LM feature taken from: the dumped scores (`retrieval`), the reversed ones (`reversed`), their mean (`mean`) or
maximum (`max`); every other feature is computed in retrieval order. Per variant: the ranker's and the LM-only EM /
F1 and the F1 difference from `retrieval` (paired bootstrap). `--write-dump PATH` writes the dump with the reversed
scores in place of the dumped ones (the dev-only ranker for a reversed reader is fitted on it).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

from bench.answer_ranker import CHARS, answer, features, fit, load
from evorag_core.metrics import exact_match, f1_score, paired_bootstrap
from evorag_core.reader.ranker import CandidateRanker
from evorag_core.types import Passage

FOLDS = 5
VARIANTS: dict[str, Callable[[list[float], list[float]], list[float]]] = {
    "retrieval": lambda given, rev: given,
    "reversed": lambda given, rev: rev,
    "mean": lambda given, rev: [(a + b) / 2 for a, b in zip(given, rev)],
    "max": lambda given, rev: [max(a, b) for a, b in zip(given, rev)],
}


def _key(row: dict) -> str:
    return f"{row['set']}:{row['id']}"


def reversed_scores(rows: list[dict], path: Path, threads: int) -> dict[str, list[float]]:
    """Each row's candidates scored under the reader prompt with its passages reversed (cached in `path`)."""
    done = {}
    if path.exists():
        done = {(d := json.loads(line))["key"]: d["lm_rev"] for line in path.read_text().splitlines() if line.strip()}
    todo = [r for r in rows if _key(r) not in done]
    if todo:
        import torch

        from evorag_core.config import PolicyConfig, home_dir, load_config
        from evorag_core.lm.hf_backend import TransformersBackend
        from evorag_core.reader.span import SpanReader

        torch.set_num_threads(threads)
        answer_cfg = load_config(None, {"answer.passage_order": "reversed"}).answer
        reader = SpanReader(TransformersBackend(PolicyConfig(device="cpu"), home_dir()), answer_cfg, CHARS)
        with path.open("a") as sink:
            for r in tqdm(todo, desc="reversed", file=sys.stderr):
                ps = [Passage(p["pid"], p["title"], p["text"]) for p in r["passages"]]
                done[_key(r)] = reader.span_scores(r["question"], ps, [c["text"] for c in r["candidates"]])
                sink.write(json.dumps({"key": _key(r), "lm_rev": done[_key(r)]}) + "\n")
                sink.flush()
    return done


def compare(rows: list[dict], rev: dict[str, list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows)}
    per: dict[str, dict[str, tuple[float, float]]] = {}
    for name, lm_of in VARIANTS.items():
        vr = [dict(r, features=features(r, lm := lm_of([c["lm"] for c in r["candidates"]], rev[_key(r)])),
                   lm_variant=lm) for r in rows]
        scored: dict[str, tuple[float, float]] = {}
        for k in range(FOLDS):
            ranker = CandidateRanker(fit([r for i, r in enumerate(vr) if i % FOLDS != k], 10.0))
            for r in (r for i, r in enumerate(vr) if i % FOLDS == k):
                a = answer(r, ranker)
                scored[r["id"]] = (exact_match(a, r["answers"]), f1_score(a, r["answers"]))
        lm_only = [exact_match(r["candidates"][max(range(len(r["lm_variant"])), key=r["lm_variant"].__getitem__)]
                               ["text"], r["answers"]) for r in vr]
        per[name] = scored
        ids = list(scored)
        entry: dict[str, Any] = {"ranker_em": sum(scored[i][0] for i in ids) / len(ids),
                                 "ranker_f1": sum(scored[i][1] for i in ids) / len(ids),
                                 "lm_only_em": sum(lm_only) / len(lm_only)}
        if name != "retrieval":
            b = paired_bootstrap([scored[i][1] for i in ids], [per["retrieval"][i][1] for i in ids])
            entry["f1_minus_retrieval"] = {"diff": b.diff, "ci": [b.ci_low, b.ci_high], "p": b.p_value}
        out[name] = entry
        print(f"{name:9s} ranker EM {entry['ranker_em']:.3f} F1 {entry['ranker_f1']:.3f}, LM-only EM "
              f"{entry['lm_only_em']:.3f}" + (f", F1 - retrieval {entry['f1_minus_retrieval']['diff']:+.3f} "
                                             f"(p {entry['f1_minus_retrieval']['p']:.3f})" if name != "retrieval"
                                             else ""), file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dump", type=Path, required=True)
    p.add_argument("--scores", type=Path, required=True, help="the reversed-order scores (read, and extended)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--write-dump", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    rows = [r for r in load(args.dump) if not r["eval"] and not r["yes_no"]["is"] and r["candidates"]]
    rev = reversed_scores(rows, args.scores, args.threads)
    report = {"dump": str(args.dump), "questions": "the answer ranker's dev questions, not yes/no, with candidates",
              "folds": FOLDS, "variants": compare(rows, rev)}
    if args.write_dump:
        with args.write_dump.open("w") as sink:
            for line in args.dump.read_text().splitlines():
                r = json.loads(line)
                for c, v in zip(r["candidates"], rev.get(_key(r), [c["lm"] for c in r["candidates"]])):
                    c["lm"] = v
                sink.write(json.dumps(r) + "\n")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
