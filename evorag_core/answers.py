"""Answer text as every method reports it: one place for the clean-up of generated answers."""
from __future__ import annotations

import re

__all__ = ["clean_answer"]

_PREFIX = re.compile(r"^(so\s+)?(the\s+)?(final\s+)?(answer\s*(is)?\s*[:\-]?)\s*", re.I)
_EDGE = " .\"'“”‘’"


def clean_answer(text: str) -> str:
    """First line, without an 'Answer:' / 'So the final answer is:'-style prefix, surrounding quotes or a final
    period. `clean_answer('So the final answer is: "Sable River".\\nmore') == 'Sable River'`."""
    stripped = text.strip()
    line = stripped.split("\n", 1)[0].strip() if stripped else ""
    line = _PREFIX.sub("", line).strip()
    return line.strip(_EDGE)
