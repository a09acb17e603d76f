"""The one adapter load path (`adapters/load.py: load_verified`) and the callers that use it, on the tiny 2-layer
random Llama with real LoRA folders and a real SQLite store: weights garbled after activation and adapters whose
tensors are NaN are refused by the CLI (`evorag run --adapter`), the evaluation pool's worker and the rollout
worker, as at registration and activation; an intact adapter loads, and one loaded under a name is replaced, not
doubled, when that name is loaded again.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evorag_core.adapters.load import load_verified
from evorag_core.adapters.registry import activate, register_verified
from evorag_core.cli.main import main as cli_main
from evorag_core.config import PolicyConfig, apply_overrides, load_config
from evorag_core.errors import AdapterError
from evorag_core.store import open_store
from tests.lora_adapters import random_adapter
from tests.paths import DEMO

SETS = {"policy.device": "cpu", "policy.threads": 1, "env.t_max": 2, "policy.max_query_tokens": 4,
        "policy.max_answer_tokens": 4, "policy.passage_chars": 120, "env.corpus": "per-question"}
TEXT = ("Question: where?", " SEARCH: river")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def backend(tiny, tmp_path_factory):
    from evorag_core.lm.hf_backend import TransformersBackend

    torch.set_num_threads(1)  # tiny model: one thread is fastest
    return TransformersBackend(PolicyConfig(model=str(tiny), device="cpu"), tmp_path_factory.mktemp("home"))


@pytest.fixture()
def clean(backend):
    """The shared backend with no adapter loaded, before and after the test."""
    for name in backend.list_adapters():
        backend.unload_adapter(name)
    yield backend
    for name in backend.list_adapters():
        backend.unload_adapter(name)


def checksum(folder: Path) -> str:
    return json.loads((folder / "evorag_adapter.json").read_text())["sha256"]


def flip(folder: Path, n: int = 64) -> None:
    """Invert `n` bytes in the middle of the weights file (the tensors' data, not the header)."""
    weights = folder / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    mid = len(data) // 2
    data[mid:mid + n] = bytes(b ^ 0xFF for b in data[mid:mid + n])
    weights.write_bytes(bytes(data))


def home_with(tiny: Path, home: Path, folder: Path, name: str = "r1-dpo") -> None:
    """`home/evorag.db` with `folder` registered as `name` and activated (as `evorag adapters activate` does)."""
    with open_store(f"sqlite:///{home / 'evorag.db'}") as store:
        register_verified(store, name, folder, base_model_id=str(tiny), checksum=checksum(folder), objective="dpo")
        activate(store, name, str(tiny))


# -- load_verified ------------------------------------------------------------------------------------------------

def test_an_intact_adapter_loads_and_a_second_load_under_its_name_replaces_it(clean, tiny, tmp_path):
    """Load a as "x", then b as "x": one adapter "x" is loaded, and it scores as b does (b loaded as "b"), not as a."""
    a = random_adapter(tiny, tmp_path / "a", 1)
    b = random_adapter(tiny, tmp_path / "b", 2)
    load_verified(clean, "x", a, checksum(a))
    clean.activate("x")
    with_a = clean.sequence_logprob(*TEXT)
    load_verified(clean, "x", b)
    load_verified(clean, "b", b)
    assert clean.list_adapters() == ["b", "x"]
    clean.activate("x")
    with_x = clean.sequence_logprob(*TEXT)
    clean.activate("b")
    assert with_x == pytest.approx(clean.sequence_logprob(*TEXT), abs=1e-6) and with_x != pytest.approx(with_a)


def test_weights_flipped_after_activation_are_refused_at_load(clean, tiny, tmp_path):
    """Registered and activated intact; then 64 bytes of the weights inverted: the sha256 no longer matches the one
    recorded, so the load is refused and nothing is loaded."""
    folder = random_adapter(tiny, tmp_path / "adapters" / "1", 1)
    home_with(tiny, tmp_path, folder)
    flip(folder)
    with pytest.raises(AdapterError, match=r"adapter 'r1-dpo' refused: .*sha256"):
        load_verified(clean, "r1-dpo", folder, checksum(folder))
    assert clean.list_adapters() == []


def test_a_folder_replaced_after_registration_is_refused_against_the_registry_checksum(clean, tiny, tmp_path):
    """Another intact adapter written over the registered folder (its own metadata consistent): its sha256 is not the
    registry's, so a load that names the registry's checksum is refused."""
    folder = random_adapter(tiny, tmp_path / "adapters" / "1", 1)
    recorded = checksum(folder)
    other = random_adapter(tiny, tmp_path / "other", 2)
    for f in other.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    with pytest.raises(AdapterError, match="records other weights than the registry"):
        load_verified(clean, "r1", folder, recorded)
    assert clean.list_adapters() == []


# -- non-finite adapters ------------------------------------------------------------------------------------------

def test_a_nan_adapter_is_refused_at_registration_activation_and_load(clean, tiny, tmp_path):
    """Every lora_B tensor NaN, saved with a matching checksum (tiny model: 2 layers x q/k/v/o = 8 lora_B among 16
    tensors): registration records nothing; a row written straight to the store is refused at activation (nothing
    live); load_verified and the backend's own loader both refuse it."""
    folder = random_adapter(tiny, tmp_path / "nan", 1, fill=float("nan"))
    with open_store(f"sqlite:///{tmp_path / 'evorag.db'}") as store:
        with pytest.raises(AdapterError, match=r"refused: .*8 of 16 tensors hold NaN or infinite values"):
            register_verified(store, "r8-dpo", folder, base_model_id=str(tiny), checksum=checksum(folder))
        assert store.list_adapters() == []
        store.register_adapter("r8-dpo", str(folder), base_model=str(tiny), checksum=checksum(folder))
        with pytest.raises(AdapterError, match="NaN or infinite.*the base model stays live"):
            activate(store, "r8-dpo", str(tiny))
        assert store.active_adapter() is None
    with pytest.raises(AdapterError, match="NaN or infinite"):
        load_verified(clean, "r8-dpo", folder, checksum(folder))
    with pytest.raises(AdapterError, match="NaN or infinite"):
        clean.load_adapter("r8-dpo", folder)
    assert clean.list_adapters() == []


# -- the callers ----------------------------------------------------------------------------------------------------

def _run_argv(tiny: Path, home: Path, *extra: str) -> list[str]:
    argv = ["run", "--question", "demo-001", "--data", str(DEMO), "--home", str(home), "--policy", "lm", *extra]
    for key, value in {**SETS, "policy.model": str(tiny)}.items():
        argv += ["--set", f"{key}={value}"]
    return argv


@pytest.mark.slow  # one LM episode on the tiny model
def test_cli_run_with_an_adapter_flipped_after_activation_exits_with_the_refusal(tiny, tmp_path, capsys, monkeypatch):
    """`evorag run --policy lm --adapter r1-dpo`: intact, one episode runs (exit 0, strict JSON on stdout); with 64
    bytes flipped after activation it exits 2 and says why, and prints no episode."""
    monkeypatch.delenv("EVORAG_DB_URL", raising=False)
    folder = random_adapter(tiny, tmp_path / "adapters" / "1", 1)
    home_with(tiny, tmp_path, folder)
    assert cli_main(_run_argv(tiny, tmp_path, "--adapter", "r1-dpo", "--json")) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"bare {c} in --json output"))
    assert out["question_id"] == "demo-001" and "adapter r1-dpo" in out["label"]
    flip(folder)
    assert cli_main(_run_argv(tiny, tmp_path, "--adapter", "r1-dpo", "--json")) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "adapter 'r1-dpo' refused" in captured.err and "sha256" in captured.err


