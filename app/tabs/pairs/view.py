"""A pair's prompt as the conversation it is, not as the chat template's text: the agent prompt is ChatML (a system
turn, the few-shot demonstration as earlier user / assistant turns, then the state as the last user turn), and the
edit panel shows each turn with its role, the instructions and the demonstration folded away (they are the same in
every prompt), the state open. A prompt that is not ChatML (a base model without a chat template) is shown as it
is."""
from __future__ import annotations

from evorag_core.pairs.io import split_chatml

from app.common import views

__all__ = ["prompt_html"]

_EMPTY = '<div class="evo-empty" id="evo-pair-prompt">Pick a pair to see its prompt.</div>'


def _turn(role: str, content: str) -> str:
    return (f'<div class="evo-turn evo-turn-{views.esc(role)}" data-role="{views.esc(role)}">'
            f'<div class="evo-turn-role">{views.esc(role)}</div>'
            f'<div class="evo-turn-text">{views.esc(content)}</div></div>')


def _folded(summary: str, turns: list[dict[str, str]], kind: str) -> str:
    body = "".join(_turn(t["role"], t["content"]) for t in turns)
    return f'<details class="evo-fold" data-part="{kind}"><summary>{views.esc(summary)}</summary>{body}</details>'


def prompt_html(prompt: str) -> str:
    """The prompt's turns (HTML): the system turn and the earlier turns (the few-shot demonstration) folded, each
    labelled; the last user turn (the state the pair is about) open, followed by the assistant's turn the pair's two
    completions fill. Not ChatML: the raw text, labelled as such."""
    if not prompt:
        return _EMPTY
    turns = split_chatml(prompt)
    if turns is None:
        return ('<div id="evo-pair-prompt" data-format="raw"><div class="evo-h">Prompt (raw text, no chat template)'
                f'</div><div class="evo-turn-text">{views.esc(prompt)}</div></div>')
    system = [t for t in turns[:1] if t["role"] == "system"]
    rest = turns[len(system):]
    last = rest[-1] if rest and rest[-1]["role"] == "user" else None
    earlier = rest[:-1] if last is not None else rest
    parts = []
    if system:
        parts.append(_folded("System instructions", system, "system"))
    if earlier:
        examples = sum(1 for t in earlier if t["role"] == "assistant")
        parts.append(_folded(f"Few-shot demonstration: {examples} example step{'s' if examples != 1 else ''} "
                             f"({len(earlier)} turns, the same in every prompt)", earlier, "demo"))
    if last is not None:
        parts.append(_turn("user", last["content"]))
    parts.append('<div class="evo-turn evo-turn-assistant" data-role="assistant"><div class="evo-turn-role">'
                 "assistant</div><div class=\"evo-turn-text\"><i>the reply the pair compares: chosen or rejected, "
                 "below</i></div></div>")
    return f'<div id="evo-pair-prompt" data-format="chatml">{"".join(parts)}</div>'
