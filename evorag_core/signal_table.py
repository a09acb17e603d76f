"""The seven reward signals in one table: each signal's key, the weight that multiplies it, the weight's symbol, its
name in words and its colour in charts. A leaf module (no imports): the signals (`env/signals.py`), the scheduler
(`env/scheduler.py`), the config's weight rules, the studio's legends (`app/common/views.py`) and the benches read their
names from here.

A row also holds its weight's Start / Mid / End values (the paper's Table 2): they are the defaults of the config's
`[weights]` fields `<weight>_start/_mid/_end`, which `config.WeightsConfig` builds from this table.

Adding a signal: a row here and its function in `env/signals.py` (`SIGNALS`); nothing else is required
(tests/test_signal_table.py adds a throwaway signal that way and runs an episode with it).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SignalRow", "SIGNAL_TABLE", "WEIGHT_COLUMNS"]

# The schedule's three endpoints per weight (SPEC §3): Discovery interpolates start -> mid, Refinement mid -> end.
WEIGHT_COLUMNS: tuple[str, ...] = ("start", "mid", "end")


@dataclass(frozen=True)
class SignalRow:
    name: str  # the signal r_t^(k), as steps record it ("ret")
    weight: str  # the weight w_k(t) that multiplies it ("beta")
    symbol: str  # the weight's symbol in the paper and the studio ("β")
    label: str  # the signal in words ("retrieval bonus")
    colour: str  # its colour in the studio's charts
    start: float  # the weight's Start / Mid / End values (SPEC Table 2): the [weights] defaults
    mid: float
    end: float


SIGNAL_TABLE: tuple[SignalRow, ...] = (
    SignalRow("ret", "beta", "β", "retrieval bonus", "#1f77b4", 2.0, 1.0, 0.5),
    SignalRow("act", "lambda", "λ", "retrieval action penalty", "#ff7f0e", 1.5, 0.8, 0.4),
    SignalRow("dup", "gamma", "γ", "sub-query overlap", "#2ca02c", 0.1, 0.5, 1.2),
    SignalRow("bt", "delta", "δ", "backtrack penalty", "#d62728", 0.3, 0.5, 1.0),
    SignalRow("ref", "rho", "ρ", "refusal reward", "#9467bd", 0.5, 0.5, 0.5),
    SignalRow("step", "eta", "η", "step cost", "#8c564b", 0.02, 0.05, 0.1),
    SignalRow("ans", "kappa", "κ", "answer correctness", "#e377c2", 0.05, 0.1, 1.0),
)
