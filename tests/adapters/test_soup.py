"""Adapter soups (evorag_core/adapters/soup.py): two adapters' factors concatenated along the rank are one verified
adapter whose weight update is exactly the mean of theirs; registered adapters of one role become a staged adapter
of that role through `evorag adapters soup`; a request that cannot be served (mixed roles, an unknown, taken or
unsafe name, an input replaced since registration, adapters that do not fit together) is refused with nothing
registered and no folder left behind. The tiny 2-layer Llama, real LoRA folders, a real SQLite store."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evorag_core.adapters.files import CONFIG_FILE, WEIGHTS_FILE, load_adapter, read_adapter_meta
from evorag_core.adapters.registry import activate, register_verified
from evorag_core.adapters.soup import soup_dir, soup_folders, soup_registered
from evorag_core.cli.main import main as cli_main
from evorag_core.errors import AdapterError, ConfigError
from evorag_core.store import open_store
from tests.lora_adapters import random_adapter

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _deltas(model_dir, folder) -> dict[str, torch.Tensor]:
    """Each LoRA layer's weight update (peft's own get_delta_weight) with `folder` loaded on the tiny model."""
    from transformers import AutoModelForCausalLM

    model = load_adapter(AutoModelForCausalLM.from_pretrained(model_dir), folder, str(model_dir))
    return {name: module.get_delta_weight("default").detach().clone() for name, module in model.named_modules()
            if hasattr(module, "get_delta_weight") and "default" in getattr(module, "lora_A", {})}


def test_the_soup_is_the_mean_update_and_loads_verified(tiny, tmp_path):
    a = random_adapter(tiny, tmp_path / "a", seed=1, base_id=str(tiny))
    b = random_adapter(tiny, tmp_path / "b", seed=2, base_id=str(tiny))
    out = soup_folders([a, b], tmp_path / "soup")
    config = json.loads((out / CONFIG_FILE).read_text())
    assert config["r"] == 2 * json.loads((a / CONFIG_FILE).read_text())["r"]
    assert read_adapter_meta(out)["base_model_id"] == str(tiny)
    da, db, ds = _deltas(tiny, a), _deltas(tiny, b), _deltas(tiny, out)  # load verifies each
    assert ds and set(ds) == set(da) == set(db)
    for name in ds:
        assert not torch.allclose(da[name], db[name])
        torch.testing.assert_close(ds[name], (da[name] + db[name]) / 2, atol=1e-6, rtol=1e-5)


def test_adapters_that_do_not_fit_together_are_refused(tiny, tmp_path):
    a = random_adapter(tiny, tmp_path / "a", seed=1, base_id=str(tiny))
    b = random_adapter(tiny, tmp_path / "b", seed=2, base_id="another-model")
    with pytest.raises(ValueError, match="different base models"):
        soup_folders([a, b], tmp_path / "soup")
    with pytest.raises(ValueError, match="at least two"):
        soup_folders([a], tmp_path / "soup")
    assert not (tmp_path / "soup").exists()


@pytest.fixture()
def registry(tiny, tmp_path):
    """(store, home, base id): readers r1, r2, r3 (r3 a copy of r2's folder) and a policy adapter p1."""
    store = open_store(f"sqlite:///{tmp_path / 'evorag.db'}")
    base_id = str(tiny)
    for name, seed, role in (("r1", 1, "reader"), ("r2", 2, "reader"), ("p1", 3, "policy")):
        folder = random_adapter(tiny, tmp_path / "adapters" / name, seed=seed, base_id=base_id)
        register_verified(store, name, folder, base_model_id=base_id, checksum=read_adapter_meta(folder)["sha256"],
                          role=role)
    yield store, tmp_path, base_id
    store.close()


def test_the_cli_registers_a_staged_soup_in_its_inputs_role(registry, tiny, capsys):
    store, home, base_id = registry
    args = ["--home", str(home), "--db", str(store.engine.url), "--model", base_id, "--json"]
    assert cli_main(["adapters", "soup", "r1", "r2", "--name", "r12", *args]) == 0
    said = json.loads(capsys.readouterr().out)
    row = store.get_adapter("r12")
    assert said == {"adapter": "r12", "role": "reader", "path": row.path, "soup_of": ["r1", "r2"]}
    assert (row.role, row.active, row.round_id, row.objective) == ("reader", False, None, "soup: r1 + r2")
    assert Path(row.path) == soup_dir(home, "r12") and row.checksum == read_adapter_meta(row.path)["sha256"]
    assert read_adapter_meta(row.path)["sources"] == ["r1", "r2"]
    d1, d2, ds = (_deltas(tiny, store.get_adapter(n).path) for n in ("r1", "r2", "r12"))
    for name in ds:
        torch.testing.assert_close(ds[name], (d1[name] + d2[name]) / 2, atol=1e-6, rtol=1e-5)
    assert activate(store, "r12", base_id).active  # verified like any adapter (no evaluation yet: no reason needed)
    assert cli_main(["adapters", "list", *args[:-1]]) == 0  # the text table: columns line up past the soup's objective
    header, *lines = capsys.readouterr().out.splitlines()
    soup_line = next(line for line in lines if "r12" in line)
    assert "soup: r1 + r2" in soup_line and soup_line.index("reader") == header.index("role")


def test_a_soup_that_cannot_be_made_registers_nothing(registry, capsys):
    store, home, base_id = registry
    before = [a.name for a in store.list_adapters()]
    refusals = [
        (["r1", "p1"], "ok", ConfigError, r"one role; these are r1 \(reader\), p1 \(policy\)"),
        (["r1", "nope"], "ok", ConfigError, "no adapter named 'nope'"),
        (["r1"], "ok", ConfigError, "at least two different"),
        (["r1", "r1"], "ok", ConfigError, "at least two different"),
        (["r1", "r2"], "r1", ConfigError, "registered already"),
        (["r1", "r2"], "../escape", ConfigError, "soup name"),
    ]
    for names, name, error, match in refusals:
        with pytest.raises(error, match=match):
            soup_registered(store, names, name, home, base_id)
    with pytest.raises(AdapterError, match="'r1' refused: .* not 'other-base'"):
        soup_registered(store, ["r1", "r2"], "ok", home, "other-base")
    weights = Path(store.get_adapter("r2").path) / WEIGHTS_FILE  # replaced after registration
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(AdapterError, match="'r2' refused"):
        soup_registered(store, ["r1", "r2"], "ok", home, base_id)
    assert [a.name for a in store.list_adapters()] == before
    assert not (home / "adapters" / "soups").exists() or not any((home / "adapters" / "soups").iterdir())
    args = ["--home", str(home), "--db", str(store.engine.url), "--model", base_id]
    assert cli_main(["adapters", "soup", "r1", "p1", "--name", "mixed", *args]) == 2  # a clear error, exit 2
    assert "one role" in capsys.readouterr().err
