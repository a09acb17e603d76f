"""The studio's loop run for several rounds, and its held-out learning curve (issue #43 item 2). Writes JSON and a
plotly figure.

    python -m bench.learning_curve [--data FILE] [--train 0:60] [--rounds 3] [--eval 100:200] [--method agent]
                                   [--objective dpo] [--pairs 64] [--max-steps 24] [--lr 5e-5] [--workers 2]
                                   [--threads 1] [--model embedded] [--set KEY=VALUE ...] [--home DIR]
                                   [--out bench/results/learning_curve.json]
    python -m bench.learning_curve --from-store --home DIR --out OUT.json   # the curve of rounds already run
    python -m bench.learning_curve --source answer --pairs 100000 --max-steps 0 --lr 1e-3 ...  # reader rounds

Each round is what the studio and the CLI do, each step in its own `evorag` process on one store under --home:
1. rollouts of the live model (the live adapter, else the base model) on the round's share of the --train questions
   (`evorag rollout --adapter LIVE`; the training questions are cut into --rounds consecutive chunks, so every round
   rolls out questions no earlier round saw, with the model the earlier rounds made);
2. a round (`evorag train --objective OBJ`, reference = the live adapter) run by `evorag worker --drain`; with
   `--source answer` the round trains on answer pairs instead (`evorag pairs answers --states all` over the round's
   episodes, then `train --source answer`: the reader round of docs/answers.md), rolled out with 2 siblings at 1
   state a question (its states are what it needs);
3. the gate: the worker queues the new adapter's evaluation against the live model on the --eval slice (the
   `[promotion]` settings: method, metric F1, alpha 0.05, paired bootstrap) and, draining the queue, runs it next;
   a passing adapter goes live (`promotion.auto`), a failing one stays staged and the next round starts from the
   same live model.
The curve is read back from the store's promotion reports (`--from-store` does only this): per round the candidate's
held-out F1 and EM with their 95 % bootstrap intervals, its mean steps, what it was compared with, the paired
difference with its interval and p, the verdict and the model live afterwards; round 0 is the base model (the first
report's other side). Finished rounds are kept in <home>/learning_curve_state.json: a re-run goes on at the next.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "benchmarks" / "hotpotqa_dev300.jsonl"

__all__ = ["curve_rows", "main"]


def _slice(text: str) -> tuple[int, int]:
    start, _, stop = text.partition(":")
    a, b = int(start or 0), int(stop)
    if b <= a:
        raise SystemExit(f"empty slice {text!r}: START:STOP with STOP > START")
    return a, b


def chunks(train: tuple[int, int], rounds: int) -> list[tuple[int, int]]:
    """The training questions cut into `rounds` consecutive (offset, limit) chunks, the first ones one longer when
    the slice does not divide evenly."""
    a, b = train
    size, extra = divmod(b - a, rounds)
    if size == 0:
        raise SystemExit(f"{b - a} training questions cannot feed {rounds} rounds")
    out, at = [], a
    for r in range(rounds):
        n = size + (1 if r < extra else 0)
        out.append((at, n))
        at += n
    return out


def _side(side: Mapping[str, Any]) -> dict[str, Any]:
    s = side["summary"]
    return {"name": side["name"], "f1": s.get("f1"), "em": s.get("em"), "steps": s.get("avg_steps"),
            "n": s.get("n"), "f1_ci": list(side.get("f1_ci") or []), "em_ci": list(side.get("em_ci") or [])}


def curve_rows(reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The learning curve from promotion reports in evaluation order: each {adapter, round_id, passed, verdict,
    report} (a store `Promotion` as a mapping). Round 0 is the first report's other side (the base model when
    nothing was live); round r the r-th evaluated adapter, with the model live after its verdict (the candidate when
    it passed, else the one live before)."""
    if not reports:
        return []
    first = reports[0]["report"]["against"]
    rows = [{"round": 0, "adapter": first["name"], **_side(first), "against": None, "diff": None, "p": None,
             "verdict": "base" if first["name"] == "base" else "live before the first round", "passed": None,
             "live_after": first["name"]}]
    live = first["name"]
    for r, rep in enumerate(reports, start=1):
        report = rep["report"]
        metric = report["setting"]["metric"]
        cmp_ = report["comparison"].get(metric) or {}
        if rep["passed"]:
            live = rep["adapter"]
        rows.append({"round": r, "adapter": rep["adapter"], "round_id": rep.get("round_id"),
                     **_side(report["candidate"]), "against": _side(report["against"]),
                     "diff": cmp_.get("diff"), "diff_ci": [cmp_.get("ci_low"), cmp_.get("ci_high")],
                     "p": cmp_.get("p_value"),
                     "verdict": rep["verdict"], "passed": rep["passed"], "live_after": live})
    return rows


