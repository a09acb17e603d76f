"""ARENA's prompt (seed 004, Table 1): the question and numbered references in, three tagged parts out.

The system turn is the paper's template (its typo `]/answer>` fixed); the user turn is

    <question>{question}</question>
    <references>
    [1] {title}: {text}
    ...
    </references>

and the reply must be exactly `<relevance>[i,j]</relevance><analysis>... [i] ...</analysis><answer>...</answer>`.
References are numbered from 1 in the order given (the data set's own order in the per-question setting).
`ArenaConfig.demo` adds one hand-written demonstration exchange (about the Eiffel Tower, not taken from any
benchmark) before the real question; the paper prompts zero-shot, so it is off by default.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from evorag_core.types import Passage

__all__ = [
    "ArenaConfig",
    "ChatTemplate",
    "SYSTEM_PROMPT",
    "DEMO",
    "render_reference",
    "render_user",
    "build_prompt",
]

SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question and gives some references. "
    "The assistant should answer the question based on the references.\n"
    "User's input will always contain:\n"
    "<question>[ the question to answer ]</question>\n"
    "<references>[ references starting with numbers ]</references>\n"
    "Assistant's response must contain EXACTLY three sections:\n"
    "<relevance>[ list ONLY reference numbers that provide useful information in square brackets, e.g. [1,5] ]"
    "</relevance>\n"
    "<analysis>[ combine information from relevant references to build the answer. Explicitly mention which "
    "references support each claim ]</analysis>\n"
    "<answer>[ answer with ONLY a short phrase or single word. no explanations ]</answer>"
)

_DEMO_REFS = (
    Passage("demo-1", "Gustave Eiffel", "Gustave Eiffel (born 15 December 1832 in Dijon, France) was a French civil "
                                        "engineer whose company designed the Eiffel Tower."),
    Passage("demo-2", "Big Ben", "Big Ben is the nickname for the Great Bell of the clock at the north end of the "
                                 "Palace of Westminster in London."),
    Passage("demo-3", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, built by the company "
                                      "of Gustave Eiffel for the 1889 World's Fair."),
)
DEMO: tuple[str, tuple[Passage, ...], str] = (
    "In which city was the engineer whose company built the Eiffel Tower born?",
    _DEMO_REFS,
    "<relevance>[1,3]</relevance>\n<analysis>The Eiffel Tower was built by the company of Gustave Eiffel [3]. "
    "Gustave Eiffel was born in Dijon [1].</analysis>\n<answer>Dijon</answer>",
)


@dataclass(frozen=True)
class ArenaConfig:
    max_new_tokens: int = 192  # budget of one reply (relevance + analysis + answer)
    passage_chars: int = 0  # cut each reference to this many characters; 0 keeps the full text (the paper)
    demo: bool = False  # one demonstration exchange before the question (not in the paper)
    temperature: float = 0.0  # 0 = greedy (evaluation); sampling for training uses its own temperature
    accuracy: str = "em"  # accuracy reward: em (the paper) | f1 (ablation)
    bonus: float = 10.0  # added when format, accuracy and relevance are all 1; 0 = the no-bonus ablation

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.passage_chars < 0:
            raise ValueError(f"passage_chars must be >= 0 (0 = full text), got {self.passage_chars}")
        if self.accuracy not in ("em", "f1"):
            raise ValueError(f"accuracy must be 'em' or 'f1', got {self.accuracy!r}")
        if self.bonus < 0:
            raise ValueError(f"bonus must be >= 0, got {self.bonus}")


class ChatTemplate(Protocol):
    """What the prompt needs from a backend: its chat template (see `PolicyBackend.chat_prompt`)."""

    def chat_prompt(self, system: str, user: str, examples: Sequence[tuple[str, str]] = ()) -> str: ...


def render_reference(number: int, passage: Passage, max_chars: int = 0) -> str:
    """`[n] title: text` on one line; with max_chars > 0 the text is cut at a word boundary (+ "...")."""
    text = " ".join(passage.text.split())
    if 0 < max_chars < len(text):
        cut = text[:max_chars]
        space = cut.rfind(" ")
        text = (cut[:space] if space > max_chars // 2 else cut).rstrip() + "..."
    title = " ".join(passage.title.split())
    return f"[{number}] {title}: {text}" if title else f"[{number}] {text}"


def render_user(question: str, passages: Sequence[Passage], max_chars: int = 0) -> str:
    refs = "\n".join(render_reference(i, p, max_chars) for i, p in enumerate(passages, start=1))
    return f"<question>{' '.join(question.split())}</question>\n<references>\n{refs}\n</references>"


def build_prompt(chat: ChatTemplate, question: str, passages: Sequence[Passage], cfg: ArenaConfig) -> str:
    """The full prompt text (chat template applied, ready for the assistant's reply). With no passages the
    references block is empty (an agent may have to answer before it retrieved anything); the reply should then
    list `[]`."""
    examples = ()
    if cfg.demo:
        demo_q, demo_refs, demo_reply = DEMO
        examples = ((render_user(demo_q, demo_refs, cfg.passage_chars), demo_reply),)
    return chat.chat_prompt(SYSTEM_PROMPT, render_user(question, passages, cfg.passage_chars), examples)
