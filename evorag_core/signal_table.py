"""The seven reward signals in one table: each signal's key, the weight that multiplies it, the weight's symbol, its
name in words and its colour in charts. A leaf module (no imports): the signals (`env/signals.py`), the scheduler
(`env/scheduler.py`), the config's weight rules, the studio's legends (`app/common/views.py`) and the benches read their
names from here.

Adding a signal: a row here, its function in `env/signals.py` (`SIGNALS`), and its three weight columns
(`<weight>_start/_mid/_end`) in `config.WeightsConfig` and `configs/default.toml` (tests/test_signal_table.py
checks that every row has all of them).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SignalRow", "SIGNAL_TABLE"]


@dataclass(frozen=True)
class SignalRow:
    name: str  # the signal r_t^(k), as steps record it ("ret")
    weight: str  # the weight w_k(t) that multiplies it ("beta")
    symbol: str  # the weight's symbol in the paper and the studio ("β")
    label: str  # the signal in words ("retrieval bonus")
    colour: str  # its colour in the studio's charts


SIGNAL_TABLE: tuple[SignalRow, ...] = (
    SignalRow("ret", "beta", "β", "retrieval bonus", "#1f77b4"),
    SignalRow("act", "lambda", "λ", "retrieval action penalty", "#ff7f0e"),
    SignalRow("dup", "gamma", "γ", "sub-query overlap", "#2ca02c"),
    SignalRow("bt", "delta", "δ", "backtrack penalty", "#d62728"),
    SignalRow("ref", "rho", "ρ", "refusal reward", "#9467bd"),
    SignalRow("step", "eta", "η", "step cost", "#8c564b"),
    SignalRow("ans", "kappa", "κ", "answer correctness", "#e377c2"),
)
