"""Quality and speed of the LM agent against the pipeline baselines, and the LLM judge against the gold judge.

    python -m bench.agent [--limit 40 | --questions START:END] [--sets hotpot-pooled,hotpot-per-question,2wiki,musique,bamboogle]
                          [--methods direct,fixed-k,ircot,self-ask,agent] [--adapter NAME] [--judge-limit 60]
                          [--resume] [--workers N] [--out bench/results/agent.json]

For every evaluation set and method: EM, F1, avg steps, support recall, refusal rate, format validity, fallback rate
and seconds (the `evorag eval` summary), then the paired bootstrap (10,000 resamples) of `agent` against each
baseline on the same questions. All methods share one loaded backend (the embedded SmolLM2-135M unless --set
policy.model=...), one retriever per corpus and the same evaluation code. Sets (first --limit questions of each):

- hotpot-pooled / hotpot-per-question: ../shared/benchmarks/hotpotqa_dev300.jsonl over its pooled 2,965 passages or
  over each question's own 10 passages;
- 2wiki, musique: their dev samples over their pooled passages;
- bamboogle: bamboogle_dev60 (it ships no passages) over the pooled passages of the other three files, where the
  right behaviour is often REFUSE.

Per-question results are JSON lines under --runs (one file per set x method), so `--resume` continues an
interrupted run. Speed: median seconds per agent decision (the policy's act: action scoring plus argument
generation) and per episode, with the load average, since the machine may be shared.

Judge agreement: on the first --judge-limit HotpotQA questions, three evidence sets each (both gold passages;
one gold passage plus the two top-ranked distractors; the top-3 hybrid hits of the question), the LLM sufficiency
judge's verdict (threshold `judge.threshold`, default 0.5) against the gold-coverage judge: agreement, Cohen's kappa,
and the AUC of P(yes) (threshold-free).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from evorag_core.config import home_dir, load_config
from evorag_core.data.datasets import load_dataset, pooled_corpus
from evorag_core.evaluation.runner import Progress, compare_results, evaluate
from evorag_core.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl",
         "bamboogle": "bamboogle_dev60.jsonl"}
SETS = {  # name -> (data file key, corpus mode, corpus files or None for the data file's own)
    "hotpot-pooled": ("hotpot", "pooled", None),
    "hotpot-per-question": ("hotpot", "per-question", None),
    "2wiki": ("2wiki", "pooled", None),
    "musique": ("musique", "pooled", None),
    "bamboogle": ("bamboogle", "pooled", ("hotpot", "2wiki", "musique")),
}
METHODS = ("direct", "fixed-k", "ircot", "self-ask", "agent")


def _runtime(set_name: str, overrides: dict, home: Path) -> Runtime:
    key, mode, corpus_keys = SETS[set_name]
    cfg = load_config(None, {**overrides, "env.corpus": mode})
    corpus = None
    if corpus_keys:
        corpus = pooled_corpus(BENCH / FILES[k] for k in corpus_keys)
    return Runtime(cfg, home, load_dataset(BENCH / FILES[key]), corpus)


class _TimedPolicy:
    """Wraps an episode policy and records the wall time of every decision."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.label = inner.label
        self.seconds: list[float] = []
        self.answer_seconds: list[float] = []  # final decisions (ANSWER / REFUSE: label scoring + the reader)

    def begin(self, question) -> None:
        self.inner.begin(question)

    def act(self, view):
        start = time.perf_counter()
        out = self.inner.act(view)
        self.seconds.append(time.perf_counter() - start)
        action = out[0] if isinstance(out, tuple) else out
        if type(action).__name__ in ("Answer", "Refuse"):  # the final decision (a span refusal is a REFUSE)
            self.answer_seconds.append(self.seconds[-1])
        return out


def _method(name: str, backend, rt: Runtime, adapter: str | None):
    from evorag_core.methods.agent import agent_on
    from evorag_core.methods.baselines import baseline_on

    if name == "agent":
        method = agent_on(backend, rt, adapter)
        method.policy = _TimedPolicy(method.policy)
        return method
    if adapter:
        backend.activate(adapter)
    return baseline_on(name, backend, rt)


def _pool(set_name: str, name: str, rt: Runtime, args):
    """`--workers N`: the questions of one set x method on N processes (evaluation/pool.py), each loading its own
    model, index and method; the results are the one-process ones (greedy decoding), decisions are not timed."""
    from evorag_core.evaluation.pool import EvalPool, EvalSpec
    from evorag_core.methods.base import MethodOptions

    key, _, corpus_keys = SETS[set_name]
    spec = EvalSpec(rt.cfg, str(rt.home), str(BENCH / FILES[key]), threads=rt.cfg.policy.threads or 1, method=name,
                    options=MethodOptions(adapter=args.adapter),
                    corpus_from=tuple(str(BENCH / FILES[k]) for k in corpus_keys or ()))
    return EvalPool(spec, args.workers)


