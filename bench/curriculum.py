"""The two-stage curriculum measured: `evorag train --curriculum` run for both stages on one data set, against a
single-stage run with the same number of rounds and against the base policy, on questions disjoint from both the
training and the dev questions. Prints the figures, writes JSON and a plotly figure of the dev-return curve.

    python -m bench.curriculum [--data FILE] [--dev 200:216] [--train 0:64] [--eval 100:200] [--rounds 8]
                               [--train-per-round 8] [--single-stage discovery] [--corpus pooled|per-question]
                               [--model embedded] [--threads 2] [--workers 2] [--max-steps 12] [--set KEY=VALUE ...]
                               [--home DIR] [--out bench/results/curriculum.json]

Phases (each resumable; finished phases are kept in <home>/curriculum_state.json, so a re-run continues):
1. curriculum: `evorag train --curriculum --state <home>/curriculum/state.jsonl` in its own process and home (its
   own store and adapter folders; the model, embedding and index caches are shared with the other phases). Its data
   file is the --dev slice followed by the --train slice, so the curriculum's first `--dev` questions (its dev set)
   are the dev slice; each round rolls out the next --train-per-round training questions. It stops when both stages
   have run, or after --rounds rounds. The `--state` file keeps every finished round, so an interrupted run goes on
   at the next round (training/curriculum.py).
2. single: the same command with `--single-stage STAGE` (default discovery) for exactly as many rounds as the
   curriculum ran, in another home and store: same questions per round, same dev set, no switch.
3. evaluation: greedy episodes of the base policy, the curriculum's final adapter and the single-stage run's final
   adapter on the --eval slice (env T_max = --eval-t-max), the policies shared out over at most `--workers` processes
   (bench/adapter_eval.py, shared with bench/learning.py; a policy whose results are complete is not run again);
   EM, F1, avg steps, refusal rate, and the paired bootstrap (10,000 resamples, as `evorag compare`) of curriculum vs
   base, single vs base and curriculum vs single.
4. figure: the dev-return curve per round of both runs (mean dev return and its EMA; dev F1 below), the stage switch
   marked; HTML, and PNG through kaleido (bench/figures.py) where it works.
The JSON has: `curriculum.summary.switch` (round, EMA, improvement, stale) with `controller` (EMA alpha, epsilon,
patience), each run's `dev_curve`, `eval`, `figure` and the per-phase minutes.

The dev return is measured with the current stage's weights (SPEC §3), so its scale changes at the switch; dev EM and
F1 are stage-free.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from evorag_core.config import cache_dir
from bench.adapter_eval import evaluate_adapter, parse_slice, run_processes, summarize_against, write_slice
from bench.record import settings, write_json

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "benchmarks" / "hotpotqa_dev300.jsonl"
ARMS = ("curriculum", "single")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Config overrides every phase shares (the --set values come last and win)."""
    half = max(args.batch // 2, 1)  # DPO runs chosen + rejected: half the batch, accumulated (as bench/learning.py)
    settings: dict[str, Any] = {
        "policy.model": args.model, "policy.device": "cpu", "policy.threads": args.threads,
        "policy.passage_chars": args.passage_chars, "answer.passage_chars": args.answer_chars,
        "env.corpus": args.corpus, "env.t_max": args.t_max, "rollout.t_max": args.t_max,
        "rollout.siblings": args.siblings, "rollout.max_states": args.max_states, "train.max_length": args.max_length,
        "train.batch_size": half, "train.grad_accum": max(args.batch // half, 1), "train.epochs": args.epochs,
        "train.lr": args.lr, "train.dtype": args.dtype, "train.lease_seconds": 600,
    }
    for item in args.overrides:
        key, _, value = item.partition("=")
        settings[key.strip()] = value.strip()
    return settings


def _config(args: argparse.Namespace, **extra: Any):
    from evorag_core.config import apply_overrides, load_config

    return apply_overrides(load_config(), {**_settings(args), **extra})


def _env(args: argparse.Namespace, threads: int) -> dict[str, str]:
    """Every phase's processes share one cache folder (the model, embeddings and indexes: `config.cache_dir`):
    $EVORAG_CACHE_DIR if set, else the bench's home."""
    return dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT),
                OMP_NUM_THREADS=str(threads), EVORAG_CACHE_DIR=str(cache_dir(args.home)))


