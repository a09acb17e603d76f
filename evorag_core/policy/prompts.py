"""The agent's prompt: what the policy LM reads at each step, and the text form of its actions.

Layout (user turn of the model's chat template), most stable part first so that the prompt of step t+1 shares a
long token prefix with step t's and the backend's prefix cache only runs the new hop:

    Question: ...
    Search 1: <sub-query>
    [1] <title>: <passage text cut to passage_chars>
    ...
    Dropped searches: <queries removed by BACKTRACK>        (only when there are some)
    Step t of T_max. Your action:

The assistant's reply (the completion) is one line: `SEARCH: <query>`, `BACKTRACK`, `ANSWER: <answer>` or
`REFUSE`. `LABELS` are the strings scored as continuations to choose the action; SEARCH and ANSWER include the
colon, their argument follows it (" <text>").

Before the real user turn the prompt shows one hand-written demonstration episode (`DEMO`, about the Eiffel
Tower; not taken from any benchmark): two searches and an answer, as earlier chat turns. Measured on the 135M model
it is what makes replies well-formed: without it the model copies the instruction text into its queries and puts
most of its probability on none of the four labels. The demo is a fixed prefix, so the prefix cache pays for it once.
"""
from __future__ import annotations

from typing import Sequence

from evorag_core.env.state import AgentView, Hop
from evorag_core.types import Passage

__all__ = [
    "SYSTEM_PROMPT",
    "LABELS",
    "ARGUMENT_ACTIONS",
    "DEMO",
    "render_user",
    "render_passage",
    "render_search_result",
    "completion_text",
    "demo_turns",
]

SYSTEM_PROMPT = (
    "You answer questions by searching Wikipedia. Each reply is one line with one action.\n"
    "To search, write SEARCH: and a few keywords about one fact you still need.\n"
    "To answer, write ANSWER: and the answer in a few words, taken from the passages.\n"
    "Write BACKTRACK to drop the last search if its passages were useless, "
    "or REFUSE if the question cannot be answered."
)

_DEMO_Q = "In which country was the designer of the Eiffel Tower born?"
_DEMO_HOPS = (
    Hop("Eiffel Tower designer", (Passage("demo-1", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice "
                                          "tower in Paris, designed by the company of the engineer Gustave Eiffel."),)),
    Hop("Gustave Eiffel birthplace", (Passage("demo-2", "Gustave Eiffel", "Gustave Eiffel (born 15 December 1832 "
                                              "in Dijon, France) was a French civil engineer."),)),
)
DEMO: tuple[tuple[AgentView, str], ...] = (
    (AgentView(_DEMO_Q, (), (), 1, 20), "SEARCH: Eiffel Tower designer"),
    (AgentView(_DEMO_Q, _DEMO_HOPS[:1], (), 2, 20), "SEARCH: Gustave Eiffel birthplace"),
    (AgentView(_DEMO_Q, _DEMO_HOPS, (), 3, 20), "ANSWER: France"),
)

LABELS: dict[str, str] = {"SEARCH": "SEARCH:", "BACKTRACK": "BACKTRACK", "ANSWER": "ANSWER:", "REFUSE": "REFUSE"}
ARGUMENT_ACTIONS = frozenset({"SEARCH", "ANSWER"})


def render_passage(number: int, passage: Passage, max_chars: int) -> str:
    """`[n] title: text`, the text cut at a word boundary to at most `max_chars` characters (+ "...")."""
    text = " ".join(passage.text.split())
    if len(text) > max_chars:
        cut = text[:max_chars]
        space = cut.rfind(" ")
        text = (cut[:space] if space > max_chars // 2 else cut).rstrip() + "..."
    return f"[{number}] {passage.title}: {text}"


def _hop_lines(passages: Sequence[Passage], numbers: dict[str, int], passage_chars: int) -> list[str]:
    """One hop's passages as the prompt shows them: new ones numbered on from `numbers` (updated), ones shown
    before as `(again [n] title)`."""
    if not passages:
        return ["(no passages found)"]
    lines = []
    for passage in passages:
        if passage.pid in numbers:
            lines.append(f"(again [{numbers[passage.pid]}] {passage.title})")
            continue
        numbers[passage.pid] = len(numbers) + 1
        lines.append(render_passage(numbers[passage.pid], passage, passage_chars))
    return lines


def render_search_result(view: AgentView, passages: Sequence[Passage], passage_chars: int) -> str:
    """What a SEARCH taken at `view` returned (`passages`), as the next prompt would show that hop: the preference
    model reads it after the candidate's reply line (evorag_core/preference/, `observation`)."""
    numbers: dict[str, int] = {}
    for hop in view.chain:
        _hop_lines(hop.passages, numbers, passage_chars)
    return "\n".join(["Found:", *_hop_lines(passages, numbers, passage_chars)])


def render_user(view: AgentView, passage_chars: int) -> str:
    lines = [f"Question: {view.question}"]
    numbers: dict[str, int] = {}
    for i, hop in enumerate(view.chain, start=1):
        lines.append(f"Search {i}: {hop.query}")
        lines.extend(_hop_lines(hop.passages, numbers, passage_chars))
    if not view.chain:
        lines.append("No searches yet.")
    if view.dropped:
        lines.append("Dropped searches: " + "; ".join(view.dropped))
    lines.append(f"Step {view.t} of {view.t_max}. Your action:")
    return "\n".join(lines)


def completion_text(name: str, argument: str = "") -> str:
    """The reply line of an action, e.g. `SEARCH: who wrote Hamlet`."""
    return f"{LABELS[name]} {argument}" if name in ARGUMENT_ACTIONS else LABELS[name]


def demo_turns(passage_chars: int) -> list[tuple[str, str]]:
    """The demonstration as (user, assistant) chat turns."""
    return [(render_user(view, passage_chars), reply) for view, reply in DEMO]
