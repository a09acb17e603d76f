"""Shared fixtures: paths to the benchmark samples, one cache folder for the run's homes, a per-session home folder,
the embedded policy LM; and the order in which parallel workers take the test files."""
from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.paths import BENCHMARKS, DEMO

# Parallel runs (`make test`: two xdist workers on two cores): one torch/OpenMP thread per process, in the workers and
# every process they start (studios, their training workers, CLIs), unless the caller set OMP_NUM_THREADS. Two
# processes of two threads each on two cores stall in OpenMP's spin-waits: a DPO step on the embedded model took
# twice as long beside the other worker's tests (tests/training/test_dpo.py, 59 -> 118 s). Tests that need another
# count set it themselves and restore it. OMP_WAIT_POLICY=PASSIVE on top was tried and not kept: 23.5 min and 2,426
# CPU-s against 20.1 and 2,159 the run before (host speed moves runs by +-10 %; llama.cpp's servers, OpenMP too, +47 %
# CPU), bench/results/suite_time.json.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # read at torch's import: too late for this process
        sys.modules["torch"].set_num_threads(1)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread_after_the_module():
    """Under xdist a test module leaves torch at one thread: a module that set two (tests/methods/test_dynakrag.py
    did) ran every later test of its worker on two threads beside the other worker's, its embedded-LM test at 39.5 s
    against 4.9 s on one. Checked when the module's fixtures are torn down (this one is set up first, so it ends
    last): the count is put back to one and the module's last test errors, naming it."""
    yield
    torch = sys.modules.get("torch")
    if torch is None or int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) < 2:
        return
    threads = torch.get_num_threads()
    if threads != 1:
        torch.set_num_threads(1)
        pytest.fail(f"this module left torch at {threads} threads (one per process under xdist: restore what you set)")


@pytest.fixture(scope="session")
def benchmarks() -> Path:
    if not BENCHMARKS.is_dir():
        pytest.skip(f"benchmark samples not found at {BENCHMARKS}")
    return BENCHMARKS


@pytest.fixture(scope="session")
def demo_path() -> Path:
    return DEMO


@pytest.fixture(scope="session", autouse=True)
def shared_cache(tmp_path_factory):
    """EVORAG_CACHE_DIR for every home of the run, in this process and the processes it starts (studios, CLIs,
    workers): the embedded model is dequantized once and each corpus embedded and indexed once per run, not once per
    home (`evorag_core.config.cache_dir`). Under xdist the workers share it (the run's base folder). A cache folder set
    by the caller is kept. Tests of the cache itself clear the variable (tests/retrieval/test_retrieval.py)."""
    if os.environ.get("EVORAG_CACHE_DIR"):
        yield Path(os.environ["EVORAG_CACHE_DIR"])
        return
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "evorag-cache"
    root.mkdir(exist_ok=True)
    os.environ["EVORAG_CACHE_DIR"] = str(root)
    yield root
    os.environ.pop("EVORAG_CACHE_DIR", None)


@pytest.fixture(scope="module")
def tiny_demo(tmp_path_factory) -> Path:
    """A tiny random 2-layer Llama whose tokenizer was trained on the first 20 demo questions (one per module)."""
    import json

    from tests.tiny_model import build_tiny_model

    texts = [json.loads(line)["question"] for line in DEMO.open(encoding="utf-8")][:20]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts)


@pytest.fixture(scope="session")
def session_home(tmp_path_factory) -> Path:
    """One home folder per test session: indexes and the dequantized model are built once and reused."""
    return tmp_path_factory.mktemp("evorag_home")


# -- the embedded policy LM (slow tests): converted once per session ---------------------------------------------

@pytest.fixture(scope="session")
def lm_home(tmp_path_factory):
    """Converts the GGUF once; yields (home, first_model, seconds of the converting load).

    One torch thread: on a shared 2-core machine two OpenMP threads stall badly whenever other processes compete
    for the cores (measured: a decode step 60-80 ms with 1 thread vs 0.5-1.9 s with 2 under load)."""
    import torch

    from evorag_core.lm.loading import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    home = tmp_path_factory.mktemp("policy-home")
    start = time.perf_counter()
    model, _, _ = load_model("embedded", home, device="cpu")
    yield home, model, time.perf_counter() - start
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def backend(lm_home):
    """Exact numerics (no fp16 decode or bf16 prefill copies): these tests hold cache reuse, batching and scoring to
    fp32 agreement within 2e-3; tests/lm/test_half_decode.py bounds the fast paths' drift separately."""
    from evorag_core.config import PolicyConfig
    from evorag_core.lm.hf_backend import TransformersBackend

    return TransformersBackend(PolicyConfig(device="cpu", half_decode_rows=0, prefill_dtype="float32"), lm_home[0])


# -- parallel runs (`make test`: pytest-xdist, `-n 2 --dist loadfile`) ------------------------------------------------

# A rough cost per test for ordering files: a browser test (a studio page, often a studio process) and a slow test (the
# embedded LM, training, subprocesses) cost seconds to minutes, the rest a fraction of a second.
_COST = {"browser": 15.0, "slow": 10.0}
_COST_OTHER = 0.5


def _file_cost(items) -> float:
    marks = ({m.name for m in item.iter_markers()} for item in items)
    return sum(max([_COST[m] for m in names if m in _COST], default=_COST_OTHER) for names in marks)


def pytest_collection_modifyitems(config, items):
    """Under xdist, the test files go out costliest first (longest-processing-time first): the files of many fast
    tests come last and fill the gaps, so no minutes-long file starts when the other worker is almost done. Inside a
    file the order is kept (its module fixtures are built once per worker). xdist's own `loadfile` order (files with
    the most tests first) put the one-test, minutes-long files last: a 2-minute tail on one worker. Plain `pytest`
    (no workers) keeps the collection order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    by_file: dict[str, list] = defaultdict(list)
    for item in items:
        by_file[item.nodeid.split("::")[0]].append(item)
    order = sorted(by_file, key=lambda f: -_file_cost(by_file[f]))  # stable: equal costs keep collection order
    items[:] = [item for f in order for item in by_file[f]]
