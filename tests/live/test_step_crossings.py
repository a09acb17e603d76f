"""How many package boundaries one Step click crosses (issue #45; the chain is written down in docs/design.md,
"Step click path").

A crossing is a call from one package into another (`app.tabs`, `evorag_core.live`, `evorag_core.env`, ...), made by
the click's glue: the studio handler (here the test stands in for it: 1 crossing, into the live episode), the live
episode, and the env's store-row mapping (`evorag_core/env/rows.py`). What the environment, the policy and the store
do inside the call they were handed is theirs and not counted.

The mid-episode oracle step on demo-001 (t = 2, SEARCH 'Mirrow'), with a store: click -> live; live -> methods (the
policy's act on the kept view); live -> env (step); live -> env.rows (the step's row); env.rows -> store (the `Step`
row); live -> store (`add_step`: the row, a judgment, the finish in one transaction) = 6. It was 9 before the live
episode kept the step result's view and end instead of asking the environment (`done` twice, `view` once) and
wrote the step in one store call.
"""
from __future__ import annotations

import sys

import pytest

from evorag_core.config import load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.env.actions import Search
from evorag_core.live.episode import LiveEpisode, LivePolicy
from evorag_core.methods.oracle import ORACLE_LABEL, OraclePolicy
from evorag_core.runtime import Runtime
from evorag_core.store import open_store
from tests.paths import DEMO

_GLUE = ("evorag_core.live", "evorag_core.env.rows")


def _package(module: str | None) -> str | None:
    parts = (module or "").split(".")
    return ".".join(parts[:2]) if parts[0] in ("evorag_core", "app", "training") and len(parts) > 1 else None


def _crossings(call) -> list[str]:
    """`call()` run under a profiler; the crossings its glue made, in order, as 'caller -> callee.function'."""
    seen: list[str] = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        caller = frame.f_back.f_globals.get("__name__") or ""
        if not caller.startswith(_GLUE):
            return
        callee = _package(frame.f_globals.get("__name__"))
        if callee is not None and callee != _package(caller):
            seen.append(f"{caller} -> {callee}.{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


@pytest.fixture()
def episode(session_home, tmp_path):
    runtime = Runtime(load_config(), session_home, load_dataset(DEMO))
    store = open_store(f"sqlite:///{tmp_path / 'live.db'}")
    ep = LiveEpisode.open(runtime, runtime.dataset.get("demo-001"), LivePolicy("oracle", ORACLE_LABEL, OraclePolicy()),
                          store, stage="discovery", schedule="time-dynamic", preset="full")
    ep.step()  # t = 1: SEARCH 'Ansel Travine'
    yield ep
    store.close()


def test_a_mid_episode_oracle_step_crosses_at_most_six_package_boundaries(episode):
    steps: list = []
    chain = ["click -> evorag_core.live.step", *_crossings(lambda: steps.append(episode.step()))]
    assert steps[0].action == Search("Mirrow") and not episode.done
    assert len(chain) <= 6, "\n".join(chain)
    called = {c.split(" -> ")[1] for c in chain}  # the tracer saw the step's work (it did not count nothing)
    assert {"evorag_core.methods.act", "evorag_core.env.step", "evorag_core.store.add_step"} <= called, chain
