"""An ablation's results as the paper reports them (Tables 4 and 6): one row per variant (and the base model) with
EM, F1, avg steps, support recall and refusal accuracy, each compared with the reference row (time-dynamic / Full)
by a paired bootstrap over the evaluation questions (`evaluation.runner.compare_results`, as `evorag compare`).

`rows(state)` computes them; `markdown(rows)` the table, `write_report(state, out)` the table (ablation.md), the JSON
(ablation.json) and a plotly figure (ablation.html, and ablation.png through kaleido; when the PNG export fails, the
HTML is still written and the JSON says why).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from evorag_core.evaluation.runner import compare_results, load_results
from evorag_core.metrics import paired_bootstrap

__all__ = ["METRICS", "rows", "markdown", "timing", "figure", "write_report"]

# (key in a row, column title, per-question field compared by the bootstrap)
METRICS: tuple[tuple[str, str], ...] = (
    ("em", "EM"), ("f1", "F1"), ("avg_steps", "Avg steps"), ("support_recall", "Support recall"),
    ("refusal_accuracy", "Refusal acc."),
)
_BOOTSTRAP_KEY = {"em": "em", "f1": "f1", "avg_steps": "steps", "refusal_accuracy": "refusal_accuracy"}


def _support_p(a, b, resamples: int) -> float | None:
    by_id = {r.question_id: r for r in b}
    pairs = [(x.support_recall, by_id[x.question_id].support_recall) for x in a if x.question_id in by_id]
    pairs = [(u, v) for u, v in pairs if u is not None and v is not None]
    return paired_bootstrap([u for u, _ in pairs], [v for _, v in pairs], resamples, 0).p_value if pairs else None


def rows(state: dict[str, Any], resamples: int = 10_000) -> list[dict[str, Any]]:
    """One row per evaluated policy: the base model, then the variants in plan order; `p` holds the paired-bootstrap
    p of each metric against the reference variant (None on the reference row itself)."""
    plan = state["plan"]
    reference = plan["reference"]
    entries = [("base", "base (no training)", state.get("base"))]
    entries += [(v["name"], v["name"], (state["variants"].get(v["name"]) or {}).get("eval")) for v in plan["variants"]]
    ref_eval = (state["variants"].get(reference) or {}).get("eval")
    ref_results = load_results(Path(ref_eval["results"])) if ref_eval else None
    out = []
    for name, label, ev in entries:
        variant = state["variants"].get(name, {})
        row: dict[str, Any] = {"name": name, "label": label, "reference": name == reference,
                               "pairs": (variant.get("store") or {}).get("pairs"),
                               "round": variant.get("round"), "evaluated": ev is not None}
        if ev is None:
            out.append(row)
            continue
        row.update({k: ev.get(k) for k, _ in METRICS})
        row.update(n=ev["n"], refusal_precision=ev.get("refusal_precision"), refusal_recall=ev.get("refusal_recall"))
        row["p"] = None
        if ref_results is not None and name != reference:
            results = load_results(Path(ev["results"]))
            cmp = compare_results(results, ref_results, resamples=resamples, seed=0)
            row["p"] = {k: (cmp[b]["p_value"] if b in cmp else None) for k, b in _BOOTSTRAP_KEY.items()}
            row["p"]["support_recall"] = _support_p(results, ref_results, resamples)
            row["diff"] = {k: cmp[b]["diff"] for k, b in _BOOTSTRAP_KEY.items() if b in cmp}
        out.append(row)
    return out


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return "n/a"
    text = f"{value:.2f}" if key == "avg_steps" else f"{value:.3f}"
    p = (row.get("p") or {}).get(key)
    return f"{text} (p={p:.3f})" if p is not None else text


def markdown(table: list[dict[str, Any]], reference: str, resamples: int = 10_000) -> str:
    head = ["Variant", *(title for _, title in METRICS), "Pairs"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table:
        label = f"**{row['label']}** (reference)" if row["reference"] else row["label"]
        if not row["evaluated"]:
            error = (row.get("round") or {}).get("error") or "not evaluated yet"
            lines.append(f"| {label} | " + " | ".join(["n/a"] * len(METRICS)) + f" | {row.get('pairs')} |")
            lines.append(f"|  ↳ {error[:120]} |" + " |" * len(METRICS))
            continue
        pairs = "" if row["pairs"] is None else str(row["pairs"])
        lines.append(f"| {label} | " + " | ".join(_cell(row, k) for k, _ in METRICS) + f" | {pairs} |")
    n = next((r["n"] for r in table if r.get("n")), 0)
    lines.append("")
    lines.append(f"p: paired bootstrap ({resamples:,} resamples) of each row against **{reference}** over the same {n} "
                 "evaluation questions; refusal acc. = share of questions where REFUSE was the right call "
                 "(refused iff unanswerable).")
    return "\n".join(lines) + "\n"


def timing(state: dict[str, Any]) -> dict[str, Any]:
    """Minutes per phase, as the state recorded them: the rollouts, each variant's round and every evaluation
    (a phase resumed after an interruption counts only its last attempt), and their sum. A row reused from another
    run (`reused_from`) took none of this run's time: its minutes are None here and it is listed under `reused`."""
    base = state.get("base") or {}
    evals = {"base": None if base.get("reused_from") else base.get("seconds")}
    rounds = {}
    reused = ["base"] if base.get("reused_from") else []
    for name, record in state.get("variants", {}).items():
        if record.get("reused_from"):
            reused.append(name)
            rounds[name] = evals[name] = None
            continue
        rounds[name] = (record.get("round") or {}).get("minutes")
        evals[name] = (record.get("eval") or {}).get("seconds")
    minutes = {"rollouts": (state.get("rollouts") or {}).get("minutes"),
               "rounds": rounds, "evaluations": {k: None if v is None else v / 60 for k, v in evals.items()}}
    parts = [minutes["rollouts"], *rounds.values(), *minutes["evaluations"].values()]
    minutes["total"] = sum(v for v in parts if v is not None)
    minutes["reused"] = reused
    return minutes


