"""HTML of the Annotate tab: one queue item (the question, the chain so far with its passages, the K candidates side
by side with their retrieval previews and branch returns; or a refusal item's evidence and its two verdicts), the
progress line, and the review list. Plain functions of store records; the page's script (app/tabs/annotate/layout.py) marks
the picks on the candidate cards (`data-index`) of the item shown (`data-item`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evorag_core.store import AnnotationItem, AnnotationProgress

from app.common.views import esc

__all__ = ["VERDICTS", "item_html", "empty_html", "progress_html", "labels_html", "review_rows_html"]

VERDICTS = ("answerable", "unanswerable")  # a refusal item's options, keys 1 and 2


def _passage(p: Mapping[str, Any]) -> str:
    return f'<div class="evo-ann-passage"><b>{esc(p.get("title") or p.get("pid") or "")}</b>: {esc(p.get("text", ""))}</div>'


def _chain(chain: Sequence[Mapping[str, Any]]) -> str:
    if not chain:
        return '<div class="evo-ann-chain"><i>No steps yet: this is the first decision.</i></div>'
    rows = []
    for step in chain:
        head = f'{esc(step.get("action", ""))}{": " + esc(step["argument"]) if step.get("argument") else ""}'
        found = step.get("passages") or []
        body = "".join(_passage(p) for p in found) or "<i>(no passages)</i>"
        rows.append(f'<details class="evo-ann-step"><summary>t = {esc(step.get("t", ""))} · {head} '
                    f'({len(found)} passages)</summary>{body}</details>')
    return f'<div class="evo-ann-chain">{"".join(rows)}</div>'


def _card(index: int, title: str, body: str, foot: str = "") -> str:
    return (f'<div class="evo-ann-cand" data-index="{index}"><div class="evo-ann-cand-head">'
            f'<span class="evo-ann-key">{index + 1}</span><span class="evo-ann-rank"></span>'
            f'<code>{esc(title)}</code></div>{body}<div class="evo-ann-foot">{foot}</div></div>')


def _preference(item: AnnotationItem) -> str:
    p = item.payload
    cards = []
    for i, c in enumerate(p["candidates"]):
        preview = c.get("preview") or ""
        body = (f'<pre class="evo-ann-preview">{esc(preview)}</pre>' if preview
                else '<div class="evo-ann-preview evo-muted">no retrieval (not a SEARCH)</div>')
        ret = c.get("branch_return")
        foot = f"branch return {ret:+.3f}" if isinstance(ret, (int, float)) else "not scored"
        cards.append(_card(i, c["completion"], body, foot))
    return (f'<h4>Chain so far</h4>{_chain(p.get("chain") or [])}'
            f'<h4>Candidates at t = {esc(p.get("t", "?"))}: pick the best first (1–{len(cards)}), '
            f'Shift+number the worst, Enter to submit</h4>'
            f'<div class="evo-ann-cands">{"".join(cards)}</div>')


def _refusal(item: AnnotationItem) -> str:
    p = item.payload
    evidence = "".join(_passage(x) for x in p.get("passages") or []) or "<i>(no passages)</i>"
    cards = "".join(_card(i, v, "") for i, v in enumerate(VERDICTS))
    judged = f' (the judge said: {esc(p["judge_verdict"])})' if p.get("judge_verdict") else ""
    return (f'<h4>Evidence{judged}</h4><div class="evo-ann-evidence">{evidence}</div>'
            f'<h4>Can the question be answered from this evidence? 1 or 2, Enter to submit</h4>'
            f'<div class="evo-ann-cands">{cards}</div>')


def item_html(item: AnnotationItem) -> str:
    body = _preference(item) if item.kind == "preference" else _refusal(item)
    return (f'<div class="evo-ann-item" data-item="{item.id}" data-kind="{item.kind}" '
            f'data-k="{len(item.payload.get("candidates", VERDICTS))}">'
            f'<div class="evo-ann-meta">item #{item.id} · {esc(item.kind)} · from {esc(item.source)}</div>'
            f'<div class="evo-ann-question">{esc(item.payload.get("question", ""))}</div>{body}</div>')


def empty_html(reason: str) -> str:
    return f'<div class="evo-ann-item evo-ann-empty" data-item="" id="evo-ann-empty">{esc(reason)}</div>'


def progress_html(p: AnnotationProgress) -> str:
    """An annotator's progress: items labelled (skips apart: a skipped item is not labelled) and open; the queue's."""
    skipped = f", {p.skipped} skipped" if p.skipped else ""
    return (f'<span class="evo-ann-progress" data-done="{p.done}" data-skipped="{p.skipped}" data-open="{p.open}" '
            f'data-queue-done="{p.queue_done}" data-queue-total="{p.queue_total}">You: <b>{p.done}</b> labelled'
            f'{skipped}, {p.open} open · Queue: <b>{p.queue_done}</b> / {p.queue_total} items complete</span>')


def labels_html(labels: Sequence[Any], candidates: Sequence[Mapping[str, Any]]) -> str:
    """Each annotator's label of an item, as the review view shows it (rankings as candidate numbers)."""
    def said(label: Any) -> str:
        if label.decision != "rank" or not label.ranking:
            return esc(label.decision)
        tiers = [" = ".join(f"{i + 1} ({esc(candidates[i]['completion'])})" if i < len(candidates) else str(i + 1)
                            for i in tier) for tier in label.ranking]
        return " &gt; ".join(tiers)

    rows = "".join(f"<tr><td>{esc(lab.annotator)}</td><td>{said(lab)}</td></tr>" for lab in labels)
    return f'<table class="evo-ann-labels"><tr><th>annotator</th><th>label (best first)</th></tr>{rows}</table>'


def review_rows_html(rows: Sequence[tuple[int, float, str, int]]) -> str:
    """(item id, agreement, question, labels) of the disagreements."""
    if not rows:
        return '<div class="evo-muted" id="evo-review-none">No disagreements to resolve.</div>'
    body = "".join(f'<tr data-item="{i}"><td>#{i}</td><td>{a:.2f}</td><td>{n}</td><td>{esc(q[:120])}</td></tr>'
                   for i, a, q, n in rows)
    return (f'<table class="evo-review-table"><tr><th>item</th><th>agreement</th><th>labels</th><th>question</th></tr>'
            f'{body}</table>')
