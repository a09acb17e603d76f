"""Shared fixtures: paths to the benchmark samples, a per-session home folder, the embedded policy LM."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.paths import BENCHMARKS, DEMO


@pytest.fixture(scope="session")
def benchmarks() -> Path:
    if not BENCHMARKS.is_dir():
        pytest.skip(f"benchmark samples not found at {BENCHMARKS}")
    return BENCHMARKS


@pytest.fixture(scope="session")
def demo_path() -> Path:
    return DEMO


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
