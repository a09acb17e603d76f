"""The studio's ARENA answer view: one pure function from a reply (and its references) to an HTML fragment.

- the answer and the format verdict (the failing part and why, from the strict parser);
- the four reward components and their total;
- the <relevance> list against the gold reference ids (hit / extra / missed / no such reference);
- the analysis, where each cited `[i]` (also `[i, j]`) links to reference i; the references below are numbered,
  the selected ones highlighted, gold ones marked, and the linked one outlined when it is the URL target.
Every piece of model or passage text is HTML-escaped. `anchor` prefixes the element ids so that several views can
share a page. No Gradio import: the studio mounts the string in a `gr.HTML`.
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

from evorag_core.reader.arena.parse import PARTS, parse_arena
from evorag_core.methods.arena.rewards import ArenaReward
from evorag_core.types import Passage

from app.common.views import esc

__all__ = ["ARENA_CSS", "render_arena_answer"]

_CITE = re.compile(r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]")
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")

ARENA_CSS = """
.arena-view { font-size: 0.95em; line-height: 1.45; }
.arena-view .arena-answer { font-size: 1.15em; font-weight: 600; }
.arena-view .arena-ok { color: #137333; } .arena-view .arena-bad { color: #b3261e; }
.arena-view table.arena-rewards { border-collapse: collapse; margin: 0.4em 0; }
.arena-view table.arena-rewards td, .arena-view table.arena-rewards th { border: 1px solid #ccc; padding: 2px 8px; }
.arena-view .arena-id { display: inline-block; min-width: 1.6em; text-align: center; margin: 0 2px;
  border-radius: 4px; padding: 0 4px; border: 1px solid #999; }
.arena-view .arena-id.hit { background: #c8e6c9; } .arena-view .arena-id.extra { background: #ffe0b2; }
.arena-view .arena-id.missed { background: #eee; border-style: dashed; }
.arena-view .arena-id.unknown { background: #ffcdd2; text-decoration: line-through; }
.arena-view a.arena-cite { font-weight: 600; text-decoration: none; }
.arena-view .arena-cite-bad { color: #b3261e; font-weight: 600; }
.arena-view ol.arena-refs { padding-left: 0; list-style: none; }
.arena-view li.arena-ref { margin: 4px 0; padding: 4px 6px; border-left: 4px solid transparent; }
.arena-view li.arena-ref.selected { background: #fff8c4; border-left-color: #f4b400; }
.arena-view li.arena-ref.gold .arena-ref-num::after { content: " \\2605"; color: #137333; }
.arena-view li.arena-ref:target { outline: 2px solid #1a73e8; }
"""


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(str(i) for i in ids) or "none"


def _relevance_row(selected: Sequence[int] | None, gold: set[int], n: int) -> str:
    if selected is None:
        chips = '<span class="arena-bad">no readable relevance list</span>'
    else:
        chips = ""
        for i in selected:
            kind = "unknown" if not 1 <= i <= n else "hit" if i in gold else "extra"
            chips += f'<span class="arena-id {kind}" title="{kind}">{i}</span>'
        chips = chips or "<em>empty list</em>"
    missed = [i for i in sorted(gold) if selected is None or i not in selected]
    missed_html = "".join(f'<span class="arena-id missed" title="missed">{i}</span>' for i in missed)
    return (f'<p>Relevance: {chips} &nbsp; gold: {_ids(sorted(gold))}'
            + (f" &nbsp; missed: {missed_html}" if missed else "") + "</p>")


def _linked_analysis(analysis: str, n: int, anchor: str) -> str:
    def link(match: re.Match) -> str:
        parts = []
        for raw in match.group(1).split(","):
            i = int(raw)
            parts.append(f'<a class="arena-cite" href="#{anchor}-ref-{i}">{i}</a>' if 1 <= i <= n
                         else f'<span class="arena-cite-bad" title="no such reference">{i}</span>')
        return "[" + ", ".join(parts) + "]"

    return _CITE.sub(link, esc(analysis))


def _rewards_table(reward: ArenaReward) -> str:
    cells = "".join(f"<td>{v:g}</td>" for v in (reward.format, reward.accuracy, reward.relevance, reward.bonus,
                                                 reward.total))
    return ('<table class="arena-rewards"><tr><th>format</th><th>accuracy</th><th>relevance</th><th>bonus</th>'
            f"<th>total</th></tr><tr>{cells}</tr></table>")


def render_arena_answer(
    references: Sequence[Passage],
    text: str,
    *,
    gold_ids: Iterable[int] = (),
    reward: ArenaReward | None = None,
    gold_answers: Sequence[str] = (),
    anchor: str = "arena",
) -> str:
    """HTML of one ARENA reply `text` over `references` (reference i = references[i - 1]); see the module
    docstring. `gold_ids` are 1-based; `reward` (when given) fills the reward table."""
    anchor = _SAFE.sub("-", anchor) or "arena"
    n = len(references)
    parsed = parse_arena(text, n)
    gold = set(gold_ids)
    selected = set(parsed.relevance or ())
    cited = set(parsed.citations)
    verdict = '<span class="arena-ok">well-formed</span>'
    if not parsed.ok:
        part = parsed.failure.part
        where = f"&lt;{part}&gt;" if part in PARTS else esc(part)
        verdict = f'<span class="arena-bad">format fails ({where}): {esc(parsed.failure.reason)}</span>'
    answer = esc(parsed.answer) if parsed.answer else "<em>no &lt;answer&gt; part</em>"
    out = [f"<style>{ARENA_CSS}</style>", f'<div class="arena-view" id="{anchor}">',
           f'<p class="arena-answer">Answer: {answer}</p>']
    if gold_answers:
        out.append(f"<p>Gold: {esc(' | '.join(gold_answers))}</p>")
    out.append(f"<p>Format: {verdict}</p>")
    if reward is not None:
        out.append(_rewards_table(reward))
    out.append(_relevance_row(parsed.relevance, gold, n))
    analysis = _linked_analysis(parsed.analysis, n, anchor) if parsed.analysis else "<em>no &lt;analysis&gt; part</em>"
    out.append(f'<div class="arena-analysis"><strong>Analysis:</strong> {analysis}</div>')
    out.append('<ol class="arena-refs">')
    for i, passage in enumerate(references, start=1):
        classes = " ".join(c for c, on in (("selected", i in selected), ("gold", i in gold), ("cited", i in cited)) if on)
        out.append(f'<li class="arena-ref {classes}" id="{anchor}-ref-{i}"><span class="arena-ref-num">[{i}]</span> '
                   f"<strong>{esc(passage.title)}</strong>: {esc(passage.text)}</li>")
    out.append("</ol>")
    if not parsed.ok:
        out.append(f"<details><summary>raw reply</summary><pre>{esc(text)}</pre></details>")
    out.append("</div>")
    return "\n".join(out)
