"""Gated promotion in the studio (Training tab, Adapters panel): the adapters' held-out columns, one adapter's
promotion report (both sides, the difference, the changed questions side by side with links to their traces), the
learning curve over the reports, queueing an evaluation, activating with a reason, averaging adapters into a soup,
and why the live model is live.

Every value comes from the store (`promotions`, `activations`); evaluation itself runs in the worker as a queued job
(training/evaluate_round.py), so its progress, log and Cancel are the Training tab's round views.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import plotly.graph_objects as go

from evorag_core.objectives import EVALUATE_JOB
from evorag_core.promotion.report import heldout_columns

from app.common import views

if TYPE_CHECKING:
    from evorag_core.store import Activation, Adapter, Promotion, Store

    from app.common.services import Services

__all__ = ["HELDOUT_HEADERS", "heldout_cells", "report_html", "queue_evaluation", "activate_adapter", "make_soup",
           "live_reason", "learning_curve", "evaluating"]

HELDOUT_HEADERS = ("held-out F1", "Δ vs", "p", "gate")
_KIND_WORDS = {"promoted": "promoted", "activated": "activated", "forced": "forced", "deactivated": "base model"}


def evaluating(store: Store) -> dict[str, int]:
    """Adapters with an evaluation job queued or running: name -> job (round) id."""
    jobs = [r for s in ("queued", "running") for r in store.list_rounds(status=s, limit=50)]
    return {str(r.config.get("adapter")): r.id for r in jobs if r.objective == EVALUATE_JOB}


def heldout_cells(adapter: Adapter, report: Promotion | None, pending: dict[str, int]) -> list[Any]:
    """The Adapters table's held-out cells of one adapter: its metric, the difference (and what it was compared
    with), p, and the gate state (evaluating while a job runs)."""
    h = heldout_columns(report)
    diff = f"{h['diff']:+.3f} vs {h['against']}" if h["diff"] is not None else ""
    state = f"evaluating (#{pending[adapter.name]})" if adapter.name in pending else h["state"]
    return [h["score"] if h["score"] is not None else "", diff, h["p"] if h["p"] is not None else "", state]


def _side_row(side: dict[str, Any]) -> list[Any]:
    m = side["summary"]
    lo, hi = side["f1_ci"]
    refusal = m.get("refusal_accuracy")
    return [side["name"], m["n"], round(m["em"], 3), f"{m['f1']:.3f} [{lo:.3f}, {hi:.3f}]", round(m["avg_steps"], 2),
            round(m["support_recall"], 3), round(refusal, 3) if isinstance(refusal, float) else "",
            f"{side['seconds']:.0f} s" + (f" ({side['cached']} cached)" if side["cached"] else "")]


def _trace_link(episode: int | None, text: str) -> str:
    if episode is None:
        return views.esc(text)
    return f'<a href="?episode={int(episode)}" target="_blank" rel="noopener">{views.esc(text)}</a>'


def _changed_html(changed: Sequence[dict[str, Any]], candidate: str, against: str) -> str:
    if not changed:
        return '<div class="evo-empty">No answer changed.</div>'
    head = "".join(f"<th>{views.esc(h)}</th>" for h in ("question", "gold", candidate, "F1", against, "F1"))
    rows = []
    for c in changed:
        cand, other = c["candidate"], c["against"]
        better = "better" if cand["f1"] > other["f1"] else "worse" if cand["f1"] < other["f1"] else "same"
        rows.append(
            f'<tr class="evo-change-{better}"><td>{views.esc(c["question"])}</td><td>{views.esc(" | ".join(c["gold"]))}'
            f'</td><td>{_trace_link(cand["episode"], cand["answer"] or "(no answer)")}</td>'
            f'<td class="num">{cand["f1"]:.2f}</td>'
            f'<td>{_trace_link(other["episode"], other["answer"] or "(no answer)")}</td>'
            f'<td class="num">{other["f1"]:.2f}</td></tr>')
    return (f'<div class="evo-scroll"><table class="evo-table" id="evo-report-changes"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def report_html(svc: Services, name: str | None) -> str:
    """Adapter `name`'s newest promotion report as HTML (a note when there is none)."""
    if not name:
        return '<div class="evo-empty">Pick an adapter to see its promotion report.</div>'
    store = svc.store()
    reports = store.list_promotions(name)
    pending = evaluating(store)
    note = (views.message_html(f"Evaluation of {name} is {'running' if name in pending else 'queued'} "
                               f"(round #{pending[name]}): its progress is above.", "info") if name in pending else "")
    if not reports:
        return note + (f'<div class="evo-empty" id="evo-report">{views.esc(name)} has no promotion report yet: '
                       'Evaluate runs it against the live model on the [promotion] slice.</div>')
    row = reports[-1]
    r = row.report
    s, c, a = r["setting"], r["candidate"], r["against"]
    kind = "ok" if row.passed else "error" if row.verdict.startswith("worse") else "warn"
    comparison = r["comparison"]
    diffs = " · ".join(
        f"{k.upper() if k != 'steps' else 'steps'} {comparison[k]['diff']:+.3f} "
        f"[{comparison[k]['ci_low']:+.3f}, {comparison[k]['ci_high']:+.3f}] p {comparison[k]['p_value']:.3g}"
        for k in ("f1", "em", "steps") if k in comparison)
    changes = comparison.get("changes", {})
    sides = views.table_html(["model", "n", "EM", "F1 [95% CI]", "steps", "support recall", "refusal acc.", "time"],
                             [_side_row(c), _side_row(a)], table_id="evo-report-sides")
    return (
        f'<div id="evo-report" data-adapter="{views.esc(name)}" data-passed="{views.esc(row.passed)}">'
        f'{note}<div class="evo-report-head"><b>Report #{row.id}</b>: {views.esc(c["name"])} vs '
        f'{views.esc(a["name"])} on {views.esc(s["data"].rsplit("/", 1)[-1])} ({views.esc(s["questions"])}, '
        f'method {views.esc(s["method"])}) · {row.created_at.strftime("%Y-%m-%d %H:%M")}</div>'
        f'{views.message_html(row.verdict, kind)}'
        f'<div class="evo-note">Rule: {views.esc(r["decision"]["rule"])}</div>{sides}'
        f'<div class="evo-note">Paired differences ({views.esc(c["name"])} − {views.esc(a["name"])}): '
        f'{views.esc(diffs)}</div>'
        f'<div class="evo-note">Answers changed on {changes.get("changed", 0)} of {comparison["n"]} questions: '
        f'{changes.get("better", 0)} better, {changes.get("worse", 0)} worse (links open the traces).</div>'
        f'{_changed_html(r["changed"], c["name"], a["name"])}</div>')


