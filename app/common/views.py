"""Rendering for the studio: HTML tables, passage lists and Plotly figures built from plain records.

Every piece of text that comes from data, a model or a person goes through `esc` (passage text, titles,
queries, answers, annotator names): the studio shows it as text, never as HTML.
"""
from __future__ import annotations

import html
from typing import Any, Iterable, Mapping, Sequence

import plotly.graph_objects as go

from evorag_core.env.actions import action_to_dict
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.env.scheduler import PAPER_TABLE, SIGNAL_WEIGHT, WeightTable, weights_at
from evorag_core.signal_table import SIGNAL_TABLE
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.types import Passage

from app.common.grading_view import highlight

__all__ = [
    "SIGNAL_LABELS",
    "WEIGHT_SYMBOLS",
    "esc",
    "message_html",
    "steps_table",
    "step_breakdown",
    "passages_html",
    "verdicts_html",
    "weights_figure",
    "recorded_weights",
    "contributions_figure",
    "candidates_html",
    "table_html",
    "counts_html",
    "progress_html",
    "kl_figure",
    "metric_figure",
    "loss_figure",
    "empty_figure",
]

# the signals' words, weight symbols and colours: one table (evorag_core/signal_table.py)
SIGNAL_LABELS: Mapping[str, str] = {row.name: row.label for row in SIGNAL_TABLE}
WEIGHT_SYMBOLS: Mapping[str, str] = {row.weight: row.symbol for row in SIGNAL_TABLE}
_COLORS: Mapping[str, str] = {row.name: row.colour for row in SIGNAL_TABLE}
_FIG_LAYOUT = dict(
    template="plotly_white",
    height=300,
    margin=dict(l=50, r=20, t=40, b=45),
    legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=11)),
    font=dict(size=12),
)


def esc(value: Any) -> str:
    """Text as HTML text: `<`, `>`, `&` and quotes escaped; None becomes an empty string."""
    return "" if value is None else html.escape(str(value), quote=True)


def message_html(text: str, kind: str = "info") -> str:
    """A one-line notice box (kind: info, warn, error, ok)."""
    return f'<div class="evo-msg evo-msg-{esc(kind)}">{esc(text)}</div>' if text else ""


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}"


def _cell(value: float) -> str:
    cls = "pos" if value > 1e-12 else "neg" if value < -1e-12 else "zero"
    return f'<td class="num {cls}">{value:+.2f}</td>'


def _argument(step: StepRecord) -> str:
    act = action_to_dict(step.action)
    withheld = (step.info or {}).get("withheld")
    if withheld and not act.get("answer"):  # the reader refused its best span below answer.min_confidence
        return f'low confidence ({withheld.get("confidence") or 0:.2f}): "{withheld.get("span")}" withheld'
    return act.get("query") or act.get("answer") or ""


