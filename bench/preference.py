"""Rollout throughput and the multi-head preference model on HotpotQA-derived pairs; writes JSON.

    python -m bench.preference [--questions 0:64] [--workers 2] [--t-max 5] [--siblings 4] [--max-states 3]
                               [--stage discovery|refinement] [--corpus per-question|pooled] [--passage-chars N]
                               [--db URL] [--home DIR] [--out bench/results/preference.json] [--skip-rollout]

1. Rollouts (`evorag rollout`, one process per worker, one torch thread each, on disjoint parts of the slice) of the
   embedded SmolLM2 policy on the training slice of /work/shared/benchmarks/hotpotqa_dev300.jsonl, on the pooled
   corpus (`--corpus`, default pooled: all ~3,000 passages of the file, the config default; per-question: each
   question's 10 passages, 2 of them gold, where nearly every search retrieves gold and ret carries no signal),
   Discovery stage by default (`--stage`), into a SQLite store (resumable: questions already rolled
   out by the same policy are skipped). Throughput = pairs stored / wall minutes of this run, with the CPU time
   and the load average recorded (the machine is shared).
2. Encoder choice: pooled hidden states of several layers x {mean, last, probe} are computed in one pass per state
   (cached); each is scored by the held-out overall pairwise accuracy of the full model.
3. The full model (seven heads) at the chosen layer/pooling, single-signal ablations (one head trained at a time,
   the paper's Table 5 shape: that head's eval accuracy/loss and the overall accuracy when ranking by it alone),
   and a single-head baseline trained on the total return. The split is by question (80/20, seed 0); the layer,
   pooling, L2 strength and the combiner (fitted in-sample, stacked on out-of-fold head scores, stacked and
   non-negative) are chosen by 5-fold grouped cross-validation inside the training split only.
4. Diagnostics. `overall_from_true_head_signs`: the overall accuracy a ranking from per-head preferences would reach
   with every head right (true signs, weights fitted on the training pairs or set to their mean |dG^(k)|).
   `head_accuracy_by_conflict`: each head's held-out accuracy where ret's direction disagrees with act's or dup's,
   and where it does not. `lexical_baseline`: the overall accuracy of a logistic regression on hand-made
   question/candidate overlap features instead of the LM's hidden states (is the overall direction predictable
   from the state and candidate at all?). `head_accuracy_ci95_by_question`: each head's held-out accuracy with a 95%
   interval from a bootstrap over held-out questions (pairs of one question are not independent), and
   `head_accuracy_grouped_cv_train`: each head's accuracy over the 5 grouped folds of the training split (every
   training pair scored by heads fitted without its question; ~4x the questions of the eval split).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DATA = ROOT.parent / "shared" / "benchmarks" / "hotpotqa_dev300.jsonl"
TARGETS = {"head_accuracy_min": 0.5, "overall_accuracy_min": 0.70}
COMBINERS = (  # (name, combine_folds, combine_nonnegative): see evorag_core/preference/__init__.py, "Overall preference"
    ("in-sample", 0, False), ("stacked", 5, False), ("stacked-nonnegative", 5, True))


def _slice(text: str) -> tuple[int, int]:
    start, _, stop = text.partition(":")
    return int(start or 0), int(stop)


def run_rollouts(args: argparse.Namespace, db: str) -> dict:
    """`evorag rollout` in `args.workers` processes over disjoint parts of the slice; returns the combined stats."""
    start, stop = _slice(args.questions)
    n = stop - start
    bounds = [start + round(i * n / args.workers) for i in range(args.workers + 1)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    procs = []
    wall = time.perf_counter()
    load_before = os.getloadavg()
    for lo, hi in zip(bounds, bounds[1:]):
        cmd = [sys.executable, "-m", "evorag_core.cli.main", "rollout", "--data", str(args.data), "--offset", str(lo),
               "--limit", str(hi - lo), "--siblings", str(args.siblings), "--t-max", str(args.t_max),
               "--max-states", str(args.max_states), "--stage", args.stage, "--db", db, "--home", str(args.home),
               "--resume", "--json", "--set", "policy.threads=1", "--set", "policy.device=cpu",
               "--set", f"env.corpus={args.corpus}"]
        if args.passage_chars:
            cmd += ["--set", f"policy.passage_chars={args.passage_chars}"]
        log = open(Path(args.home) / f"rollout_{lo}_{hi}.log", "w")
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True), log))
    outs = []
    for proc, log in procs:
        stdout, _ = proc.communicate()
        log.close()
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if proc.returncode not in (0, 130) or not lines:
            for other, _ in procs:  # no worker outlives the run it belongs to
                if other.poll() is None:
                    other.terminate()
                    other.wait()
            raise SystemExit(f"rollout worker failed (exit {proc.returncode}); see the logs in {args.home}")
        outs.append(json.loads(lines[-1]))
    minutes = (time.perf_counter() - wall) / 60
    total = {k: sum(o[k] for o in outs) for k in ("episodes", "steps", "candidates", "branches", "decisions",
                                                 "pairs_built", "pairs_kept", "dropped_duplicate",
                                                 "dropped_balance", "greedy_chosen", "greedy_rejected")}
    cpu = os.times()
    return {
        **total,
        "wall_minutes": round(minutes, 2),
        "pairs_per_minute": round(total["pairs_kept"] / minutes, 2) if minutes > 0 else None,
        "episodes_per_minute": round(total["episodes"] / minutes, 3) if minutes > 0 else None,
        "worker_cpu_minutes": round((cpu.children_user + cpu.children_system) / 60, 2),
        "pairs_per_cpu_minute": round(total["pairs_kept"] / max((cpu.children_user + cpu.children_system) / 60, 1e-9), 2),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "workers": outs,
    }


def _grouped_folds(xc, xr, examples, cfg, folds: int = 5):
    """For each of `folds` folds of the examples' questions: (model fitted without them, their feature rows and
    examples); the encoder choice and the out-of-fold figures never see the eval split."""
    from evorag_core.preference import fit_preference_model

    groups = sorted({e.group for e in examples})
    for f in range(folds):
        held = set(groups[f::folds])
        tr = [i for i, e in enumerate(examples) if e.group not in held]
        te = [i for i, e in enumerate(examples) if e.group in held]
        if tr and te:
            model = fit_preference_model(xc[tr], xr[tr], [examples[i] for i in tr], cfg)
            yield model, xc[te], xr[te], [examples[i] for i in te]


def _cv_accuracy(xc, xr, examples, cfg, folds: int = 5) -> float:
    """Mean overall accuracy over grouped folds of the training split."""
    from evorag_core.preference import evaluate

    accs = [evaluate(model, c, r, ex)[1] for model, c, r, ex in _grouped_folds(xc, xr, examples, cfg, folds)]
    return float(sum(accs) / len(accs)) if accs else float("nan")


def _cv_head_accuracy(xc, xr, examples, cfg, folds: int = 5) -> dict:
    """Each head's accuracy pooled over the grouped folds of the training split (every pair is scored once, by heads
    fitted without its question), with the question-bootstrap interval of `_head_accuracy_ci`: a second held-out
    estimate, over ~4x the questions of the fixed eval split."""
    scored: dict[str, tuple[list, list]] = {}
    for model, c, r, ex in _grouped_folds(xc, xr, examples, cfg, folds):
        for head, (right, qs) in _head_right(model, c, r, ex).items():
            scored.setdefault(head, ([], []))[0].extend(right)
            scored[head][1].extend(qs)
    return {head: _clustered_accuracy(right, qs) for head, (right, qs) in scored.items()}


def _true_signs(examples):
    import numpy as np

    from evorag_core.env.signals import SIGNAL_NAMES

    d = np.array([[e.deltas[k] for k in SIGNAL_NAMES] for e in examples], dtype=float).reshape(-1, len(SIGNAL_NAMES))
    return np.sign(d) * (np.abs(d) >= 1e-3), np.abs(d)


def _pair_accuracy(z) -> float:
    """Share of pairs whose score difference z (chosen - rejected) is positive; a tie counts half."""
    return float(((z > 0) + 0.5 * (z == 0)).mean())


def _fit_pairwise_logistic(x, l2: float):
    """w minimizing mean -log sigma(x @ w) + l2 |w|^2 (no intercept: x holds chosen - rejected differences, so the
    fit is symmetric in the two sides) by L-BFGS; x is [n, d] numpy, the result a numpy vector."""
    import torch

    from evorag_core.preference.fit import _lbfgs

    xt = torch.as_tensor(x, dtype=torch.float32)
    w = torch.zeros(xt.shape[1], requires_grad=True)
    _lbfgs([w], lambda: torch.nn.functional.softplus(-(xt @ w)).mean() + l2 * (w ** 2).sum(), 200)
    return w.detach().numpy()


def _sign_ceiling(train, evals) -> dict:
    """What an overall ranking built from per-head preferences could reach if every head were right: each pair
    scored by sum_k c_k * sign(dG^(k)) with the TRUE signs, c fitted on the training pairs (logistic regression of
    the overall direction on the signs), and, for comparison, c_k = the training pairs' mean |dG^(k)|."""
    import numpy as np

    from evorag_core.env.signals import SIGNAL_NAMES

    signs, magnitude = _true_signs(train)
    out = {}
    for name, weights in (("fitted", _fit_pairwise_logistic(signs, 1e-3)), ("mean_abs_delta", magnitude.mean(0))):
        row = {"weights": {k: round(float(w), 4) for k, w in zip(SIGNAL_NAMES, weights)}}
        for split, examples in (("train", train), ("eval", evals)):
            score = _true_signs(examples)[0] @ weights if examples else np.zeros(0)
            row[f"{split}_accuracy"] = round(_pair_accuracy(score), 4) if examples else None
        out[name] = row
    return out