def test_cli_run_with_a_nan_adapter_folder_exits_with_the_refusal(tiny, tmp_path, capsys):
    """`--adapter <folder>` of an adapter whose B matrices are NaN (its own checksum consistent): exit 2."""
    folder = random_adapter(tiny, tmp_path / "nan", 1, fill=float("nan"))
    assert cli_main(_run_argv(tiny, tmp_path, "--adapter", str(folder))) == 2
    assert "NaN or infinite" in capsys.readouterr().err


def _cfg(tiny: Path):
    return apply_overrides(load_config(), {**SETS, "policy.model": str(tiny)})


def test_the_evaluation_pool_worker_refuses_flipped_weights(tiny, tmp_path):
    """An `EvalWorker` (what each pool process runs) asked for an adapter folder whose weights were flipped: the
    AdapterError reaches the caller before any question runs; the base model still evaluates."""
    from evorag_core.evaluation.pool import EvalSpec, EvalWorker

    folder = random_adapter(tiny, tmp_path / "adapters" / "1", 1)
    flip(folder)
    worker = EvalWorker(EvalSpec(_cfg(tiny), str(tmp_path), str(DEMO)))
    with pytest.raises(AdapterError, match="sha256"):
        worker.run(str(folder), 0)
    index, result = worker.run(None, 0)
    assert index == 0 and result.question_id == "demo-001"


def test_the_rollout_worker_refuses_flipped_or_nan_weights(tiny, tmp_path):
    """`RolloutWorker` (every executor's worker) with a flipped or a NaN adapter folder: refused while it starts."""
    from evorag_core.pairs.executors import RolloutWorker, WorkerSpec

    flipped = random_adapter(tiny, tmp_path / "adapters" / "1", 1)
    flip(flipped)
    with pytest.raises(AdapterError, match="sha256"):
        RolloutWorker(WorkerSpec(_cfg(tiny), str(tmp_path), str(DEMO), adapter=str(flipped)))
    nan = random_adapter(tiny, tmp_path / "adapters" / "2", 2, fill=float("nan"))
    with pytest.raises(AdapterError, match="NaN or infinite"):
        RolloutWorker(WorkerSpec(_cfg(tiny), str(tmp_path), str(DEMO), adapter=str(nan)))


def test_an_adapter_named_like_a_layer_index_loads(clean, tiny, tmp_path):
    """A round's folder is `adapters/<round id>/`, so `evorag eval --adapter <home>/adapters/1` loads it under the
    name "1". Its own keys are `…lora_A.1.weight`; the base weights `model.layers.1.…base_layer.weight` are not
    its keys (they were taken for missing ones, and every round-1 adapter given by folder was refused)."""
    folder = random_adapter(tiny, tmp_path / "adapters" / "1", 1)
    load_verified(clean, "1", folder)
    assert "1" in clean.list_adapters()
