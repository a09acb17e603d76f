"""Fit and evaluate the answer ranker (`evorag_core/reader/ranker.py`) on `bench/answer_dump.py` dumps, offline.

    python -m bench.answer_ranker cv   --dump DUMP.jsonl [--l2 10]          # grouped 5-fold CV on the dev questions
    python -m bench.answer_ranker eval --dump DUMP.jsonl [--agent AGENT.jsonl ...] [--l2 10] --out OUT.json
    python -m bench.answer_ranker fit  --dump DUMP.jsonl [--l2 10] --out evorag_core/reader/ranker.json
    python -m bench.answer_ranker fit  --dump DUMP.jsonl --dev-only --out RANKER_DEV.json  # for runs on the eval split

Questions are split once, by their position in the shared dev files (decided before any evaluation):
dev (feature design, the L2 strength) = HotpotQA 0:60, 2Wiki 0:50 and 100:182, MuSiQue 50:146; evaluation =
HotpotQA 60:300, 2Wiki 50:100, MuSiQue 0:50. `eval` scores every evaluation question out of fold: the evaluation
questions are cut into 5 folds (position mod 5 within each set), and a question is ranked by the weights fitted on
the dev questions plus the other 4 folds (the fixed-k dumps only); its yes/no model the same way. The same weights
re-read the agent's final reader passages (`--agent`, dumps of `bench/answer_dump.py --agent-runs`): the agent's
trajectory does not depend on the ranker, so this is what the agent would have answered with it; with `--fit-agent`
the agent's rows of the other folds join the fit too (does the ranker gain from the agent's own reader states?).
Rows: the LM-only ranking (the reader before the ranker: argmax log P, yes/no by the content-free-calibrated margin > 0)
against the learned one on the same questions, EM / F1 with the paired bootstrap, per set and question kind.
`fit` writes the weights fitted on every question of the dumps given (what ships: it has seen the evaluation
questions, so a method run on them with the shipped weights is not held out for the ranker); `fit --dev-only` fits
on the dev questions alone, the weights to give a method run on the evaluation questions (`--set
answer.ranker_path=RANKER_DEV.json`).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from evorag_core.metrics import exact_match, f1_score, normalize_answer, paired_bootstrap
from evorag_core.reader.ranker import CandidateRanker, RankerWeights, YesNoModel, candidate_features, \
    question_type
from evorag_core.reader.ranker_fit import RankerExample, YesNoExample, fit_ranker, fit_yes_no
from evorag_core.types import Passage

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl"}
EVAL = {"hotpot": [(60, 300)], "2wiki": [(50, 100)], "musique": [(0, 50)]}
FOLDS = 5
CHARS = 300


def _positions() -> dict[tuple[str, str], int]:
    out = {}
    for key, name in FILES.items():
        with (BENCH / name).open() as fh:
            for i, line in enumerate(fh):
                out[(key, json.loads(line)["id"])] = i
    return out


def _is_eval(key: str, pos: int) -> bool:
    return any(a <= pos < b for a, b in EVAL[key])


def features(r: dict, lm: list[float] | None = None) -> list[dict[str, float]]:
    """The ranker's features of a dumped question's candidates (`lm`: other LM scores in place of the dumped ones)."""
    passages = [Passage(p["pid"], p["title"], p["text"]) for p in r["passages"]]
    c = r["candidates"]
    return candidate_features(r["question"], passages, CHARS, [(x["text"], x["source"]) for x in c],
                              lm if lm is not None else [x["lm"] for x in c], [x["tokens"] for x in c],
                              r.get("options") or ())


def load(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    pos = _positions()
    for r in rows:
        r["pos"] = pos[(r["set"], r["id"])]
        r["eval"] = _is_eval(r["set"], r["pos"])
        r["fold"] = r["pos"] % FOLDS if r["eval"] else -1
        r["features"] = features(r)
        r["correct"] = [bool(exact_match(x["text"], r["answers"])) for x in r["candidates"]]
    return rows


def _gold_yes_no(r: dict) -> bool | None:
    golds = {normalize_answer(a) for a in r["answers"]}
    return True if "yes" in golds else False if "no" in golds else None


def _examples(rows: Iterable[dict]) -> tuple[list[RankerExample], list[YesNoExample]]:
    ranks, yn = [], []
    for r in rows:
        if r["yes_no"]["is"]:
            g = _gold_yes_no(r)
            if g is not None:
                yn.append(YesNoExample(r["yes_no"]["raw"], r["yes_no"]["content_free"], g))
        elif r["candidates"]:
            ranks.append(RankerExample(tuple(r["features"]), tuple(r["correct"])))
    return ranks, yn


def fit(rows: list[dict], l2: float, meta: dict | None = None) -> RankerWeights:
    ranks, yn = _examples(rows)
    yes_no = fit_yes_no(yn, l2) if len({e.yes for e in yn}) == 2 else YesNoModel()
    return fit_ranker(ranks, l2, yes_no, meta)


def answer(r: dict, ranker: CandidateRanker | None) -> str:
    """The reader's answer for a dumped question: `ranker` None = the LM-only reader (the reader before the
    ranker, content-free calibration, yes_bias 0)."""
    if r["yes_no"]["is"]:
        raw, cf = r["yes_no"]["raw"], r["yes_no"]["content_free"]
        logit = raw - cf if ranker is None else ranker.yes_logit(raw, cf)
        return "yes" if logit > 0 else "no"
    c = r["candidates"]
    if not c:
        return ""
    scores = [x["lm"] for x in c] if ranker is None else ranker.scores(r["features"])
    return c[max(range(len(c)), key=scores.__getitem__)]["text"]


def _kind(r: dict) -> str:
    if _gold_yes_no(r) is not None:
        return "yes/no gold"
    return "either-or" if r.get("options") else question_type(r["question"], ())


def _table(rows: list[dict], preds: dict[str, dict[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups["all"].append(r)
        groups[f"type={r.get('type')}"].append(r)
        groups[f"kind={_kind(r)}"].append(r)
    for g, rs in sorted(groups.items()):
        row: dict[str, Any] = {"n": len(rs)}
        for name, pred in preds.items():
            row[f"{name}_em"] = sum(exact_match(pred[r["id"]], r["answers"]) for r in rs) / len(rs)
            row[f"{name}_f1"] = sum(f1_score(pred[r["id"]], r["answers"]) for r in rs) / len(rs)
        row["oracle_em"] = sum(any(r["correct"]) or _gold_yes_no(r) is not None for r in rs) / len(rs)
        out[g] = row
    names = list(preds)
    if len(names) == 2 and len(rows) > 1:
        a, b = names
        for metric, fn in (("em", exact_match), ("f1", f1_score)):
            bs = paired_bootstrap([fn(preds[b][r["id"]], r["answers"]) for r in rows],
                                  [fn(preds[a][r["id"]], r["answers"]) for r in rows])
            out["all"][f"{b}_minus_{a}_{metric}"] = {"diff": bs.diff, "ci": [bs.ci_low, bs.ci_high],
                                                     "p": bs.p_value}
    return out


def _print(title: str, table: dict[str, Any]) -> None:
    print(f"\n{title}")
    for g, row in table.items():
        cells = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                         if not isinstance(v, dict))
        print(f"  {g:24s} {cells}")
        for k, v in row.items():
            if isinstance(v, dict):
                print(f"  {'':24s} {k}: {v['diff']:+.3f} CI [{v['ci'][0]:+.3f}, {v['ci'][1]:+.3f}] p {v['p']:.4f}")


def cv(rows: list[dict], l2: float) -> dict[str, Any]:
    dev = [r for r in rows if not r["eval"]]
    preds: dict[str, dict[str, str]] = {"lm": {}, "ranker": {}}
    for k in range(FOLDS):
        test = [r for i, r in enumerate(dev) if i % FOLDS == k]
        train = [r for i, r in enumerate(dev) if i % FOLDS != k]
        ranker = CandidateRanker(fit(train, l2))
        for r in test:
            preds["lm"][r["id"]] = answer(r, None)
            preds["ranker"][r["id"]] = answer(r, ranker)
    return {key: _table([r for r in dev if r["set"] == key], preds) for key in FILES} | {"dev": _table(dev, preds)}


def out_of_fold(rows: list[dict], agent_rows: list[dict], l2: float, fit_agent: bool = False) -> dict[str, Any]:
    """Every evaluation question ranked by weights fitted without its fold (see the module docstring). `fit_agent`:
    the agent's rows are ranked by the fixed-k weights ("ranker") and by weights fitted on those questions plus the
    agent's rows of the other folds ("ranker_agent"), compared with each other instead of with the LM."""
    dev = [r for r in rows if not r["eval"]]
    ev = [r for r in rows if r["eval"]]
    fixed: dict[str, dict[str, str]] = {"lm": {}, "ranker": {}}
    agent: dict[str, dict[str, str]] = {"ranker": {}, "ranker_agent": {}} if fit_agent else {"lm": {}, "ranker": {}}
    agent_by_fold = defaultdict(list)
    pos = _positions()
    for r in agent_rows:
        agent_by_fold[pos[(r["set"], r["id"])] % FOLDS].append(r)
    weights = {}
    for k in range(FOLDS):
        w = fit(dev + [r for r in ev if r["fold"] != k], l2)
        weights[k] = json.loads(w.to_json())
        ranker = CandidateRanker(w)
        for r in (r for r in ev if r["fold"] == k):
            fixed["lm"][r["id"]], fixed["ranker"][r["id"]] = answer(r, None), answer(r, ranker)
        if fit_agent:
            others = [r for j in range(FOLDS) if j != k for r in agent_by_fold[j]]
            with_agent = CandidateRanker(fit(dev + [r for r in ev if r["fold"] != k] + others, l2))
            for r in agent_by_fold[k]:
                agent["ranker"][r["id"]], agent["ranker_agent"][r["id"]] = answer(r, ranker), answer(r, with_agent)
            continue
        for r in agent_by_fold[k]:
            agent["lm"][r["id"]], agent["ranker"][r["id"]] = answer(r, None), answer(r, ranker)
    report: dict[str, Any] = {"fixed_k": {key: _table([r for r in ev if r["set"] == key], fixed) for key in FILES}}
    if agent_rows:
        report["agent"] = {key: _table(rs, agent) for key in FILES
                           if (rs := [r for r in agent_rows if r["set"] == key])}
    report["fold_weights"] = weights
    report["predictions"] = {"fixed_k": fixed, "agent": agent}
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("cv", "eval", "fit"))
    p.add_argument("--dump", type=Path, action="append", required=True)
    p.add_argument("--agent", type=Path, action="append", default=[])
    p.add_argument("--l2", type=float, default=10.0)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--fit-agent", action="store_true",
                   help="eval: also fit on the agent's rows of the other folds, compared with the fixed-k fit")
    p.add_argument("--dev-only", action="store_true", help="fit: on the dev questions only (not the evaluation ones)")
    args = p.parse_args(argv)
    rows = [r for d in args.dump for r in load(d)]
    if args.dev_only:
        if args.command != "fit":
            p.error("--dev-only is for fit (cv and eval already keep the evaluation questions out)")
        rows = [r for r in rows if not r["eval"]]
    if args.command == "cv":
        report = cv(rows, args.l2)
        for key, table in report.items():
            _print(f"dev CV, {key}", table)
    elif args.command == "eval":
        agent_rows = [r for d in args.agent for r in load(d) if r["eval"]]
        report = out_of_fold(rows, agent_rows, args.l2, args.fit_agent)
        for method in ("fixed_k", "agent"):
            for key, table in report.get(method, {}).items():
                _print(f"{method}, {key} (evaluation questions, out of fold)", table)
    else:
        sets = sorted({r["set"] for r in rows})
        which = "the dev questions only" if args.dev_only else "every question"
        w = fit(rows, args.l2, {"fitted_on": f"{len(rows)} questions of {', '.join(sets)} (shared dev samples, "
                                              f"the dumps' passages; {which})", "command": "python -m bench.answer_ranker fit "
                                              + " ".join(f"--dump {d.name}" for d in args.dump)
                                              + f" --l2 {args.l2}" + (" --dev-only" if args.dev_only else "")})
        report = json.loads(w.to_json())
        print(w.to_json())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) if args.command != "fit" else w.to_json() + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
