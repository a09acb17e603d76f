"""How the DynaKrag tab draws a stepped episode: pure functions of the evidence state, the validity layer and the
controller's decision (no Gradio, no model), every text from data or a model escaped.

    controller_html(trained, text, controller)  -> which controller runs; the uniform-valid one labelled as such
    state_html(state, cfg, gold_pids)           -> documents, frontier cursor, latest query, recorded gap,
                                                   sufficiency result, cost and budgets so far
    operations_html(state, cfg, decision)       -> the seven operations: valid ones with their score (the next one
                                                   marked), invalid ones greyed with the rule that excludes them
    scores_figure(state, cfg, decision, ctrl)   -> v̂(s,a) − λ·c(s,a) per valid operation as bars (the pick
                                                   highlighted); for the uniform controller its 1/|A(s)|
    final_html(state, cfg, answer, gold, grade) -> the answer with EM/F1, the compressed evidence, the final context
"""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from evorag_core.config import DynaKragConfig
from evorag_core.methods.dynakrag.controller import Decision
from evorag_core.methods.dynakrag.ops import estimated_cost, final_context
from evorag_core.methods.dynakrag.state import ACTIONS, EvidenceState
from evorag_core.methods.dynakrag.validity import exclusion

from app.common.views import empty_figure, esc

__all__ = ["CHOSEN_COLOUR", "OTHER_COLOUR", "UNIFORM_LABEL", "controller_html", "state_html", "operations_html",
           "scores_figure", "final_html"]

CHOSEN_COLOUR = "#1565c0"
OTHER_COLOUR = "#b0bec5"
UNIFORM_LABEL = "uniform-valid controller (ablation: a seeded uniform pick among the valid operations)"


def controller_html(trained: bool, text: str, controller: str) -> str:
    """The controller line: what is installed, and which controller this episode runs."""
    if controller == "uniform":
        running = f'<span class="dk-badge dk-uniform">{esc(UNIFORM_LABEL)}</span>'
    elif trained:
        running = '<span class="dk-badge dk-learned">learned controller (random forests)</span>'
    else:  # picked, but there is none: Reset refuses until one is trained (never a "learned" badge on nothing)
        running = ('<span class="dk-badge dk-missing">nothing: the learned controller is picked and none is trained'
                   '</span>')
    if trained:
        return f'<div class="dk-controller" data-trained="1">Running: {running}<br><small>{esc(text)}</small></div>'
    return ('<div class="dk-controller" data-trained="0"><div class="evo-msg evo-msg-warn"><strong>No trained '
            f"controller.</strong> {esc(text)} Train one on the current data file (a worker round, its progress "
            "below), or run the uniform-valid controller, which needs no training.</div>"
            f"Running: {running}</div>")


def _sufficiency(state: EvidenceState) -> str:
    if state.sufficient is None:
        return "not judged yet"
    p = "" if state.p_sufficient is None else f" (P(yes) = {state.p_sufficient:.2f})"
    return ("sufficient" if state.sufficient else "insufficient") + p


def _frontier(state: EvidenceState) -> str:
    if state.ranking is None:
        return "not fetched (the first retrieve_more fetches the initial ranking)"
    return f"{state.cursor} / {len(state.ranking)} ({state.frontier_unseen()} unseen left)"


def state_html(state: EvidenceState, cfg: DynaKragConfig, gold_pids: frozenset[str] = frozenset()) -> str:
    """The evidence state s (see the module docstring); gold passages are marked when the question has them."""
    rows = [("Question", state.question), ("Frontier cursor", _frontier(state)),
            ("Latest query", state.query or "(none yet)"), ("Recorded gap", state.missing or "(none)"),
            ("Sufficiency", _sufficiency(state)),
            ("Cost so far", f"{state.cost:.2f} · retrieval calls {state.retrieval_calls}/{cfg.retrieval_cap} · "
                            f"control steps {state.steps}/{cfg.max_steps} · LM calls {state.lm_calls} · "
                            f"{state.prompt_tokens + state.completion_tokens} tokens")]
    if state.bridge_candidates:
        rows.append(("Bridge candidates", ", ".join(state.bridge_candidates[:5])))
    table = "".join(f'<tr><th>{esc(k)}</th><td data-field="{esc(k.lower())}">{esc(v)}</td></tr>' for k, v in rows)
    docs = []
    for i, d in enumerate(state.docs, start=1):
        gold = d.passage.pid in gold_pids
        badge = '<span class="badge gold">gold</span>' if gold else ""
        docs.append(f'<li class="{"gold" if gold else ""}"><span class="pid">{esc(d.passage.pid)}</span>'
                    f'<span class="ptitle">{i}. {esc(d.passage.title)}</span>{badge}<div class="dk-doc-meta">score '
                    f"{d.score:.4f} · by {esc(d.action)} · query “{esc(d.query)}”</div>"
                    f'<div class="ptext">{esc(d.passage.text[:cfg.passage_chars])}</div></li>')
    found = ""
    if gold_pids:
        hit = len(gold_pids & set(state.pids))
        found = f" · gold found {hit}/{len(gold_pids)}"
    listing = (f'<ol class="evo-passages dk-docs">{"".join(docs)}</ol>' if docs
               else '<div class="evo-empty">No documents yet.</div>')
    return (f'<div class="dk-state"><table class="evo-table dk-kv">{table}</table>'
            f'<div class="evo-h">Documents ({len(state.docs)}{found})</div>{listing}</div>')