def _head_accuracy_by_conflict(model, chosen, rejected, evals) -> dict:
    """Each head's held-out accuracy on the pairs where ret's direction disagrees with act's or dup's (the total then
    depends on which signal weighs more) and on the rest."""
    import torch

    from evorag_core.env.signals import SIGNAL_NAMES

    signs, _ = _true_signs(evals)
    with torch.no_grad():
        diff = (model(torch.as_tensor(chosen)) - model(torch.as_tensor(rejected))).numpy()
    ret, act, dup = (SIGNAL_NAMES.index(k) for k in ("ret", "act", "dup"))
    conflict = (signs[:, ret] * signs[:, act] < 0) | (signs[:, ret] * signs[:, dup] < 0)
    out = {}
    for name, selected in (("conflict", conflict), ("agree", ~conflict)):
        row = {"pairs": int(selected.sum())}
        for k, head in enumerate(SIGNAL_NAMES):
            mask = selected & (signs[:, k] != 0)
            if mask.any():
                z = signs[mask, k] * diff[mask, k]
                row[head] = {"pairs": int(mask.sum()), "accuracy": round(_pair_accuracy(z), 4)}
        out[name] = row
    return out


def _head_right(model, chosen, rejected, examples) -> dict:
    """{head: (1 / 0.5 / 0 per pair whose signal varies: right, tie, wrong; the pairs' questions)}."""
    import numpy as np
    import torch

    from evorag_core.env.signals import SIGNAL_NAMES

    signs, _ = _true_signs(examples)
    with torch.no_grad():
        diff = (model(torch.as_tensor(chosen)) - model(torch.as_tensor(rejected))).numpy()
    out = {}
    for k, head in enumerate(model.heads_names):
        mask = signs[:, k] != 0 if head in SIGNAL_NAMES else np.zeros(len(examples), bool)
        if mask.any():
            z = signs[mask, k] * diff[mask, k]
            out[head] = (list((z > 0) + 0.5 * (z == 0)), [e.group for e, m in zip(examples, mask) if m])
    return out


