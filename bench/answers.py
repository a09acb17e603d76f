"""The reader's answer modes on the same retrieved passages: the tuning bench of `evorag_core/reader/span.py`.

    python -m bench.answers [--sets hotpot:0:60,2wiki:0:30] [--variant NAME:KEY=VALUE,...]... [--timing 20]
                            [--out bench/results/answers_dev.json]

Every question's passages are the top-`env.top_k` hits of the question over its set's pooled corpus (what `fixed-k`
reads), retrieved once; each variant (an `[answer]` setting: `free`, or `span` with knobs, e.g.
`span600:mode=span,passage_chars=600`) answers every question over them. Per variant: EM, F1, refusals, yes/no
accuracy, EM/F1 on comparison and on yes/no questions (HotpotQA's `type`; a yes/no question is one whose gold is
yes/no), and the candidate oracle (a candidate EM-equal to the gold exists). `--timing N`: seconds per answer on the
first N questions with the prefix cache emptied before each call (every mode pays its whole prompt, as an agent's
first ANSWER step does), free vs each variant. Tune only on the tuning questions (HotpotQA dev 0:60, 2Wiki 0:30).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from evorag_core.reader.answers import Reader
from evorag_core.config import AnswerConfig, home_dir, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.metrics import exact_match, f1_score, normalize_answer
from evorag_core.runtime import Runtime
from evorag_core.reader.span import extract_candidates, span_in_passages

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl"}
DEFAULT_VARIANTS = ("free:mode=free", "span:mode=span")


def _variant(text: str) -> tuple[str, dict]:
    name, _, rest = text.partition(":")
    return name, dict(kv.split("=", 1) for kv in rest.split(",") if kv)


def _answer_cfg(overrides: dict) -> AnswerConfig:
    return load_config(None, {f"answer.{k}": v for k, v in overrides.items()}).answer


def _is_yes_no_gold(q) -> bool:
    return any(normalize_answer(a) in ("yes", "no") for a in q.answers)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", default="hotpot:0:60,2wiki:0:30")
    p.add_argument("--variant", action="append", default=[])
    p.add_argument("--timing", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "answers_dev.json")
    args = p.parse_args(argv)
    variants = [_variant(v) for v in (args.variant or DEFAULT_VARIANTS)]
    import torch

    torch.set_num_threads(args.threads)
    from evorag_core.lm.backends import load_backend

    home = home_dir()
    cfg = load_config(None, {"env.corpus": "pooled"})
    items = []  # (set, question, passages)
    backend = None
    for spec in args.sets.split(","):
        key, start, end = spec.split(":")
        rt = Runtime(cfg, home, load_dataset(BENCH / FILES[key]))
        if backend is None:
            backend, _ = load_backend(rt, None)
        retriever = rt.retriever_for(rt.dataset.questions[0])
        by_pid = {p.pid: p for p in rt.pooled_corpus.passages}
        for q in rt.dataset.questions[int(start):int(end)]:
            items.append((key, q, [by_pid[h.pid] for h in retriever.search(q.question, cfg.env.top_k)]))
    report: dict = {"sets": args.sets, "n": len(items), "top_k": cfg.env.top_k, "variants": {},
                    "machine": {"cpus": os.cpu_count(), "threads": args.threads, "loadavg_start": list(os.getloadavg())}}
    chars = cfg.policy.passage_chars
    for name, overrides in variants:
        acfg = _answer_cfg(overrides)
        reader = Reader(backend, acfg, chars, cfg.policy.max_answer_tokens)
        rows = []
        start = time.perf_counter()
        for key, q, passages in items:
            ans = reader.answer(q.question, passages)
            row = {"set": key, "id": q.id, "type": q.type, "yes_no": _is_yes_no_gold(q), "answer": ans,
                   "em": exact_match(ans, q.answers) if ans else 0.0, "f1": f1_score(ans, q.answers) if ans else 0.0,
                   "grounded": ans.lower() in ("yes", "no") or span_in_passages(ans, passages, 10_000) if ans else None}
            if acfg.mode == "span" and set(reader.span.last_scores) == {"yes", "no"}:
                row["yes_margin"] = round(reader.span.last_scores["yes"], 4)  # calibrated, bias included
            if acfg.mode == "span":
                cands = extract_candidates(q.question, passages, reader.span.chars, acfg.max_words,
                                           acfg.max_candidates)
                row["oracle_em"] = max([exact_match(c, q.answers) for c, _ in cands] + [0.0])
            rows.append(row)
        seconds = time.perf_counter() - start

        def agg(sel):
            sel = list(sel)
            if not sel:
                return None
            return {"n": len(sel), "em": round(statistics.mean(r["em"] for r in sel), 4),
                    "f1": round(statistics.mean(r["f1"] for r in sel), 4)}

        out = {"config": overrides, "all": agg(rows), "seconds_per_q": round(seconds / len(rows), 3),
               "refusals": sum(not r["answer"] for r in rows),
               "grounded": sum(bool(r["grounded"]) for r in rows),
               "short_le5_words": sum(0 < len(r["answer"].split()) <= 5 for r in rows)}
        for key in sorted({r["set"] for r in rows}):
            sub = [r for r in rows if r["set"] == key]
            out[key] = {"all": agg(sub), "comparison": agg(r for r in sub if r["type"] == "comparison"),
                        "bridge": agg(r for r in sub if r["type"] != "comparison"),
                        "yes_no": agg(r for r in sub if r["yes_no"]),
                        "non_yes_no": agg(r for r in sub if not r["yes_no"])}
            if acfg.mode == "span":
                out[key]["oracle_em"] = round(statistics.mean(r.get("oracle_em", 0.0) for r in sub), 4)
            said = [r for r in sub if r["yes_no"]]
            out[key]["yes_no_said_yes"] = sum(r["answer"].lower() == "yes" for r in said)
        if reader.span is not None:
            out["kinds"], out["refusal_reasons"] = dict(reader.span.kinds), dict(reader.span.refusals)
        out["rows"] = rows
        report["variants"][name] = out
        print(f"{name}: {json.dumps({k: v for k, v in out.items() if k != 'rows'})}", file=sys.stderr, flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")  # after every variant
    if args.timing:
        timing = {}
        for name, overrides in [("free", {"mode": "free"})] + [v for v in variants if v[1].get("mode") != "free"]:
            reader = Reader(backend, _answer_cfg(overrides), chars, cfg.policy.max_answer_tokens)
            secs = []
            for _, q, passages in items[: args.timing]:
                backend.reset_cache()
                t0 = time.perf_counter()
                reader.answer(q.question, passages)
                secs.append(time.perf_counter() - t0)
            timing[name] = {"median_s": round(statistics.median(secs), 3), "mean_s": round(statistics.mean(secs), 3)}
        report["timing_cold_prompt"] = timing
        print(f"timing: {timing}", file=sys.stderr)
    report["machine"]["loadavg_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({n: {k: v for k, v in d.items() if k not in ("rows",)} for n, d in report["variants"].items()},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