def figure(rows: Sequence[Mapping[str, Any]], title: str) -> Any:
    """F1 and EM of each round's candidate with its 95 % interval (green: passed the gate), the live model's score
    after each round as a step line, and mean steps below."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=("held-out F1", "held-out EM", "mean steps"))
    x = [r["round"] for r in rows]
    colour = ["#1f77b4" if r["round"] == 0 else "#2ca02c" if r["passed"] else "#d62728" if r["passed"] is False
              else "#7f7f7f" for r in rows]
    score = {r["adapter"]: r for r in rows}
    for i, key in enumerate(("f1", "em"), start=1):
        y = [r[key] for r in rows]
        ci = [r[f"{key}_ci"] or [v, v] for r, v in zip(rows, y)]
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers", name=f"candidate {key.upper()} (95 % CI)", showlegend=i == 1,
            marker=dict(color=colour, size=10), hovertext=[f"{r['adapter']}: {r['verdict']}" for r in rows],
            error_y=dict(type="data", symmetric=False, array=[hi - v for (lo, hi), v in zip(ci, y)],
                         arrayminus=[v - lo for (lo, hi), v in zip(ci, y)])), row=i, col=1)
        fig.add_trace(go.Scatter(x=x, y=[score[r["live_after"]][key] for r in rows], mode="lines",
                                 line=dict(shape="hv", dash="dash", color="#1f77b4"), name="live model",
                                 showlegend=i == 1), row=i, col=1)
    fig.add_trace(go.Scatter(x=x, y=[r["steps"] for r in rows], mode="lines+markers", marker=dict(color=colour),
                             name="steps", showlegend=False), row=3, col=1)
    fig.update_yaxes(rangemode="tozero", row=3, col=1)  # a few hundredths of a step must not look like a trend
    fig.update_layout(title=title, xaxis3_title="round (0: base)", xaxis3=dict(dtick=1))
    return fig


def _env(threads: int) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1")


def _cli(args: argparse.Namespace, log: Path, *argv: str, threads: int) -> dict[str, Any] | None:
    """One `evorag` command on the bench's home and store, with the bench's settings; its stdout's JSON if any."""
    cmd = [sys.executable, "-m", "evorag_core.cli.main", *argv, "--home", str(args.home)]
    for s in _settings(args):
        cmd += ["--set", s]
    with log.open("a") as err:
        err.write(f"$ {' '.join(cmd)}\n")
        err.flush()
        done = subprocess.run(cmd, cwd=ROOT, env=_env(threads), stdout=subprocess.PIPE, stderr=err, text=True)
    if done.returncode != 0:
        raise SystemExit(f"`evorag {argv[0]}` exited {done.returncode}; its log: {log}")
    try:
        return json.loads(done.stdout) if done.stdout.strip() else None
    except json.JSONDecodeError:
        return None


def _settings(args: argparse.Namespace) -> list[str]:
    a, b = _slice(args.eval)
    return [f"policy.model={args.model}", f"promotion.data={Path(args.data).resolve()}",
            f"promotion.questions={a}:{b}", f"promotion.method={args.method}", "promotion.evaluate=true",
            "promotion.auto=true", f"promotion.workers={args.workers}", f"train.lr={args.lr}", *args.overrides]


def _store(args: argparse.Namespace):
    from evorag_core.store import open_store

    return open_store(f"sqlite:///{args.home / 'evorag.db'}")