def _arm_home(args: argparse.Namespace, arm: str) -> Path:
    """The arm's own home (store, adapters, preference models); the caches are shared (`_env`)."""
    home = args.home / arm
    home.mkdir(parents=True, exist_ok=True)
    return home


def curriculum_argv(args: argparse.Namespace, arm: str, rounds: int) -> list[str]:
    """The `evorag train --curriculum` command line of one arm (also printed for the record)."""
    home = args.home / arm
    (dl, dh) = parse_slice(args.dev)
    argv = ["-m", "evorag_core.cli.main", "train", "--curriculum", "--json", "--home", str(home),
            "--db", f"sqlite:///{home / 'evorag.db'}", "--data", str(args.home / "curriculum_data.jsonl"),
            "--dev", str(dh - dl), "--train-questions", str(args.train_per_round), "--rounds", str(rounds),
            "--state", str(home / "state.jsonl")]
    if arm == "single":
        argv += ["--single-stage", args.single_stage]
    if args.corpus == "pooled":
        argv += ["--corpus-from", str(args.data)]
    if args.max_steps:
        argv += ["--max-steps", str(args.max_steps)]
    return argv + [a for k, v in _settings(args).items() for a in ("--set", f"{k}={v}")]


def phase_arm(args: argparse.Namespace, arm: str, rounds: int) -> dict[str, Any]:
    """Run (or resume) one arm's curriculum command; its summary, exit code, minutes and adapter path."""
    from evorag_core.store import open_store

    home = _arm_home(args, arm)
    argv = curriculum_argv(args, arm, rounds)
    started, load0 = time.perf_counter(), os.getloadavg()[0]
    out_file, log = home / "curriculum_out.json", home / "curriculum.log"
    with out_file.open("w") as out, log.open("a") as err:
        code = subprocess.call([sys.executable, *argv], cwd=ROOT, env=_env(args, args.threads), stdout=out, stderr=err)
    text = out_file.read_text().strip()
    if not text:
        raise SystemExit(f"{arm}: `evorag train --curriculum` printed nothing (exit {code}); see {log}")
    result = json.loads(text.splitlines()[-1])
    summary = result["summary"]
    adapter_path = None
    if summary["final_adapter"]:
        with open_store(f"sqlite:///{home / 'evorag.db'}") as store:
            adapter_path = store.get_adapter(summary["final_adapter"]).path
    return {"command": "python " + " ".join(argv), "exit_code": code, "summary": summary,
            "adapter_path": adapter_path, "minutes": (time.perf_counter() - started) / 60,
            "round_minutes": [r["seconds"] / 60 for r in result["rounds"] if r.get("seconds") is not None],
            "policy_rounds": [r["policy_round"] for r in result["rounds"]],
            "load_avg_start": load0, "load_avg_end": os.getloadavg()[0]}


def eval_part(args: argparse.Namespace, names: list[str]) -> None:
    """Child process: greedy episodes of each named policy in turn (base, or an arm's final adapter as recorded in
    the state file) on the eval slice, each into its resumable JSON-lines file; one import of the model stack."""
    import torch

    from evorag_core.data.datasets import load_dataset

    cfg = _config(args, **{"env.t_max": args.eval_t_max, "policy.threads": args.eval_threads})
    torch.set_num_threads(args.eval_threads)
    source = load_dataset(args.data) if args.corpus == "pooled" else None
    state = json.loads((args.home / "curriculum_state.json").read_text())
    for name in names:
        path = None if name == "base" else state[name]["adapter_path"]
        out = args.home / f"curriculum_eval_{name}.jsonl"
        evaluate_adapter(cfg, args.home, args.eval_file, source, name, path, out)