def _round(d: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


def run_sets(args, backend, adapter, overrides, home) -> dict:
    out: dict = {}
    for set_name in args.sets:
        rt = _runtime(set_name, overrides, home)
        questions = rt.dataset.questions[args.start: args.end]
        results, summaries, speed = {}, {}, {}
        for name in args.methods:
            method = _method(name, backend, rt, adapter)
            path = args.runs / f"{set_name}__{name}.jsonl"
            tokens0 = getattr(backend, "tokens_generated", 0)
            pool = _pool(set_name, name, rt, args) if args.workers > 1 else None
            try:
                with Progress(len(questions), desc=f"{set_name} {name}", disable=not sys.stderr.isatty()) as show:
                    summary, res = evaluate(method, questions, out_path=path, resume=args.resume, on_result=show,
                                            run=pool.runner() if pool is not None else None)
            finally:
                if pool is not None:
                    pool.close()
            tokens = getattr(backend, "tokens_generated", 0) - tokens0
            summary["tokens_per_second"] = tokens / summary["seconds"] if summary["seconds"] else 0.0
            summaries[name], results[name] = _round(summary), res
            print(f"[{set_name}] {name}: " + json.dumps({k: summaries[name][k] for k in
                  ("n", "em", "f1", "avg_steps", "support_recall", "refusal_rate", "format_valid", "fallback_rate",
                   "seconds")}), file=sys.stderr, flush=True)
            if name == "agent" and args.workers == 1:
                per_episode = [r.seconds for r in res if r.seconds]
                decisions = method.policy.seconds
                answers = method.policy.answer_seconds
                speed = {"median_decision_s": statistics.median(decisions) if decisions else None,
                         "median_final_decision_s": statistics.median(answers) if answers else None,
                         "final_decisions_timed": len(answers),
                         "median_step_s": statistics.median(r.seconds / r.steps for r in res if r.steps and r.seconds)
                         if per_episode else None,
                         "median_episode_s": statistics.median(per_episode) if per_episode else None,
                         "decisions_timed": len(decisions),
                         "note": "decisions are timed only for questions run in this invocation (not resumed ones)"}
        comparisons = {}
        if "agent" in results:
            for name in args.methods:
                if name != "agent" and results[name]:
                    c = compare_results(results["agent"], results[name])
                    comparisons[f"agent_vs_{name}"] = {
                        "n": c["n"], **{f"{m}_diff": round(c[m]["diff"], 4) for m in ("em", "f1")},
                        **{f"{m}_p": round(c[m]["p_value"], 4) for m in ("em", "f1")},
                        **{f"{m}_ci95": [round(x, 4) for x in (c[m]["ci_low"], c[m]["ci_high"])] for m in ("em", "f1")},
                    }
        out[set_name] = {"corpus_passages": len(rt.pooled_corpus) if rt.fixed_corpus is None else len(rt.fixed_corpus),
                         "corpus_mode": rt.cfg.env.corpus, "summaries": summaries, "agent_vs": comparisons,
                         "agent_speed": speed}
        args.save(out)
    return out


def _auc(scores: list[float], labels: list[bool]) -> float | None:
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def judge_agreement(args, backend, overrides, home) -> dict:
    """The LLM judge against the gold-coverage judge on three evidence sets per HotpotQA question."""
    from evorag_core.env.judges import GoldCoverageJudge, JudgeRequest
    from evorag_core.policy.llm_judge import LLMSufficiencyJudge

    rt = _runtime("hotpot-per-question", overrides, home)
    cfg = rt.cfg
    llm = LLMSufficiencyJudge(backend, cfg.judge.threshold, cfg.policy.passage_chars)
    gold_judge = GoldCoverageJudge()
    rows = []
    for q in rt.dataset.questions[: args.judge_limit]:
        gold = [p for p in q.passages if p.pid in q.gold_pids]
        distract = [p for p in q.passages if p.pid not in q.gold_pids]
        hits = rt.retriever_for(q).search(q.question, 3)
        by_pid = {p.pid: p for p in q.passages}
        evidence_sets = {"all_gold": gold, "one_gold": gold[:1] + distract[:2],
                         "top3": [by_pid[h.pid] for h in hits]}
        for kind, evidence in evidence_sets.items():
            req = JudgeRequest("bench", 0, q.question, tuple(evidence), q.gold_pids, True)
            g = gold_judge.judge(req).answerable
            v = llm.judge(q.question, evidence)
            rows.append({"kind": kind, "gold": g, "llm": v.answerable, "p_yes": v.p_yes})
    n = len(rows)
    agree = sum(r["gold"] == r["llm"] for r in rows) / n
    p_gold = sum(r["gold"] for r in rows) / n
    p_llm = sum(r["llm"] for r in rows) / n
    chance = p_gold * p_llm + (1 - p_gold) * (1 - p_llm)
    kappa = (agree - chance) / (1 - chance) if chance < 1 else 0.0
    by_kind = {k: {"n": sum(r["kind"] == k for r in rows),
                   "gold_yes_rate": round(statistics.mean(r["gold"] for r in rows if r["kind"] == k), 4),
                   "llm_yes_rate": round(statistics.mean(r["llm"] for r in rows if r["kind"] == k), 4),
                   "mean_p_yes": round(statistics.mean(r["p_yes"] for r in rows if r["kind"] == k), 4)}
               for k in ("all_gold", "one_gold", "top3")}
    return {"n": n, "questions": min(args.judge_limit, len(rt.dataset.questions)), "threshold": cfg.judge.threshold,
            "agreement": round(agree, 4), "cohen_kappa": round(kappa, 4),
            "auc_p_yes": round(_auc([r["p_yes"] for r in rows], [r["gold"] for r in rows]) or 0.0, 4),
            "gold_yes_rate": round(p_gold, 4), "llm_yes_rate": round(p_llm, 4), "by_evidence": by_kind}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--limit", type=int, default=40, help="first N questions of each set")
    p.add_argument("--questions", default=None, metavar="START:END",
                   help="questions START..END-1 of each set (overrides --limit; chunk a run with --resume)")
    p.add_argument("--sets", default=",".join(SETS), help="comma-separated: " + ", ".join(SETS))
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated: " + ", ".join(METHODS))
    p.add_argument("--adapter", default=None, help="LoRA adapter (store name or folder) for every method")
    p.add_argument("--judge-limit", type=int, default=60, help="HotpotQA questions for the judge agreement (0: skip)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--resume", action="store_true", help="keep finished questions of earlier runs")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="evaluate each set x method on N processes (one model each; decisions are then not timed)")
    p.add_argument("--runs", type=Path, default=ROOT / "bench" / "results" / "agent_runs")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "agent.json")
    args = p.parse_args(argv)
    args.sets = [s for s in args.sets.split(",") if s]
    args.methods = [m for m in args.methods.split(",") if m]
    args.start, args.end = 0, args.limit
    if args.questions:
        try:
            args.start, args.end = (int(x) for x in args.questions.split(":"))
        except ValueError:
            p.error(f"--questions must be START:END, got {args.questions!r}")
    unknown = [s for s in args.sets if s not in SETS] + [m for m in args.methods if m not in METHODS]
    if unknown:
        p.error(f"unknown set or method: {', '.join(unknown)}")
    if not BENCH.is_dir():
        p.error(f"{BENCH} not found (the benchmark samples live beside the repository)")
    overrides = dict(item.split("=", 1) for item in args.overrides)
    home = home_dir()
    args.runs.mkdir(parents=True, exist_ok=True)

    from evorag_core.lm.backends import load_backend

    if args.workers < 1:
        p.error("--workers must be at least 1")
    report: dict = {"workers": args.workers, "limit": args.limit, "questions": [args.start, args.end], "methods": args.methods, "adapter": args.adapter,
                    "machine": {"cpus": os.cpu_count(), "loadavg_start": list(os.getloadavg())}}

    def save(sets: dict) -> None:
        report["sets"] = sets
        report["machine"]["loadavg_now"] = list(os.getloadavg())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    args.save = save
    start = time.perf_counter()
    rt0 = _runtime(args.sets[0], overrides, home)
    backend, adapter = load_backend(rt0, args.adapter)
    report["model"] = backend.model_id
    report["load_s"] = round(time.perf_counter() - start, 2)
    sets = run_sets(args, backend, adapter, overrides, home)
    if args.judge_limit:
        backend.activate(None)
        report["judge_agreement"] = judge_agreement(args, backend, overrides, home)
        print("judge: " + json.dumps(report["judge_agreement"]), file=sys.stderr)
    report["total_s"] = round(time.perf_counter() - start, 1)
    save(sets)
    print(json.dumps({s: {"summaries": {m: {k: v[k] for k in ("em", "f1", "avg_steps", "support_recall",
                                                                 "refusal_rate")} for m, v in d["summaries"].items()},
                          "agent_vs": d["agent_vs"]} for s, d in sets.items()}, indent=1))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
