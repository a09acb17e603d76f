"""Probe: would another model over the answer ranker's features pick the right span more often than the shipped
linear conditional logit (`reader.ranker_fit.fit_ranker`)? Offline, on `bench/answer_dump.py` dumps, no LM.

    python -m bench.answer_dump --sets hotpot:0:300,2wiki:0:182,musique:0:146 --out DUMPS/fixedk.jsonl
    python -m bench.ranker_models --dump DUMPS/fixedk.jsonl --out bench/results/ranker_models_cv.json

Every dumped question that is not yes/no and has candidates is ranked out of fold (5 folds by position in the dump,
the same folds for every model; a model is fitted on the other 4) by:

- `linear`: the shipped model class (L2 10), the reference;
- `linear_head`: the same plus three features from the question's wh-phrase head noun ("In what 1997 American crime
  **film** ...", "At what **venue** ..."): the head (or its plural) in a sentence that holds the candidate, the
  candidate a passage's title whose first sentence names the head, and a question-has-a-head bias;
- `gbm`, `gbm_small`: scikit-learn's histogram gradient boosting, pointwise (candidate right or not), ranked by its
  probability;
- `mlp`: a conditional logit over a linear part plus one tanh hidden layer of 16 units (Adam, weight decay).

Reported per set and overall: EM / F1 of the top candidate, and each model minus `linear` (paired bootstrap on F1).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from bench.answer_ranker import fit, load
from evorag_core.metrics import exact_match, f1_score, paired_bootstrap
from evorag_core.reader import ranker_fit
from evorag_core.reader.ranker import FEATURES, CandidateRanker

FOLDS = 5
CHARS = 300
HEAD = ("head_sent", "head_def", "has_head")
_STOP = frozenset("did does do is was were are has had have that who whom whose which where when in on at of for by "
                  "from to with as and or the a an".split())
_NAME_OF = re.compile(r"\bname of (?:the |a |an |this |that )?(.*)", re.I)
_WH = re.compile(r"\b(?:what|which)\b\s+(.*)", re.I)
_TOKEN = re.compile(r"[A-Za-z0-9'\-]+")
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(])")

Scorer = Callable[[dict], Sequence[float]]


def head_noun(question: str) -> str | None:
    """The last lower-case word of the wh-phrase ("In what 1997 American mystery crime film did ..." -> film)."""
    m = _NAME_OF.search(question) or _WH.search(question)
    if not m:
        return None
    head = None
    for w in _TOKEN.findall(m.group(1))[:8]:
        low = w.lower()
        if low in _STOP or (low.endswith("ing") and head):
            break
        if w[0].isupper() or w[0].isdigit():
            if head:
                break
            continue
        head = low
    return head


def _forms(head: str) -> set[str]:
    out = {head, head + "s", head + "es"}
    if head.endswith("y"):
        out.add(head[:-1] + "ies")
    if head.endswith("s"):
        out.add(head[:-1])
    return out


def head_features(row: dict) -> list[dict[str, float]]:
    head = head_noun(row["question"])
    out = []
    for cand in row["candidates"]:
        f: dict[str, float] = {}
        if head:
            forms, key = _forms(head), " ".join(cand["text"].lower().split())
            for p in row["passages"]:
                sents = [s for s in _SENT.split(p["text"][:CHARS]) if s.strip()]
                for s in sents:
                    low = " ".join(s.lower().split())
                    if key in low and set(_TOKEN.findall(low)) & forms:
                        f["head_sent"] = 1.0
                if " ".join(p["title"].lower().split()) == key and sents \
                        and set(_TOKEN.findall(sents[0].lower())) & forms:
                    f["head_def"] = 1.0
            f["has_head"] = 1.0
        out.append(f)
    return out


def _x(row: dict) -> np.ndarray:
    return np.array([[f.get(n, 0.0) for n in FEATURES] for f in row["features"]])


def fit_linear_head(train: list[dict]) -> Scorer:
    saved = ranker_fit.FEATURES
    ranker_fit.FEATURES = FEATURES + HEAD  # the fit's design matrix takes its columns from this name list
    try:
        ranker = CandidateRanker(fit([dict(r, features=r["features_head"]) for r in train], 10.0))
    finally:
        ranker_fit.FEATURES = saved
    return lambda r: ranker.scores(r["features_head"])


def fit_gbm(train: list[dict], **params: Any) -> Scorer:
    from sklearn.ensemble import HistGradientBoostingClassifier

    use = [r for r in train if any(r["correct"])]
    model = HistGradientBoostingClassifier(random_state=0, **params)
    model.fit(np.concatenate([_x(r) for r in use]), np.concatenate([np.array(r["correct"], float) for r in use]))
    return lambda r: model.predict_proba(_x(r))[:, 1]


def fit_mlp(train: list[dict], hidden: int = 16, weight_decay: float = 1e-2, epochs: int = 300) -> Scorer:
    import torch

    torch.manual_seed(0)
    use = [r for r in train if any(r["correct"]) and len(r["correct"]) > 1]
    allx = np.concatenate([_x(r) for r in use])
    mu, sd = allx.mean(0), allx.std(0)
    sd[sd < 1e-9] = 1.0
    mats = [torch.tensor((_x(r) - mu) / sd, dtype=torch.float32) for r in use]
    masks = [torch.tensor(r["correct"]) for r in use]
    net = torch.nn.Sequential(torch.nn.Linear(len(FEATURES), hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
    lin = torch.nn.Linear(len(FEATURES), 1, bias=False)
    opt = torch.optim.Adam([*net.parameters(), *lin.parameters()], lr=1e-2, weight_decay=weight_decay)
    for _ in range(epochs):
        opt.zero_grad()
        loss = sum(-torch.logsumexp(torch.log_softmax((net(m) + lin(m)).squeeze(-1), 0)[k], 0)
                   for m, k in zip(mats, masks))
        (loss / len(mats)).backward()
        opt.step()

    def score(r: dict) -> list[float]:
        with torch.no_grad():
            m = torch.tensor((_x(r) - mu) / sd, dtype=torch.float32)
            return (net(m) + lin(m)).squeeze(-1).tolist()
    return score


MODELS: dict[str, Callable[[list[dict]], Scorer]] = {
    "linear": lambda train: (lambda ranker: lambda r: ranker.scores(r["features"]))(CandidateRanker(fit(train, 10.0))),
    "linear_head": fit_linear_head,
    "gbm": lambda train: fit_gbm(train, max_iter=200, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=40,
                                 l2_regularization=1.0),
    "gbm_small": lambda train: fit_gbm(train, max_iter=100, learning_rate=0.05, max_depth=3, min_samples_leaf=60),
    "mlp": fit_mlp,
}


def run(rows: list[dict], models: dict[str, Callable[[list[dict]], Scorer]] = MODELS) -> dict[str, Any]:
    """Out-of-fold picks of every model in `models` ("linear" among them: the reference), tabled per set."""
    picks: dict[str, dict[str, str]] = {name: {} for name in models}
    for k in range(FOLDS):
        test = [r for i, r in enumerate(rows) if i % FOLDS == k]
        train = [r for i, r in enumerate(rows) if i % FOLDS != k]
        for name, make in models.items():
            score = make(train)
            for r in test:
                picks[name][r["id"]] = r["candidates"][int(np.argmax(score(r)))]["text"]
        print(f"fold {k + 1}/{FOLDS}", file=sys.stderr)
    report: dict[str, Any] = {}
    for key in ("hotpot", "2wiki", "musique", "all"):
        rs = [r for r in rows if key in ("all", r["set"])]
        if not rs:
            continue
        base = [f1_score(picks["linear"][r["id"]], r["answers"]) for r in rs]
        report[key] = {"n": len(rs)}
        for name, pick in picks.items():
            f1 = [f1_score(pick[r["id"]], r["answers"]) for r in rs]
            entry: dict[str, Any] = {"em": float(np.mean([exact_match(pick[r["id"]], r["answers"]) for r in rs])),
                                     "f1": float(np.mean(f1))}
            if name != "linear":
                b = paired_bootstrap(f1, base)
                entry["f1_minus_linear"] = {"diff": b.diff, "ci": [b.ci_low, b.ci_high], "p": b.p_value}
            report[key][name] = entry
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dump", type=Path, action="append", required=True)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    rows = [r for d in args.dump for r in load(d) if not r["yes_no"]["is"] and r["candidates"]]
    for r in rows:
        r["features_head"] = [dict(a, **b) for a, b in zip(r["features"], head_features(r))]
    report = {"questions": len(rows), "with_head_noun": sum(bool(head_noun(r["question"])) for r in rows),
              "folds": FOLDS, "by_set": run(rows)}
    for key, table in report["by_set"].items():
        for name, e in table.items():
            if isinstance(e, dict):
                diff = e.get("f1_minus_linear")
                tail = f"  F1 - linear {diff['diff']:+.3f} (p {diff['p']:.3f})" if diff else ""
                print(f"{key:8s} {name:12s} n={table['n']:4d} EM {e['em']:.3f} F1 {e['f1']:.3f}{tail}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