def queue_evaluation(svc: Services, name: str | None) -> str:
    """Queue the evaluation of adapter `name` against `[promotion] against` for the worker."""
    if not name:
        raise ValueError("choose an adapter to evaluate")
    store = svc.store()
    store.get_adapter(name)  # KeyError: not registered
    pending = evaluating(store)
    if name in pending:
        return f"{name} is already being evaluated (round #{pending[name]})."
    rid = store.enqueue_round(EVALUATE_JOB, {"objective": EVALUATE_JOB, "adapter": name,
                                             "against": svc.cfg.promotion.against})
    return (f"Evaluation of {name} against the {svc.cfg.promotion.against} model queued as round #{rid}; "
            "its report appears here when the worker has run it.")


def activate_adapter(svc: Services, name: str | None, reason: str | None = None, who: str | None = None) -> str:
    """Verify adapter `name` and make it live through the registry's one activation path (`activate`); an adapter
    whose evaluation did not pass needs `reason` (logged as forced). AdapterError (the page shows it) otherwise,
    and the live model stays as it was."""
    if not name:
        raise ValueError("choose an adapter to activate")
    from evorag_core.adapters.registry import activate
    from evorag_core.lm.loading import base_model_id

    a = activate(svc.store(), name, base_model_id(svc.cfg.policy.model, svc.home), reason=reason, who=who)
    why = svc.store().last_activation()
    forced = " (forced: its evaluation did not pass; your reason is logged)" if why and why.kind == "forced" else ""
    return f"Adapter {a.name} is live{forced}: new episodes with the 'LM · live adapter' policy use it."


