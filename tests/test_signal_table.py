"""The one table of reward signals (evorag_core/signal_table.py): everything that names signals or weights reads
it, and every row is complete - its function, its weight's three columns in the config, the studio's words."""
from __future__ import annotations

import dataclasses

from evorag_core.config import WeightsConfig, load_config
from evorag_core.env.scheduler import SIGNAL_WEIGHT, WEIGHT_NAMES
from evorag_core.signal_table import SIGNAL_TABLE
from evorag_core.env.signals import SIGNAL_NAMES, SIGNALS


def test_the_signals_and_weights_come_from_the_table_in_its_order():
    assert SIGNAL_NAMES == ("ret", "act", "dup", "bt", "ref", "step", "ans")  # SPEC §2's order
    assert WEIGHT_NAMES == ("beta", "lambda", "gamma", "delta", "rho", "eta", "kappa")
    assert dict(SIGNAL_WEIGHT) == {row.name: row.weight for row in SIGNAL_TABLE}


def test_every_row_has_its_function_its_weight_columns_and_its_words():
    fields = {f.name for f in dataclasses.fields(WeightsConfig)}
    columns = {f"{row.weight}_{c}" for row in SIGNAL_TABLE for c in ("start", "mid", "end")}
    assert fields == columns and set(WeightsConfig.RULES) == columns
    assert set(SIGNALS) == set(SIGNAL_NAMES)
    loaded = dataclasses.asdict(load_config().weights)  # configs/default.toml names every column
    assert set(loaded) == columns
    for row in SIGNAL_TABLE:
        assert row.symbol and row.label and row.colour.startswith("#")
    assert len({row.name for row in SIGNAL_TABLE}) == len({row.weight for row in SIGNAL_TABLE}) == len(SIGNAL_TABLE)