def _clustered_accuracy(right, questions, resamples: int = 10_000, seed: int = 0) -> dict:
    """Accuracy with a 95% interval from a bootstrap over *questions*: a question's pairs share its state and its
    answers, so they are not independent draws, and resampling pairs would understate the spread."""
    import numpy as np

    names = sorted(set(questions))
    index = {g: i for i, g in enumerate(names)}
    gid = np.array([index[g] for g in questions])
    right = np.asarray(right, dtype=float)
    hits = np.bincount(gid, weights=right, minlength=len(names))  # per question: right pairs, pairs
    count = np.bincount(gid, minlength=len(names)).astype(float)
    draws = np.random.default_rng(seed).integers(0, len(names), size=(resamples, len(names)))
    h, c = hits[draws].sum(1), count[draws].sum(1)
    acc = h[c > 0] / c[c > 0]
    return {"pairs": int(len(right)), "questions": len(names), "accuracy": round(float(right.mean()), 4),
            "ci95": [round(float(np.quantile(acc, 0.025)), 4), round(float(np.quantile(acc, 0.975)), 4)]}


def _head_accuracy_ci(model, chosen, rejected, evals) -> dict:
    """Each head's held-out accuracy with a 95% interval from a bootstrap over held-out questions (a tie counts
    half, as in the accuracy itself)."""
    return {head: _clustered_accuracy(right, qs) for head, (right, qs) in _head_right(model, chosen, rejected,
                                                                                       evals).items()}


