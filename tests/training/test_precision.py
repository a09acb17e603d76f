"""train.dtype resolution (training/precision.py): "auto" picks bf16 only where the device multiplies it natively."""
from __future__ import annotations

import logging

import pytest
import torch

from evorag_core.config import ConfigError, TrainConfig
from training import loop
from training.objectives.dpo.trainer import dpo_config
from training.precision import _warn_emulated, resolve_train_dtype

AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"


def test_auto_is_bf16_only_on_a_cpu_with_native_bf16():
    assert resolve_train_dtype("auto", "cpu", AMX) == "bfloat16"
    assert resolve_train_dtype("auto", "cpu", AVX2) == "float32"
    assert resolve_train_dtype("float32", "cpu", AMX) == "float32"


def test_explicit_bf16_on_an_emulating_cpu_is_kept_with_one_warning(caplog):
    _warn_emulated.cache_clear()
    with caplog.at_level(logging.WARNING, logger="evorag.train"):
        assert resolve_train_dtype("bfloat16", "cpu", AVX2) == "bfloat16"
        assert resolve_train_dtype("bfloat16", "cpu", AVX2) == "bfloat16"
    warnings = [r for r in caplog.records if "emulates" in r.getMessage()]
    assert len(warnings) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="evorag.train"):
        resolve_train_dtype("bfloat16", "cpu", AMX)
    assert not caplog.records


def test_unknown_dtype_is_refused_by_the_config_and_the_resolver():
    with pytest.raises(ConfigError, match="dtype"):
        TrainConfig(dtype="float16")
    assert TrainConfig(dtype="auto").dtype == "auto"
    with pytest.raises(ValueError, match="train.dtype"):
        resolve_train_dtype("fp8", "cpu", AVX2)


def test_the_training_paths_follow_the_resolution(monkeypatch, tmp_path):
    """DPO's trainer flag and the RL loops' autocast both read the same resolution."""
    cfg = TrainConfig(dtype="auto")
    for cpuinfo, expect in ((AMX, True), (AVX2, False)):
        monkeypatch.setattr("training.precision.cpu_has_native_bf16", lambda info=None, c=cpuinfo: "amx_bf16" in c)
        assert dpo_config(cfg, tmp_path, use_cpu=True).bf16 is expect
        with loop.autocast(cfg, torch.device("cpu")):
            assert torch.is_autocast_enabled("cpu") is expect
