"""The steering prompt: the paper's decomposition instruction (seed 002, Appendix G.1) over the question and the
passages on the branch ("evidences"), with an optional worked example turn for small models."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from evorag_core.types import Passage

if TYPE_CHECKING:
    from evorag_core.lm.base import PolicyBackend

__all__ = ["SYSTEM_PROMPT", "DEMO_TURN", "render_user", "build_prompt"]

SYSTEM_PROMPT = """#Decomposition#
Task: You will be provided with a user question and evidences that may help to answer the question. Decompose the complex user question into single-hop retrievable sub-questions following these rules:
Steps:
1. Base Questions (<base-Q>):
- Decompose the current-hop question directly from user question, taking the evidences for reference (if the user question is "A → B → C", and evidences cover "A", then decompose into "B". Note do not repeat questions already answered by the provided evidences).
- Each must target a single fact (WHO/WHEN/WHERE/etc.)
- If evidences already answer the user question, respond with "stop retrieval" as the base question.
2. Predicted Questions (<predicted-Q>):
- Forecast next-hop questions based on the base questions only if you have knowledge to any base questions
- If you have no knowledge to predict further questions, or evidences already answers the user question, respond with "none" as the predicted question.
Keep your thinking process useful and brief.
Wrap reasoning process inside: <think></think>.
Wrap each of the base questions (or "stop retrieval") inside: <base-Q></base-Q>.
Wrap each of the predicted question (or "none") inside: <predicted-Q></predicted-Q>"""

DEMO_TURN = (
    "User question: In which country is the university where the botanist Marie Holt studied?\nEvidences: none",
    "<think>First find where Marie Holt studied, then the country of that university.</think>\n"
    "<base-Q>Where did the botanist Marie Holt study?</base-Q>\n"
    "<predicted-Q>In which country is the university Marie Holt attended?</predicted-Q>",
)


def _cut(text: str, chars: int) -> str:
    if chars <= 0 or len(text) <= chars:
        return text
    return text[:chars].rsplit(" ", 1)[0] + "..."


def render_user(question: str, passages: Sequence[Passage], chars: int = 300) -> str:
    if not passages:
        return f"User question: {question}\nEvidences: none"
    lines = [f"[{i}] {p.title}: {_cut(p.text, chars)}" for i, p in enumerate(passages, 1)]
    return f"User question: {question}\nEvidences:\n" + "\n".join(lines)


def build_prompt(backend: PolicyBackend, question: str, passages: Sequence[Passage], chars: int = 300,
                 demo: bool = True) -> str:
    """The chat prompt (the backend's template) for one expansion of a branch whose passages are `passages`."""
    return backend.chat_prompt(SYSTEM_PROMPT, render_user(question, passages, chars), [DEMO_TURN] if demo else [])