def steps_table(record: EpisodeRecord | None) -> str:
    """t | action | sub-query or answer | the seven r_t^(k) | R_t | running return | by (the policy, or the person who
    acted in its place, with what the policy had proposed there); the last row is highlighted."""
    if record is None or not record.steps:
        return '<div class="evo-empty">No steps yet: press Step or Run to end.</div>'
    head = "".join(f'<th title="{esc(SIGNAL_LABELS[k])}">{k}</th>' for k in SIGNAL_NAMES)
    rows = []
    running = 0.0
    for i, s in enumerate(record.steps):
        running += s.reward
        cur = ' class="current"' if i == len(record.steps) - 1 else ""
        signals = "".join(_cell(float(s.signals.get(k, 0.0))) for k in SIGNAL_NAMES)
        name = action_to_dict(s.action)["action"]
        override = ' <span class="badge human">override</span>' if s.verdict and s.verdict.judge == "human" else ""
        override += _plan_badge(s)
        rows.append(
            f"<tr{cur}><td>{s.t}</td><td><span class=\"act act-{name.lower()}\">{name}</span>{override}</td>"
            f'<td class="arg">{esc(_argument(s))}</td>{signals}'
            f'<td class="num strong">{s.reward:+.3f}</td><td class="num strong">{running:+.3f}</td>{_actor_cell(s)}</tr>'
        )
    return (
        '<table class="evo-table" id="evo-steps"><thead><tr><th>t</th><th>action</th><th>sub-query / answer</th>'
        f"{head}<th>R<sub>t</sub></th><th>return</th><th>by</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


_PLAN_WORDS = {"entity": "missing page", "bridge": "bridge hop", "complete": "evidence complete",
               "exhausted": "nothing left to search"}


def _plan_badge(step: StepRecord) -> str:
    """The hop planner's verdict at the step (`policy/hops.py`; recorded when `policy.hop_gate` > 0): why the agent
    searched (the missing page or bridge it went for) or answered; empty when the step has none."""
    plan = (step.info or {}).get("plan")
    if not plan:
        return ""
    words = _PLAN_WORDS.get(plan.get("reason"), str(plan.get("reason")))
    label = f'{words}: {plan["target"]}' if plan.get("target") else words
    tip = "the hop planner: " + ("search " + repr(plan.get("query")) if plan.get("search") else "answer")
    return f' <span class="badge plan" title="{esc(tip)}">{esc(label)}</span>'


def _actor_cell(step: StepRecord) -> str:
    """Who took the step: "agent", or a human badge with the person's name (the policy's proposal as its tooltip)."""
    info = step.info or {}
    if info.get("actor") != "human":
        return '<td class="by">agent</td>'
    proposed = info.get("proposal")
    title = f' title="{esc(f"the policy proposed: {proposed}")}"' if proposed else ""
    return (f'<td class="by human"{title}><span class="badge human">human</span> '
            f'{esc(info.get("annotator") or "anonymous")}</td>')


def step_breakdown(step: StepRecord | None) -> str:
    """The current step's reward: one row per signal with r, w_k(t) and w·r, and their sum R_t."""
    if step is None:
        return '<div class="evo-empty">The reward breakdown of the latest step appears here.</div>'
    rows = []
    for k in SIGNAL_NAMES:
        wname = SIGNAL_WEIGHT[k]
        r, w = float(step.signals.get(k, 0.0)), float(step.weights.get(wname, 0.0))
        rows.append(
            f"<tr><td>{k}</td><td>{esc(SIGNAL_LABELS[k])}</td><td>{WEIGHT_SYMBOLS[wname]}</td>"
            f"{_cell(r)}<td class=\"num\">{w:.3f}</td>{_cell(w * r)}</tr>"
        )
    return (
        f'<table class="evo-table" id="evo-breakdown"><caption>Step t = {step.t}: R<sub>t</sub> = Σ w<sub>k</sub>(t)·r<sub>k</sub>'
        f" = <b>{step.reward:+.3f}</b></caption><thead><tr><th>k</th><th>signal</th><th>weight</th><th>r</th>"
        f"<th>w(t)</th><th>w·r</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def passages_html(passages: Sequence[Passage], gold: Iterable[str], gold_known: bool, heading: str = "",
                  source: int | None = None, span: str | None = None) -> str:
    """Numbered passages with titles; gold-support passages are marked when gold is known; the answer's source
    passage (0-based index `source`) is marked "source", with the answer `span` in <mark> in its title and text."""
    if not passages:
        return f'<div class="evo-empty">{esc(heading or "No passages retrieved at this step.")}</div>'
    gold = set(gold)
    items = []
    for i, p in enumerate(passages, 1):
        is_gold = gold_known and p.pid in gold
        is_source = source == i - 1
        badge = '<span class="badge gold">gold</span>' if is_gold else ""
        if is_source:
            badge += '<span class="badge source">source of the answer</span>'
        cls = " ".join(c for c, on in (("gold", is_gold), ("source", is_source)) if on)
        title, text = (highlight(p.title, span), highlight(p.text, span)) if is_source else (esc(p.title), esc(p.text))
        items.append(
            f'<li class="{cls}"><div class="ptitle">[{i}] {title} {badge}'
            f'<span class="pid">{esc(p.pid)}</span></div><div class="ptext">{text}</div></li>'
        )
    title = f'<div class="evo-h">{esc(heading)}</div>' if heading else ""
    return f'{title}<ol class="evo-passages">{"".join(items)}</ol>'


def verdicts_html(record: EpisodeRecord | None) -> str:
    """Every sufficiency verdict of the episode: step, answerable/unanswerable, judge type, score, who."""
    judged = [s for s in (record.steps if record else ()) if s.verdict is not None]
    if not judged:
        return '<div class="evo-empty">No judge verdicts yet (a verdict is made at each REFUSE).</div>'
    rows = []
    for s in judged:
        v = s.verdict
        label = "answerable" if v.answerable else "unanswerable"
        score = "–" if v.score is None else f"{v.score:.2f}"
        rows.append(
            f'<tr><td>{s.t}</td><td><span class="badge {label}">{label}</span></td><td>{esc(v.judge)}</td>'
            f"<td>{score}</td><td>{esc(v.who or '')}</td>{_cell(float(s.signals.get('ref', 0.0)))}"
            f'<td class="num">{s.reward:+.3f}</td></tr>'
        )
    return (
        '<table class="evo-table" id="evo-verdicts"><thead><tr><th>t</th><th>verdict</th><th>judge</th><th>score</th>'
        f"<th>who</th><th>ref</th><th>R<sub>t</sub></th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def empty_figure(title: str, note: str = "") -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=dict(text=title, font=dict(size=14)), **_FIG_LAYOUT)
    if note:
        fig.add_annotation(text=note, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(color="#888"))
    fig.update_xaxes(visible=bool(not note))
    fig.update_yaxes(visible=bool(not note))
    return fig


Recorded = tuple[tuple[int, tuple[tuple[str, float], ...]], ...]  # (t, sorted (weight name, value)) per step taken


def recorded_weights(record: EpisodeRecord | None) -> Recorded:
    """The weights each step of `record` was scored with, hashable (for `weights_figure`'s cache)."""
    if record is None:
        return ()
    return tuple((s.t, tuple(sorted((k, float(v)) for k, v in s.weights.items()))) for s in record.steps)


def weights_figure(stage: str, schedule: str, preset: str, t_max: int, current_t: int | None,
                   table: WeightTable = PAPER_TABLE, recorded: Recorded = ()) -> go.Figure:
    """w_k(t) for t = 1..T_max under `table` (the run's [weights]: the paper's, or tuned ones), one line per weight,
    with the current step marked; `recorded`: the weights the steps taken were scored with, drawn as markers (where
    they leave the lines, the steps used another table, and the chart says so)."""
    ts = list(range(1, t_max + 1))
    rows = [weights_at(stage, t, t_max, schedule=schedule, preset=preset, table=table) for t in ts]
    used = {t: dict(ws) for t, ws in recorded}
    fig = go.Figure()
    for k in SIGNAL_NAMES:
        wname = SIGNAL_WEIGHT[k]
        fig.add_trace(
            go.Scatter(
                x=ts, y=[w[wname] for w in rows], mode="lines", name=f"{WEIGHT_SYMBOLS[wname]} ({k})",
                line=dict(color=_COLORS[k], width=2), legendgroup=k,
            )
        )
        steps = [t for t in sorted(used) if wname in used[t]]
        if steps:
            fig.add_trace(go.Scatter(x=steps, y=[used[t][wname] for t in steps], mode="markers", showlegend=False,
                                     marker=dict(color=_COLORS[k], size=7), legendgroup=k,
                                     hovertemplate=f"{WEIGHT_SYMBOLS[wname]} used at t=%{{x}}: %{{y:.3f}}<extra></extra>"))
    off = any(abs(ws[name] - rows[t - 1][name]) > 1e-6 for t, ws in used.items() if 1 <= t <= t_max
              for name in ws if name in rows[t - 1])
    if off:
        fig.add_annotation(text="● the steps' own weights differ from these lines (another weight table)",
                           showarrow=False, x=0, y=-0.28, xref="paper", yref="paper", xanchor="left",
                           font=dict(size=11, color="#c62828"))
    if current_t is not None and 1 <= current_t <= t_max:
        fig.add_vline(x=current_t, line=dict(color="#444", dash="dash", width=1.5))
        fig.add_annotation(x=current_t, y=1.0, yref="paper", text=f"t = {current_t}", showarrow=False, xshift=4,
                           xanchor="left", yanchor="top", font=dict(size=11, color="#444"),
                           bgcolor="rgba(255,255,255,0.8)")
    tuned = "" if table == PAPER_TABLE else " (tuned weights)"
    fig.update_layout(title=dict(text=f"Weight schedule w<sub>k</sub>(t) — {stage}, {schedule}{tuned}",
                                 font=dict(size=14), y=0.925, yanchor="top"),
                      **{**_FIG_LAYOUT, "height": 345, "margin": dict(l=50, r=20, t=95, b=45)})  # 2 legend rows
    fig.update_xaxes(title_text="step t", range=[1, t_max], dtick=max(1, t_max // 10))
    fig.update_yaxes(title_text="weight")
    return fig


def contributions_figure(record: EpisodeRecord | None) -> go.Figure:
    """Per-step signal contributions w_k(t)·r_t^(k) as stacked bars, with R_t as a marker."""
    if record is None or not record.steps:
        return empty_figure("Signal contributions w·r per step", "no steps yet")
    ts = [s.t for s in record.steps]
    fig = go.Figure()
    for k in SIGNAL_NAMES:
        wname = SIGNAL_WEIGHT[k]
        ys = [float(s.weights.get(wname, 0.0)) * float(s.signals.get(k, 0.0)) for s in record.steps]
        fig.add_trace(go.Bar(x=ts, y=ys, name=k, marker_color=_COLORS[k]))
    fig.add_trace(
        go.Scatter(x=ts, y=[s.reward for s in record.steps], mode="markers+lines", name="R_t",
                   marker=dict(color="black", size=8, symbol="diamond"), line=dict(color="black", width=1, dash="dot"))
    )
    fig.update_layout(barmode="relative", bargap=0.35,
                      title=dict(text="Signal contributions w·r per step", font=dict(size=14)), **_FIG_LAYOUT)
    fig.update_xaxes(title_text="step t", dtick=1, range=[0.4, max(ts[-1], 5) + 0.6])
    fig.update_yaxes(title_text="w·r", zeroline=True, zerolinecolor="#999")
    return fig


def candidates_html(candidates: Sequence[Mapping[str, Any]]) -> str:
    """Sibling candidates side by side: action, argument, log-prob, branch return (when scored)."""
    if not candidates:
        return '<div class="evo-empty">No candidates sampled yet.</div>'
    cards = []
    for i, c in enumerate(candidates, 1):
        logprob = "–" if c.get("logprob") is None else f"{c['logprob']:.3f}"
        ret = c.get("branch_return")
        ret_txt = "not scored" if ret is None else f"{ret:+.3f}"
        steps = "" if c.get("branch_steps") is None else f" over {c['branch_steps']} steps"
        if c.get("branch_cut"):
            steps += " (cut at the horizon)"
        completion = c.get("completion") or " ".join(filter(None, (c["action"], c.get("argument"))))
        cards.append(
            f'<div class="evo-card" data-completion="{esc(completion)}"><div class="evo-card-h">#{i} <span class="act act-{esc(c["action"].lower())}">'
            f'{esc(c["action"])}</span></div><div class="arg">{esc(c.get("argument") or "")}</div>'
            f'<div class="evo-card-f">log-prob {logprob} · branch return {ret_txt}{esc(steps)}</div></div>'
        )
    return f'<div class="evo-cards">{"".join(cards)}</div>'


def table_html(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, table_id: str = "", empty: str = "") -> str:
    """A plain table; every cell is escaped (numbers formatted to 4 significant decimals)."""
    if not rows:
        return f'<div class="evo-empty">{esc(empty or "Nothing to show.")}</div>'

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f'<td class="num">{v:.4g}</td>'
        if isinstance(v, int) and not isinstance(v, bool):
            return f'<td class="num">{v}</td>'
        return f"<td>{esc(v)}</td>"

    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(fmt(v) for v in row) + "</tr>" for row in rows)
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return (f'<div class="evo-scroll"><table class="evo-table"{ident}><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def counts_html(title: str, counts: Mapping[Any, int]) -> str:
    """`title: a 3 · b 1` chips."""
    chips = " ".join(f'<span class="chip">{esc(k if k is not None else "—")} <b>{v}</b></span>' for k, v in counts.items())
    return f'<div class="evo-counts"><span class="evo-h">{esc(title)}</span> {chips or "<i>none</i>"}</div>'


def progress_html(label: str, done: float | None, total: float | None, eta: float | None, status: str) -> str:
    """A progress bar with `done/total`, the ETA and the status."""
    frac = 0.0 if not total else max(0.0, min(1.0, float(done or 0) / float(total)))
    eta_txt = "" if eta is None or status != "running" else f" · ETA {eta:.0f} s"
    count = "" if total is None else f" {int(done or 0)}/{int(total)}"
    return (
        f'<div class="evo-progress" data-status="{esc(status)}"><div class="evo-progress-label">{esc(label)} — '
        f'<b>{esc(status)}</b>{esc(count)}{esc(eta_txt)}</div><div class="evo-bar"><div class="evo-fill '
        f'{esc(status)}" style="width:{frac * 100:.1f}%"></div></div></div>'
    )


KL_SERIES = (("kl_k2", "k2 = ½(log r)²", "#2e7d32"), ("kl_k3", "k3 = r − log r − 1", "#c62828"),
             ("kl", "optimised estimator", "#6a1b9a"))


def kl_figure(rows: Sequence[Mapping[str, float]], title: str = "KL to the reference") -> go.Figure:
    """Per-step mean token KL: one line per estimator the round logged (k2 and k3 both where the objective
    computes both; otherwise the optimised one)."""
    series = [(key, name, color) for key, name, color in KL_SERIES if any(key in r for r in rows)]
    if any(key in ("kl_k2", "kl_k3") for key, _, _ in series):
        series = [s for s in series if s[0] != "kl"]  # with both estimates logged, "kl" repeats one of them
    if not series:
        return empty_figure(title, "this round logs no per-step KL (DPO's reference term is inside its loss)")
    fig = go.Figure([go.Scatter(x=[r["step"] for r in rows if key in r], y=[r[key] for r in rows if key in r],
                                mode="lines+markers", name=name, line=dict(color=color))
                     for key, name, color in series])
    fig.update_layout(title=dict(text=title, font=dict(size=14)), showlegend=True, **_FIG_LAYOUT)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="mean token KL")
    return fig


METRIC_COLORS = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#c62828", "#00838f")


def metric_figure(rows: Sequence[Mapping[str, float]], keys: Sequence[str], title: str, y: str = "value") -> go.Figure:
    """Per-step values of a round: one line per key of `keys` that some row carries (rows are {step, key: value})."""
    present = [k for k in keys if any(k in r for r in rows)]
    if not present:
        return empty_figure(title, "not reported yet")
    fig = go.Figure([go.Scatter(x=[r["step"] for r in rows if k in r], y=[r[k] for r in rows if k in r],
                                mode="lines+markers", name=k, line=dict(color=METRIC_COLORS[i % len(METRIC_COLORS)]))
                     for i, k in enumerate(present)])
    fig.update_layout(title=dict(text=title, font=dict(size=14)), showlegend=len(present) > 1, **_FIG_LAYOUT)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text=y)
    return fig


def loss_figure(points: Sequence[tuple[float, float]], title: str = "Training loss") -> go.Figure:
    if not points:
        return empty_figure(title, "no loss reported yet")
    fig = go.Figure(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                               line=dict(color="#1f77b4")))
    fig.update_layout(title=dict(text=title, font=dict(size=14)), showlegend=False, **_FIG_LAYOUT)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="loss")
    return fig
