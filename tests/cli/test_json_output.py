"""`--json` prints one strict JSON value (cli/common.py: print_json): a NaN or infinite number, which `json.dump`
would write as a bare `NaN`/`Infinity` no JSON parser accepts, is written as null."""
from __future__ import annotations

import json

from evorag_core.cli.common import finite_json, print_json


def strict(text: str):
    def refuse(constant: str):
        raise AssertionError(f"bare {constant} in --json output")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_become_null_at_any_depth(capsys):
    """{logprob: NaN} in a step's info, an inf return, a -inf in a tuple: null each; finite numbers stay."""
    nan, inf = float("nan"), float("inf")
    episode = {"steps": [{"t": 1, "info": {"logprob": nan, "candidates": [{"logprob": -1.5}]}}], "return": inf,
               "range": (-inf, 0.25), "answer": "Sable River", "ok": True}
    print_json(episode)
    out = strict(capsys.readouterr().out)
    assert out == {"steps": [{"t": 1, "info": {"logprob": None, "candidates": [{"logprob": -1.5}]}}], "return": None,
                   "range": [None, 0.25], "answer": "Sable River", "ok": True}
    assert finite_json([1, 2.0, "x", None]) == [1, 2.0, "x", None]