def phase_eval(args: argparse.Namespace, state: dict[str, Any]) -> dict[str, Any]:
    """The policies' evaluations on at most --workers processes; a policy whose results file already holds every
    eval question (a re-run after an arm was redone) is read, not started again."""
    names = ["base"] + [arm for arm in ARMS if state[arm]["adapter_path"]]
    n = sum(1 for line in args.eval_file.read_text().splitlines() if line.strip())
    todo = [name for name in names if len(_results(args, name)) < n]
    started = time.perf_counter()

    def start(group: list[str]):
        def go(log: Path) -> subprocess.Popen:
            argv = [sys.executable, str(Path(__file__).resolve()), *args.argv, "--home", str(args.home),
                    "--eval-part", ",".join(group)]
            return subprocess.Popen(argv, cwd=ROOT, env=_env(args, args.eval_threads), stdout=log.open("a"),
                                    stderr=subprocess.STDOUT)
        return go

    groups = [todo[i::max(args.workers, 1)] for i in range(min(max(args.workers, 1), len(todo)))]
    run_processes([(start(g), args.home / f"curriculum_eval_{'_'.join(g)}.log") for g in groups], args.workers)
    results = {name: _results(args, name) for name in names}
    pairs = [(a, "base") for a in ARMS if a in results]
    if all(a in results for a in ARMS):
        pairs.append(("curriculum", "single"))
    out: dict[str, Any] = {"minutes": (time.perf_counter() - started) / 60, "t_max": args.eval_t_max,
                           "started": todo}
    out.update(summarize_against(results, pairs))
    return out


def _results(args: argparse.Namespace, name: str) -> list:
    from evorag_core.evaluation.runner import load_results

    path = args.home / f"curriculum_eval_{name}.jsonl"
    return load_results(path) if path.is_file() else []