def _reports(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = sorted(_store(args).list_promotions(), key=lambda p: p.id)
    return [{"adapter": p.adapter, "round_id": p.round_id, "passed": p.passed, "verdict": p.verdict,
             "report": p.report} for p in rows]


def _live_model(live: Any) -> list[str]:
    """`evorag rollout` arguments that roll out with the live adapter (by name: rollout applies it in its role)."""
    return [] if live is None else ["--adapter", live.name]


def run_round(args: argparse.Namespace, r: int, chunk: tuple[int, int]) -> dict[str, Any]:
    """Round r: rollouts of the live model on its chunk, a round, its evaluation; minutes per phase."""
    log = args.home / "logs" / f"learning_curve_round{r}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    live = _store(args).active_adapter()
    minutes: dict[str, float] = {}
    t = time.perf_counter()
    rollout = ["rollout", "--data", str(args.data), "--offset", str(chunk[0]), "--limit", str(chunk[1]),
               "--workers", str(args.workers), "--threads", str(args.threads), "--json"]
    if args.source == "answer":
        rollout += ["--siblings", "2", "--max-states", "1"]
    _cli(args, log, *rollout, *_live_model(live), threads=args.threads)
    if args.source == "answer":  # every reader state of the stored episodes, one pair each
        _cli(args, log, "pairs", "answers", "--data", str(args.data), "--states", "all", "--json",
             threads=args.threads)
    minutes["rollouts"] = round((time.perf_counter() - t) / 60, 2)
    with _store(args) as store:
        known = {j.id for j in store.list_rounds(limit=10_000)}
    source = ["--source", "answer"] if args.source == "answer" else []
    steps = ["--max-steps", str(args.max_steps)] if args.max_steps > 0 else []  # 0: every claimed pair, epochs
    _cli(args, log, "train", "--objective", args.objective, *source, "--pairs", str(args.pairs), *steps, "--json",
         threads=1)
    # one worker runs the round and then the evaluation job the round queued (the gate), then exits
    _cli(args, log, "worker", "--drain", threads=args.workers * args.threads)
    with _store(args) as store:
        jobs = [j for j in store.list_rounds(limit=10_000) if j.id not in known]
    for job in sorted(jobs, key=lambda j: j.id):  # phase minutes from the jobs' own start and finish
        if job.started_at and job.finished_at:
            phase = "evaluation" if job.objective == "evaluate" else "round"
            seconds = (job.finished_at - job.started_at).total_seconds()
            minutes[phase] = round(minutes.get(phase, 0.0) + seconds / 60, 2)
    return {"round": r, "questions": list(chunk), "live_before": live.name if live else "base", "minutes": minutes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--train", default="0:60", help="START:STOP of the questions rolled out, cut into --rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--eval", default="100:200", help="START:STOP of the gate's held-out questions")
    ap.add_argument("--method", choices=["agent", "fixed-k"], default="agent")
    ap.add_argument("--objective", choices=["dpo", "grpo", "ppo"], default="dpo")
    ap.add_argument("--source", choices=["rollout", "answer"], default="rollout",
                    help="DPO on the rollouts' step pairs, or on answer pairs of their reader states")
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--max-steps", type=int, default=24, help="a round's optimiser steps (0: epochs over every pair)")
    ap.add_argument("--lr", default="5e-5")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--home", type=Path, default=ROOT / ".evorag" / "learning_curve")
    ap.add_argument("--from-store", action="store_true", help="only read the curve of the rounds in --home's store")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "learning_curve.json")
    args = ap.parse_args(argv)
    args.home = args.home.resolve()
    args.home.mkdir(parents=True, exist_ok=True)

    state_path = args.home / "learning_curve_state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {"rounds": []}
    if not args.from_store:
        from tqdm import tqdm

        plan = chunks(_slice(args.train), args.rounds)
        with tqdm(total=args.rounds, initial=len(state["rounds"]), desc="rounds", unit="round") as bar:
            for r in range(len(state["rounds"]) + 1, args.rounds + 1):
                state["rounds"].append(run_round(args, r, plan[r - 1]))
                state_path.write_text(json.dumps(state, indent=1))
                bar.update(1)

    rows = curve_rows(_reports(args))
    for row, done in zip(rows[1:], state["rounds"]):
        row["minutes"] = done["minutes"]
        row["train_questions"] = done["questions"]
    kind = f"{args.objective.upper()} rounds" + (" on answer pairs" if args.source == "answer" else "")
    title = f"Held-out learning curve: {kind}, gate on {args.method} {args.eval}"
    from bench.figures import save_figure
    from bench.record import settings, write_json

    result = {"settings": settings(args),
              "curve": rows, "figure": save_figure(figure(rows, title), args.out.with_suffix(""), height=800)}
    write_json(args.out, result)
    for row in rows:
        ci = row["f1_ci"] or ["-", "-"]
        print(f"round {row['round']}: {row['adapter']:<12} F1 {row['f1']:.3f} [{ci[0]}, {ci[1]}]  EM {row['em']:.3f}  "
              f"steps {row['steps']:.2f}  {row['verdict']}" + (f"  (diff {row['diff']:+.3f}, p {row['p']})"
                                                               if row["diff"] is not None else ""))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
