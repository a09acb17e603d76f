"""Studio rendering of a DynaKrag episode's action trace: per step the valid set, the controller's score for each
valid action (and, when the continuation model was consulted, its predicted gain of continuing and whether it
suppressed stop_answer), the chosen action and the evidence state before it.

Pure functions of the trace (`QuestionResult.trace` of the `dynakrag` method, or `StepTrace.to_dict()` rows):
`trace_rows` gives headers and string cells (for a `gr.Dataframe`), `trace_html` an escaped HTML table. Every
text taken from data or a model (titles, queries, gaps) is escaped.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from app.common.views import esc

__all__ = ["TRACE_HEADERS", "trace_rows", "trace_html"]

TRACE_HEADERS = ("step", "valid actions (score)", "chosen", "query", "added", "evidence before the step")


def _scores(step: Mapping[str, Any]) -> str:
    scores = step.get("scores") or {}
    parts = []
    for action in step.get("valid", []):
        val = scores.get(action)
        parts.append(f"{action} ({val:.3f})" if isinstance(val, (int, float)) else f"{action} (-)")
    note, gain = "", step.get("continuation")
    if step.get("stop_suppressed"):
        note = f"; stop suppressed (continuation gain {gain or 0.0:.3f})"
    elif isinstance(gain, (int, float)):  # the continuation model was asked and let stop_answer compete
        note = f"; stop allowed (continuation gain {gain:.3f})"
    return ", ".join(parts) + note


def _evidence(state: Mapping[str, Any]) -> str:
    docs = state.get("docs") or []
    titles = "; ".join(str(d.get("title", "")) for d in docs) or "(none)"
    judged = state.get("sufficient")
    verdict = "not judged" if judged is None else ("sufficient" if judged else "insufficient")
    parts = [f"{len(docs)} docs: {titles}", f"frontier {state.get('cursor', 0)}/{state.get('ranking') or 0}",
             f"retrieval calls {state.get('retrieval_calls', 0)}", verdict]
    if state.get("missing"):
        parts.append(f"gap: {state['missing']}")
    if state.get("bridge_candidates"):
        parts.append("bridge: " + ", ".join(map(str, state["bridge_candidates"])))
    return " | ".join(parts)


def trace_rows(trace: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows): one row per executed operation, every cell a plain string."""
    rows = [[str(step.get("t", i + 1)), _scores(step), str(step.get("action", "")), str(step.get("query", "")),
             ", ".join(map(str, step.get("added", []))), _evidence(step.get("state") or {})]
            for i, step in enumerate(trace)]
    return list(TRACE_HEADERS), rows


def trace_html(trace: Sequence[Mapping[str, Any]]) -> str:
    """An HTML table of `trace_rows`; the chosen action is bold and its score cell is marked."""
    headers, rows = trace_rows(trace)
    if not rows:
        return "<p>No DynaKrag steps.</p>"
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = [esc(c) for c in row]
        cells[2] = f"<b>{cells[2]}</b>"
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table class='dynakrag-trace'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