_STOP = frozenset("a an the of in on at to for and or is was were are be by with from as that which who what when "
                  "where how did does do his her its their this these those than then it he she they".split())


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP]


def _lexical_features(prompt: str, candidate: str) -> list[float]:
    """Hand-made features of one candidate (reply line + observation) against the question of its prompt: action
    kind; the argument's overlap with the question; new vs repeated passages; how well the new passages' titles and
    texts match the question's words; whether an answer's words appear in the passages shown."""
    import re

    question = set(_words(re.findall(r"Question: (.*)", prompt)[-1]))
    line, _, observation = candidate.partition("\n")
    kind = line.split(":", 1)[0].strip()
    arg = _words(line.split(":", 1)[1]) if ":" in line else []
    new = re.findall(r"^\[\d+\] ([^:\n]+): (.*)$", observation, flags=re.M)
    again = re.findall(r"^\(again \[\d+\]", observation, flags=re.M)
    title = [len(set(_words(t)) & question) / max(1, len(set(_words(t)))) for t, _ in new]
    text = [len(set(_words(b)) & question) / max(1, len(question)) for _, b in new]
    shown = prompt.rsplit("<|im_start|>user", 1)[-1].lower()
    answer = kind == "ANSWER"
    return [kind == "SEARCH", answer, kind == "REFUSE", kind == "BACKTRACK", min(len(arg), 30) / 30,
            sum(w in question for w in arg) / max(1, len(arg)), len(question & set(arg)) / max(1, len(question)),
            len(new) / 5, len(again) / 5, sum(t >= 0.99 for t in title), max(title, default=0.0),
            max(text, default=0.0), sum(text) / len(text) if text else 0.0,
            sum(w in shown for w in arg) / max(1, len(arg)) if answer else 0.0, answer and len(arg) <= 5]


def _lexical_baseline(train, evals, l2: float = 1e-2, folds: int = 5) -> dict:
    """A baseline without the LM: logistic regression of the overall direction on the difference of
    `_lexical_features` (chosen - rejected, no intercept, so it is symmetric in the two sides), standardized; grouped
    CV inside the training split and the held-out accuracy."""
    import random

    import numpy as np

    def diff(examples):
        return np.array([np.subtract(_lexical_features(e.prompt, e.chosen), _lexical_features(e.prompt, e.rejected))
                         for e in examples], dtype=np.float32).reshape(len(examples), -1)

    def fit(d):
        scale = d.std(0) + 1e-4
        w = _fit_pairwise_logistic(d / scale, l2)
        return lambda e: (e / scale) @ w

    dt, de = diff(train), diff(evals)
    groups = sorted({e.group for e in train})
    random.Random(0).shuffle(groups)
    cv = []
    for f in range(folds):
        held = set(groups[f::folds])
        a = [i for i, e in enumerate(train) if e.group not in held]
        b = [i for i, e in enumerate(train) if e.group in held]
        if a and b:
            cv.append(_pair_accuracy(fit(dt[a])(dt[b])))
    return {"features": "action kind, argument/question overlap, new/repeated passages, title/text overlap of the "
                        "new passages with the question, answer words in the shown passages",
            "cv_overall_accuracy": round(float(np.mean(cv)), 4),
            "eval_overall_accuracy": round(_pair_accuracy(fit(dt)(de)), 4) if evals else None}