def operations_html(state: EvidenceState, cfg: DynaKragConfig, decision: Decision | None) -> str:
    """Every operation: valid (with its score; the controller's pick marked "next") or greyed with its rule."""
    rows = []
    for action in ACTIONS:
        reason = exclusion(state, action, cfg)
        score = decision.scores.get(action) if decision is not None else None
        chosen = decision is not None and decision.action == action
        if reason is not None:
            rows.append(f'<tr class="dk-op invalid" data-op="{action}"><td class="act">{action}</td>'
                        f'<td>excluded: {esc(reason)}</td><td class="num">–</td></tr>')
            continue
        if decision is not None and action == "stop_answer" and decision.stop_suppressed:
            note = f"valid, suppressed by the continuation model (u(s) = {decision.continuation or 0.0:.3f})"
        elif action == "compress_answer_evidence":
            note = "valid: runs after stop_answer, before the answer (not a controller choice)"
        else:
            note = "next: the controller's pick" if chosen else "valid"
        cell = f"{score:.4f}" if isinstance(score, (int, float)) else "–"
        rows.append(f'<tr class="dk-op valid{" chosen" if chosen else ""}" data-op="{action}"><td class="act">'
                    f'{action}</td><td>{esc(note)}</td><td class="num">{cell}</td></tr>')
    head = "<tr><th>operation</th><th>validity layer</th><th>score</th></tr>"
    return f'<table class="evo-table dk-ops"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def scores_figure(state: EvidenceState, cfg: DynaKragConfig, decision: Decision | None, controller: str
                  ) -> go.Figure:
    """Bars of the decision's scores per valid operation, the pick highlighted (see the module docstring)."""
    uniform = controller == "uniform"
    title = ("Uniform-valid controller: P(a) = 1/|A(s)| (no value estimate)" if uniform
             else f"Controller score v̂(s,a) − λ·c(s,a), λ = {cfg.cost_weight:g}")
    if decision is None or not decision.scores:
        if state.terminated:
            note = ("the episode has ended" if state.snippets is not None
                    else "acquisition has ended: Step compresses and answers")
        else:
            note = "no decision yet"
        return empty_figure(title, note)
    actions = list(decision.scores)
    values = [decision.scores[a] for a in actions]
    costs = [estimated_cost(state, a, cfg) for a in actions]
    hover = [f"{a}<br>{'P(a)' if uniform else 'v̂ − λc'} = {v:.4f}<br>c(s,a) = {c:.3f}"
             + ("" if uniform else f"<br>v̂ = {v + cfg.cost_weight * c:.4f}") for a, v, c in zip(actions, values, costs)]
    colours = [CHOSEN_COLOUR if a == decision.action else OTHER_COLOUR for a in actions]
    fig = go.Figure(go.Bar(x=actions, y=values, marker_color=colours, hovertext=hover, hoverinfo="text",
                           text=[f"{v:.3f}" for v in values], textposition="outside", cliponaxis=False,
                           meta="dk-scores"))
    title += f"<br><span style='font-size:12px;color:{CHOSEN_COLOUR}'>next: <b>{decision.action}</b></span>"
    fig.update_layout(title=dict(text=title, font=dict(size=14)), template="plotly_white", height=340,
                      margin=dict(l=50, r=20, t=70, b=60), showlegend=False, font=dict(size=12))
    fig.update_yaxes(title_text="P(a)" if uniform else "v̂ − λ·c", zeroline=True)
    return fig


def final_html(state: EvidenceState | None, cfg: DynaKragConfig, answer: str | None, gold_answers: Sequence[str] = (),
               grade: tuple[float, float] | None = None, stop_reason: str | None = None) -> str:
    """The answer (graded against the gold answers when there are any), the compressed evidence and the final
    context the generator read; a placeholder before the answer."""
    if answer is None or state is None:
        return '<div class="evo-empty">The answer and the compressed evidence appear when the episode ends.</div>'
    if grade is not None:
        em, f1 = grade
        kind = "correct" if em else ("partial" if f1 > 0 else "wrong")
        graded = (f'<span class="badge grade {kind}" data-em="{em:.0f}" data-f1="{f1:.3f}">EM {em:.0f} · F1 '
                  f"{f1:.2f}</span> <small>gold: {esc(' | '.join(gold_answers))}</small>")
    else:
        graded = "<small>(typed question: no gold answer, not graded)</small>"
    why = f" · stopped by {esc(stop_reason)}" if stop_reason else ""
    snippets = state.snippets or ()
    shown = ("".join(f"<li>{esc(s)}</li>" for s in snippets) if snippets
             else "<li class='evo-empty'>(none: the compression found no supporting sentence, or it did not run)</li>")
    context = "".join(f"<li>{esc(p.title)}</li>" for p in final_context(state, cfg))
    return (f'<div class="dk-final"><div class="evo-q">Answer: <b id="dk-answer">{esc(answer or "(empty)")}</b>'
            f"{graded}</div><div class='evo-meta'>{len(state.history)} operations{why} · cost {state.cost:.2f} · "
            f"{state.prompt_tokens + state.completion_tokens} tokens</div>"
            f'<div class="evo-h">Compressed evidence</div><ul class="dk-snippets">{shown}</ul>'
            f'<div class="evo-h">Final context ({len(final_context(state, cfg))} documents)</div><ol>{context}</ol></div>')