def curve_figure(state: dict[str, Any], single_stage: str):
    """Dev mean return and its EMA per round for both runs (top), dev F1 (bottom); the switch marked."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("dev mean return (current stage's weights) and its EMA", "dev F1"))
    styles = {"curriculum": ("two-stage curriculum", "#1f77b4"), "single": (f"single stage ({single_stage})",
                                                                            "#ff7f0e")}
    for arm in ARMS:
        if arm not in state:
            continue
        label, color = styles[arm]
        curve = state[arm]["summary"]["dev_curve"]
        x = [p["round"] for p in curve]
        fig.add_trace(go.Scatter(x=x, y=[p["mean_return"] for p in curve], mode="lines+markers", name=label,
                                 line={"color": color}, text=[p["stage"] for p in curve],
                                 hovertemplate="round %{x} (%{text}): %{y:.4f}"), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[p["ema"] for p in curve], mode="lines", name=f"{label}: EMA",
                                 line={"color": color, "dash": "dash"}), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[p["f1"] for p in curve], mode="lines+markers", name=f"{label}: F1",
                                 line={"color": color}, showlegend=False), row=2, col=1)
    summary = state.get("curriculum", {}).get("summary", {})
    switch, controller = summary.get("switch"), summary.get("controller", {})
    title = "EVO-RAG curriculum: dev return per round"
    if switch:
        fig.add_vline(x=switch["round"] + 0.5, line={"dash": "dot", "color": "gray"})
        title += (f"<br><sup>stage switch after round {switch['round']}: EMA {switch['ema']:.3f}, "
                  f"ε {controller.get('epsilon')}, patience {controller.get('patience')}, "
                  f"α {controller.get('ema_alpha')}</sup>")
    elif summary:
        title += "<br><sup>no stage switch within the round budget</sup>"
    last = max([p["round"] for arm in ARMS if arm in state for p in state[arm]["summary"]["dev_curve"]] or [1])
    fig.update_xaxes(range=[0.5, last + 0.5], dtick=1)
    fig.update_xaxes(title_text="round", row=2, col=1)
    fig.update_layout(title=title, template="plotly_white", margin={"t": 110})
    return fig


def _print(state: dict[str, Any]) -> None:
    for arm in ARMS:
        if arm not in state:
            continue
        s = state[arm]["summary"]
        print(f"{arm}: {s['rounds']} round(s), stages {', '.join(s['stages_run'])}, {state[arm]['minutes']:.1f} min")
        for p in s["dev_curve"]:
            print(f"  round {p['round']} {p['stage']:<10} dev return {p['mean_return']:+.4f} EMA {p['ema']:+.4f} "
                  f"stale {p['stale']} F1 {p['f1']:.3f}")
        if arm == "curriculum":
            c, sw = s["controller"], s["switch"]
            print(f"  controller: alpha {c['ema_alpha']}, epsilon {c['epsilon']}, patience {c['patience']}; " +
                  (f"switch after round {sw['round']} (EMA {sw['ema']:.4f}, improvement {sw['improvement']:+.4f}, "
                   f"stale {sw['stale']})" if sw else "no switch within the budget"))
    ev = state.get("eval", {})
    for name in ("base", *ARMS):
        if name in ev:
            e = ev[name]
            line = f"{name:<11} EM {e['em']:.3f} F1 {e['f1']:.3f} steps {e['avg_steps']:.2f} (n {e['n']})"
            for other in ("base", "single"):
                cmp = e.get(f"vs_{other}")
                if cmp:
                    line += (f" | vs {other}: F1 {cmp['f1']['diff']:+.3f} p {cmp['f1']['p_value']:.3f}, "
                             f"steps {cmp['steps']['diff']:+.2f} p {cmp['steps']['p_value']:.3f}")
            print(line)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA, help="data file (default: HotpotQA dev300 of shared/)")
    ap.add_argument("--dev", default="200:216", help="dev slice START:STOP (the curriculum's dev questions)")
    ap.add_argument("--train", default="0:64", help="training slice START:STOP (rolled out --train-per-round a round)")
    ap.add_argument("--eval", default="100:200", help="evaluation slice START:STOP (disjoint from --dev and --train)")
    ap.add_argument("--rounds", type=int, default=8, help="the curriculum's round budget")
    ap.add_argument("--train-per-round", type=int, default=8)
    ap.add_argument("--single-stage", choices=["discovery", "refinement"], default="discovery",
                    help="the stage of the single-stage run")
    ap.add_argument("--corpus", choices=["per-question", "pooled"], default="pooled",
                    help="retrieval corpus: all passages of --data pooled (default), or each question's own")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of a curriculum process (it runs alone)")
    ap.add_argument("--workers", type=int, default=2, help="parallel evaluation processes")
    ap.add_argument("--eval-threads", type=int, default=1, help="torch threads per evaluation process")
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4, help="effective DPO batch (half, accumulated twice)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=12, help="optimiser steps per round at most (0: no cap)")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto")
    ap.add_argument("--passage-chars", type=int, default=120)
    ap.add_argument("--answer-chars", type=int, default=0, help="the reader's passage cut (0: --passage-chars)")
    ap.add_argument("--t-max", type=int, default=5, help="T_max of the rollouts and dev episodes")
    ap.add_argument("--eval-t-max", type=int, default=8, help="T_max of the evaluation episodes")
    ap.add_argument("--siblings", type=int, default=4)
    ap.add_argument("--max-states", type=int, default=3)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="any further config override (e.g. curriculum.patience=3), for every phase")
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("EVORAG_HOME", ROOT / ".evorag")))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "curriculum.json",
                    help="JSON; the figure goes next to it (same name, .html and .png)")
    ap.add_argument("--eval-part", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.home = args.home.resolve()
    args.home.mkdir(parents=True, exist_ok=True)
    args.data = args.data.resolve()
    args.eval_file = args.home / "curriculum_eval.jsonl"
    if args.eval_part:
        return eval_part(args, args.eval_part.split(","))

    dev, train, ev = parse_slice(args.dev), parse_slice(args.train), parse_slice(args.eval)
    for (a, b), (c, d), what in ((dev, train, "--dev/--train"), (dev, ev, "--dev/--eval"), (train, ev, "--train/--eval")):
        if max(a, c) < min(b, d):
            raise SystemExit(f"{what} overlap")
    state_file = args.home / "curriculum_state.json"
    state: dict[str, Any] = json.loads(state_file.read_text()) if state_file.is_file() else {}

    def save() -> None:
        state_file.write_text(json.dumps(state, indent=2, default=str))
        write_json(args.out, {"settings": settings(args, lambda k: k in ("eval_part", "argv")),
                              "config": _settings(args), **state}, indent=2)

    for arm in ARMS:
        if arm not in state:
            write_slice(args.data, args.home / "curriculum_data.jsonl", *dev, train)
            rounds = args.rounds if arm == "curriculum" else state["curriculum"]["summary"]["rounds"]
            state[arm] = phase_arm(args, arm, rounds)
            state.pop("eval", None)  # an arm (re)run: its adapter may be another; evaluate it again
            (args.home / f"curriculum_eval_{arm}.jsonl").unlink(missing_ok=True)
            save()
    if "eval" not in state or not {a for a in ARMS if state[a]["adapter_path"]} <= set(state["eval"]):
        write_slice(args.data, args.eval_file, *ev)
        state["eval"] = phase_eval(args, state)
        save()
    state["figure"] = _save_figure(state, args)
    save()
    _print(state)


def _save_figure(state: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from bench.figures import save_figure

    return save_figure(curve_figure(state, args.single_stage), args.out.with_suffix(""))


if __name__ == "__main__":
    main()
