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
    loaded = dataclasses.asdict(load_config().weights)  # every column, its default from the row
    assert set(loaded) == columns
    for row in SIGNAL_TABLE:
        assert row.symbol and row.label and row.colour.startswith("#")
    assert len({row.name for row in SIGNAL_TABLE}) == len({row.weight for row in SIGNAL_TABLE}) == len(SIGNAL_TABLE)


# A throwaway signal, added as docs/contributing.md says: one row in signal_table.py and its function in SIGNALS.
_ROW = '    SignalRow("probe", "mu", "μ", "throwaway probe signal", "#17becf", 0.25, 0.5, 0.75),\n'
_FUNCTION = '''

def probe_signal(ctx: StepContext) -> float:
    """+1 for a SEARCH whose query names a year, else 0 (a throwaway signal of tests/test_signal_table.py)."""
    return 1.0 if isinstance(ctx.action, Search) and any(w.isdigit() for w in ctx.action.query.split()) else 0.0
'''
_PROBE = r'''
import dataclasses, sys
from pathlib import Path

import evorag_core
from evorag_core.config import EnvConfig, RewardConfig, WeightsConfig, load_config
from evorag_core.env.actions import Answer, Search
from evorag_core.env.env import RagEnv
from evorag_core.env.judges import GoldCoverageJudge
from evorag_core.env.scheduler import PRESETS, WeightTable, step_reward, weights_at
from evorag_core.errors import ConfigError
from evorag_core.retrieval import BM25Retriever
from evorag_core.retrieval.embedding import Embedder
from evorag_core.types import Corpus, Passage, Question
from app.common import views

assert Path(evorag_core.__file__).is_relative_to(Path(sys.argv[1])), evorag_core.__file__  # the edited copy
w = load_config().weights  # configs/default.toml is not edited: the row's values are the defaults
assert (w.mu_start, w.mu_mid, w.mu_end) == (0.25, 0.5, 0.75)
assert load_config(overrides={"weights.mu_end": "2.0"}).weights.mu_end == 2.0
try:
    WeightsConfig(mu_mid=-1.0)
    raise AssertionError("a negative weight was accepted")
except ConfigError as exc:
    assert "weights.mu_mid" in str(exc)
assert "probe" in PRESETS["full"] and "probe" not in PRESETS["best2"]
assert weights_at("discovery", 1, 3)["mu"] == 0.25 and weights_at("refinement", 3, 3)["mu"] == 0.75
assert weights_at("discovery", 1, 3, preset="best2")["mu"] == 0.0

passages = (Passage("p0", "Ashcombe", "Ashcombe is a market town founded in 1412 by the weaver Ida Marsh."),
            Passage("p1", "Velmora River", "The Velmora River flows through Ashcombe before reaching the sea."))
question = Question(id="q", dataset="test", question="When was the town on the Velmora River founded?",
                    answers=("1412",), passages=passages, gold_pids=frozenset({"p0", "p1"}))
corpus = Corpus(passages)
env = RagEnv(corpus, BM25Retriever(corpus, backend="bm25s"), Embedder().encode, GoldCoverageJudge(),
             EnvConfig(t_max=3, top_k=1), RewardConfig(stage="discovery"))
env.reset(question)
first, second = env.step(Search("Velmora River town")), env.step(Search("town founded 1412"))
last = env.step(Answer("1412"))
assert (first.signals["probe"], second.signals["probe"], last.signals["probe"]) == (0.0, 1.0, 0.0)
assert list(first.signals)[-1] == "probe" and second.weights["mu"] == 0.375  # p(2) = 0.5 between 0.25 and 0.5
others = {k: v for k, v in second.signals.items() if k != "probe"}
assert abs(second.reward - (step_reward(others, second.weights) + 0.375)) < 1e-9
assert env.record.steps[1].signals["probe"] == 1.0

assert views.SIGNAL_LABELS["probe"] == "throwaway probe signal" and views.WEIGHT_SYMBOLS["mu"] == "μ"
assert ">probe</th>" in views.steps_table(env.record)
names = [trace.name for trace in views.weights_figure("discovery", "time-dynamic", "full", 3, 2).data]
assert "μ (probe)" in names, names
tuned = WeightTable.from_config(dataclasses.replace(w, mu_start=1.5))
assert tuned.start["mu"] == 1.5 and tuned.to_config().mu_start == 1.5
print("probe signal: ok")
'''


def test_a_new_signal_is_one_table_row_and_its_function(tmp_path):
    """In a copy of the library, add a throwaway signal with exactly two edits - its row (signal_table.py) and its
    function in SIGNALS (env/signals.py) - then, in a process importing that copy: the config has its three weight
    fields with the row's values as defaults and the rules of every weight, the scheduler weights it, an episode's
    steps carry it and its reward counts it, and the studio's step table and weights chart name it."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import evorag_core

    lib = tmp_path / "evorag_core"
    shutil.copytree(Path(evorag_core.__file__).parent, lib, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(Path(evorag_core.__file__).parent.parent / "configs", tmp_path / "configs")  # not edited
    table, signals = lib / "signal_table.py", lib / "env" / "signals.py"
    last_row = table.read_text().rindex("\n)") + 1
    table.write_text(table.read_text()[:last_row] + _ROW + table.read_text()[last_row:])
    text = signals.read_text()
    anchor = "\n\nSignalFn = Callable"
    assert anchor in text and '    "ans": answer_correctness,\n' in text
    entry = '    "ans": answer_correctness,\n'
    text = text.replace(anchor, _FUNCTION + anchor).replace(entry, entry + '    "probe": probe_signal,\n')
    signals.write_text(text)

    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "probe signal: ok" in done.stdout

    # The row alone (no function) is refused at import, naming the signal.
    signals.write_text(text.replace('    "probe": probe_signal,\n', ""))
    done = subprocess.run([sys.executable, "-c", "import evorag_core.env.signals"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "['probe']" in done.stderr