def _head_table(metrics) -> dict:
    return {k: {"train_pairs": h.train_pairs, "eval_pairs": h.eval_pairs,
                "eval_accuracy": None if h.accuracy is None else round(h.accuracy, 4),
                "eval_loss": None if h.loss is None else round(h.loss, 4)} for k, h in metrics.heads.items()}


def evaluate_models(db: str, args: argparse.Namespace) -> dict:
    """Encoder choice, the full model, single-signal ablations and a total-return single head (see the docstring)."""
    import torch

    from evorag_core.config import PolicyConfig, PreferenceConfig
    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.preference import (POOLINGS, FeatureCache, PrefixEncoder, encode_examples, examples_from_pairs,
                                        fit_preference_model, metrics_for, split_examples)
    from evorag_core.env.signals import SIGNAL_NAMES
    from evorag_core.store import open_store

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    margin = 0.3
    with open_store(db) as store:
        pairs = [p for p in store.list_pairs(source="rollout", limit=None)
                 if args.include_discarded or p.status != "discarded"]
        stages: dict[str, int] = {}
        for e in store.list_episodes(limit=1_000_000):
            stages[e.stage] = stages.get(e.stage, 0) + 1
    examples, skipped = examples_from_pairs(pairs, margin, observation=not args.no_observation)
    if len(examples) < 10:
        raise SystemExit(f"only {len(examples)} pairs with margin >= {margin}; roll out more questions first")
    train, evals = split_examples(examples, 0.2, 0)
    layers = [int(x) for x in args.layers.split(",")]
    specs = [(layer, pooling) for layer in layers for pooling in POOLINGS]
    backend = TransformersBackend(PolicyConfig(device="cpu", threads=args.threads), args.home)
    encoder = PrefixEncoder.from_backend(backend, specs)
    cache = FeatureCache(args.home / "cache" / "preference_features.safetensors")
    t0 = time.perf_counter()
    tc, tr = encode_examples(encoder, train, cache)
    ec, er = encode_examples(encoder, evals, cache)
    encode_s = time.perf_counter() - t0
    base = PreferenceConfig()
    choice = []
    for j, (layer, pooling) in enumerate(specs):
        cfg = PreferenceConfig(**{**base.__dict__, "layer": layer, "pooling": pooling})
        cv = _cv_accuracy(tc[:, j], tr[:, j], train, cfg)
        model = fit_preference_model(tc[:, j], tr[:, j], train, cfg)
        m = metrics_for(model, (tc[:, j], tr[:, j]), (ec[:, j], er[:, j]), train, evals)
        choice.append({"layer": layer, "pooling": pooling, "cv_overall_accuracy": round(cv, 4),
                       "eval_overall_accuracy": round(m.overall_accuracy, 4)})
        print(choice[-1], file=sys.stderr)
    best = max(range(len(specs)), key=lambda j: choice[j]["cv_overall_accuracy"])
    layer, pooling = specs[best]
    l2_choice = {}
    for l2 in (0.01, 0.1, 1.0):
        c = PreferenceConfig(**{**base.__dict__, "layer": layer, "pooling": pooling, "l2": l2})
        l2_choice[str(l2)] = round(_cv_accuracy(tc[:, best], tr[:, best], train, c), 4)
    l2 = float(max(l2_choice, key=l2_choice.get))
    cfg = PreferenceConfig(**{**base.__dict__, "layer": layer, "pooling": pooling, "l2": l2})
    X = (tc[:, best], tr[:, best]), (ec[:, best], er[:, best])
    combiners = {}
    for name, folds, nonneg in COMBINERS:
        c = PreferenceConfig(**{**cfg.__dict__, "combine_folds": folds, "combine_nonnegative": nonneg})
        model = fit_preference_model(*X[0], train, c)
        combiners[name] = {"cv_overall_accuracy": round(_cv_accuracy(*X[0], train, c), 4),
                           "eval_overall_accuracy": round(metrics_for(model, X[0], X[1], train, evals).overall_accuracy, 4),
                           "combine_folds": folds, "combine_nonnegative": nonneg}
        print(name, combiners[name], file=sys.stderr)
    chosen_combiner = max(combiners, key=lambda k: combiners[k]["cv_overall_accuracy"])
    cfg = PreferenceConfig(**{**cfg.__dict__, "combine_folds": combiners[chosen_combiner]["combine_folds"],
                              "combine_nonnegative": combiners[chosen_combiner]["combine_nonnegative"]})

    def run(heads, hidden=0):
        c = PreferenceConfig(**{**cfg.__dict__, "hidden": hidden})
        model = fit_preference_model(*X[0], train, c, heads=heads, model_id=backend.model_id)
        return model, metrics_for(model, X[0], X[1], train, evals)

    full_model, full = run(SIGNAL_NAMES)
    full_model.metrics = full.to_dict()
    full_model.save(args.home / "bench_preference_model")
    _, full_hidden = run(SIGNAL_NAMES, hidden=64)
    ablation = {}
    for k in SIGNAL_NAMES:
        if full.heads[k].train_pairs == 0:
            ablation[k] = {"train_pairs": 0, "note": "the signal never differs between the branches of a pair"}
            continue
        _, m = run((k,))
        h = m.heads[k]
        ablation[k] = {"train_pairs": h.train_pairs, "eval_pairs": h.eval_pairs,
                       "eval_accuracy": None if h.accuracy is None else round(h.accuracy, 4),
                       "eval_loss": None if h.loss is None else round(h.loss, 4),
                       "overall_eval_accuracy_ranking_by_this_head": round(m.overall_accuracy, 4)}
    _, total = run(("total",))
    varying = [k for k, h in full.heads.items() if h.eval_pairs > 0]
    kinds = {}
    for e in examples:
        key = f"{e.chosen.split(':')[0]}>{e.rejected.split(':')[0]}"
        kinds[key] = kinds.get(key, 0) + 1
    return {
        "pairs": {"stored_rollout_pairs": len(pairs), "episodes_by_stage": stages,
                  "with_margin_ge_0.3": len(examples), "skipped": skipped,
                  "train": len(train), "eval": len(evals), "train_questions": len({e.group for e in train}),
                  "eval_questions": len({e.group for e in evals}), "action_kinds_chosen>rejected": kinds},
        "encoder_choice": {"specs": choice, "chosen": {"layer": layer, "pooling": pooling},
                           "l2_cv_overall_accuracy": l2_choice, "chosen_l2": l2,
                           "rule": "best mean overall accuracy over 5 grouped folds of the training split "
                                   "(layer/pooling at the default l2 first, then l2, then the combiner)",
                           "combiners": combiners, "chosen_combiner": chosen_combiner,
                           "encode_seconds": round(encode_s, 1)},
        "full_model": {"config": cfg.__dict__, "heads": _head_table(full),
                       "overall_eval_accuracy": round(full.overall_accuracy, 4),
                       "overall_eval_loss": round(full.overall_loss, 4),
                       "overall_train_accuracy": round(full.train_overall_accuracy, 4),
                       "combine": {k: round(v, 4) for k, v in full.combine.items()}},
        "full_model_hidden64": {"heads": _head_table(full_hidden),
                                "overall_eval_accuracy": round(full_hidden.overall_accuracy, 4)},
        "single_signal_ablation": ablation,
        "single_head_on_total_return": {"eval_accuracy": round(total.overall_accuracy, 4),
                                        "eval_loss": round(total.overall_loss, 4)},
        "overall_from_true_head_signs": _sign_ceiling(train, evals),
        "head_accuracy_by_conflict": _head_accuracy_by_conflict(full_model, *X[1], evals),
        "head_accuracy_ci95_by_question": _head_accuracy_ci(full_model, *X[1], evals),
        "head_accuracy_grouped_cv_train": _cv_head_accuracy(*X[0], train, cfg),
        "lexical_baseline": _lexical_baseline(train, evals),
        "targets": {
            "every_varying_head_above_50": all((full.heads[k].accuracy or 0) > 0.5 for k in varying),
            "varying_heads": varying,
            "overall_at_least_70": full.overall_accuracy >= TARGETS["overall_accuracy_min"],
        },
        "model_seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--questions", default="0:64", help="training slice START:STOP of the data file (default 0:64)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--t-max", type=int, default=5)
    ap.add_argument("--siblings", type=int, default=4)
    ap.add_argument("--max-states", type=int, default=3)
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("EVORAG_HOME", ROOT / ".evorag")))
    ap.add_argument("--db", default=None, help="default: sqlite:///<home>/bench_preference.db")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "preference.json")
    ap.add_argument("--skip-rollout", action="store_true", help="only train/evaluate on the pairs already stored")
    ap.add_argument("--include-discarded", action="store_true",
                    help="also use discarded pairs (e.g. those bench/learning.py set aside as its held-out pairs)")
    ap.add_argument("--rollout-only", action="store_true", help="only roll out (stats are kept beside the database)")
    ap.add_argument("--layers", default="6,12,16,20,24,28,30", help="layers compared for the encoder choice")
    ap.add_argument("--no-observation", action="store_true",
                    help="x = the reply line alone (the ablation of PreferenceConfig.observation)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads of the encoding pass")
    ap.add_argument("--stage", choices=["discovery", "refinement"], default="discovery", help="the rollouts' stage")
    ap.add_argument("--corpus", choices=["per-question", "pooled"], default="pooled",
                    help="the rollouts' corpus: each question's own passages, or all questions' of --data pooled")
    ap.add_argument("--passage-chars", type=int, default=0,
                    help="policy.passage_chars of the rollouts' prompts (0: the config default)")
    args = ap.parse_args()
    args.home = args.home.resolve()
    args.home.mkdir(parents=True, exist_ok=True)
    db = args.db or f"sqlite:///{args.home / 'bench_preference.db'}"
    result: dict = {
        "settings": {"data": str(args.data), "slice": args.questions, "workers": args.workers,
                     "threads_per_worker": 1, "t_max": args.t_max, "siblings": args.siblings,
                     "max_states": args.max_states, "stage": args.stage, "corpus": args.corpus,
                     "passage_chars": args.passage_chars or "config default",
                     "observation": "x = the reply line alone (--no-observation)" if args.no_observation else
                                    "x = reply line + the passages a SEARCH candidate retrieved (PreferenceConfig."
                                    "observation); pairs stored without observations fall back to the reply line",
                     "policy": "embedded SmolLM2-135M-Instruct (float32, CPU)", "db": db,
                     "include_discarded": args.include_discarded,
                     "note": "the rollout settings describe this script's own rollouts; with --skip-rollout the pairs "
                             "are whatever the store holds (see pairs.episodes_by_stage)"},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
    }
    runs_file = args.home / "bench_preference_rollouts.json"
    runs = json.loads(runs_file.read_text()) if runs_file.is_file() else []
    if not args.skip_rollout:
        run = {"slice": args.questions, **run_rollouts(args, db)}
        runs.append(run)
        runs_file.write_text(json.dumps(runs, indent=1))
        print(json.dumps(run, indent=1), file=sys.stderr)
    result["rollout_runs"] = runs
    if args.rollout_only:
        return
    result.update(evaluate_models(db, args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