def make_soup(svc: Services, names: Sequence[str] | None, name: str | None) -> tuple[str, bool]:
    """Register adapter `name`, the mean of the adapters `names` (evorag_core/adapters/soup.py), staged, and queue its
    evaluation as the worker does for a round's adapter (when `promotion.evaluate`). Returns (message, queued).
    ConfigError / AdapterError (the page shows them) when it cannot be made; nothing is registered then."""
    from evorag_core.adapters.soup import soup_registered
    from evorag_core.lm.loading import base_model_id

    names = list(names or [])
    row = soup_registered(svc.store(), names, (name or "").strip(), svc.home,
                          base_model_id(svc.cfg.policy.model, svc.home))
    made = f"Adapter {row.name} registered, staged ({row.role}): the mean of {', '.join(names)}."
    if not svc.cfg.promotion.evaluate:
        return made + " Evaluate it before activating it.", False
    return f"{made} {queue_evaluation(svc, row.name)}", True


def live_reason(activation: Activation | None, report: Promotion | None = None) -> str:
    """Why the live model is live, in a few words (the header and the Adapters panel)."""
    if activation is None:
        return "never activated" if report is None else "activated before the activation log"
    who = f" by {activation.who}" if activation.who else ""
    when = activation.created_at.strftime("%Y-%m-%d %H:%M")
    if activation.kind == "promoted":
        verdict = report.verdict if report is not None else "its evaluation passed"
        return f"promoted{who} {when}: {verdict}"
    if activation.kind == "forced":
        return f"forced{who} {when}: {activation.reason or ''}"
    if activation.kind == "deactivated":
        return f"base model since {when}{who}" + (f": {activation.reason}" if activation.reason else "")
    return f"activated{who} {when}" + (f": {activation.reason}" if activation.reason else " (not evaluated)")


def learning_curve(reports: Sequence[Promotion]) -> go.Figure:
    """Held-out score of each evaluated adapter (newest report each, in evaluation order) with its 95 % interval,
    and what it was compared with: the gate's learning curve."""
    newest: dict[str, Promotion] = {}
    for row in reports:
        newest.pop(row.adapter, None)
        newest[row.adapter] = row
    if not newest:
        return views.empty_figure("Held-out learning curve", "no promotion report yet")
    rows = list(newest.values())
    metric = rows[-1].metric
    fig = views.empty_figure(f"Held-out {metric.upper()} per evaluated adapter (green: passed the gate)")
    names = [r.adapter for r in rows]
    score = [r.report["candidate"]["summary"][metric] for r in rows]
    ci = [r.report["candidate"].get(f"{metric}_ci", [s, s]) for r, s in zip(rows, score)]
    against = [r.report["against"]["summary"][metric] for r in rows]
    fig.add_trace(go.Scatter(
        x=names, y=score, mode="lines+markers", name=f"adapter {metric.upper()}",
        error_y=dict(type="data", symmetric=False, array=[hi - s for (lo, hi), s in zip(ci, score)],
                     arrayminus=[s - lo for (lo, hi), s in zip(ci, score)]),
        marker=dict(color=["#2ca02c" if r.passed else "#d62728" if r.passed is False else "#7f7f7f" for r in rows],
                    size=10),
        hovertext=[r.verdict for r in rows]))
    fig.add_trace(go.Scatter(x=names, y=against, mode="markers", name="compared with (live or base)",
                             marker=dict(symbol="line-ew-open", size=16, color="#1f77b4"),
                             hovertext=[r.report["against"]["name"] for r in rows]))
    fig.update_layout(yaxis_title=metric.upper())
    return fig