def _timing_line(t: dict[str, Any]) -> str:
    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.0f}"

    rounds = ", ".join(f"{k} {fmt(v)}" for k, v in t["rounds"].items())
    evals = ", ".join(f"{k} {fmt(v)}" for k, v in t["evaluations"].items())
    reused = f" Reused from another run: {', '.join(t['reused'])}." if t.get("reused") else ""
    return (f"Minutes: rollouts {fmt(t['rollouts'])}; rounds: {rounds}; evaluations: {evals}; total "
            f"{t['total']:.0f} (each phase's last attempt).{reused}")


def figure(table: list[dict[str, Any]], title: str):
    """Grouped bars of EM, F1, support recall and refusal accuracy per row, and avg steps beside them."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    shown = [r for r in table if r["evaluated"]]
    names = [r["name"] for r in shown]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.64, 0.36], subplot_titles=("scores", "avg steps"))
    for key, title_ in METRICS:
        if key == "avg_steps":
            continue
        fig.add_trace(go.Bar(name=title_, x=names, y=[r.get(key) for r in shown]), row=1, col=1)
    fig.add_trace(go.Bar(name="Avg steps", x=names, y=[r.get("avg_steps") for r in shown], showlegend=False,
                         marker_color="grey"), row=1, col=2)
    fig.update_layout(barmode="group", title=title, width=1100, height=480)
    fig.update_xaxes(tickangle=-30, row=1, col=2)  # six variant names side by side in the narrower panel
    return fig


def write_report(state: dict[str, Any], out: Path, resamples: int = 10_000) -> dict[str, Any]:
    """ablation.md, ablation.json, ablation.html and ablation.png under `out`; returns the JSON written."""
    plan = state["plan"]
    table = rows(state, resamples)
    md = markdown(table, plan["reference"], resamples)
    title = f"evorag ablate {plan['name']} ({plan['objective']}, {Path(plan['data']).name})"
    minutes = timing(state)
    report: dict[str, Any] = {"plan": plan, "rows": table, "rollouts": state.get("rollouts"), "minutes": minutes,
                              "files": {"markdown": str(out / "ablation.md"), "html": str(out / "ablation.html")}}
    (out / "ablation.md").write_text(f"# {title}\n\n{md}\n{_timing_line(minutes)}\n")
    fig = figure(table, title)
    fig.write_html(out / "ablation.html", include_plotlyjs=True)
    for name in ("kaleido", "choreographer"):  # they log every browser tab at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        fig.write_image(out / "ablation.png")
        report["files"]["png"] = str(out / "ablation.png")
    except Exception as exc:  # kaleido or its Chromium missing: the HTML stands, the JSON says why
        report["files"]["png_error"] = f"{type(exc).__name__}: {exc}"
    (out / "ablation.json").write_text(json.dumps(report, indent=2, default=str))
    return report
