"""bench/adapter_soup.py: two adapters' factors concatenated along the rank are one verified adapter whose weight
update is exactly the mean of theirs; adapters that do not fit together are refused."""
from __future__ import annotations

import json

import pytest
import torch

from bench.adapter_soup import soup
from evorag_core.adapters.files import CONFIG_FILE, load_adapter, read_adapter_meta
from tests.lora_adapters import random_adapter

pytestmark = pytest.mark.slow


def _deltas(model_dir, folder) -> dict[str, torch.Tensor]:
    """Each LoRA layer's weight update (peft's own get_delta_weight) with `folder` loaded on the tiny model."""
    from transformers import AutoModelForCausalLM

    model = load_adapter(AutoModelForCausalLM.from_pretrained(model_dir), folder, str(model_dir))
    return {name: module.get_delta_weight("default").detach().clone() for name, module in model.named_modules()
            if hasattr(module, "get_delta_weight") and "default" in getattr(module, "lora_A", {})}


def test_the_soup_is_the_mean_update_and_loads_verified(tiny, tmp_path):
    a = random_adapter(tiny, tmp_path / "a", seed=1, base_id=str(tiny))
    b = random_adapter(tiny, tmp_path / "b", seed=2, base_id=str(tiny))
    out = soup([a, b], tmp_path / "soup")
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
        soup([a, b], tmp_path / "soup")
    with pytest.raises(ValueError, match="at least two"):
        soup([a], tmp_path / "soup")
    assert not (tmp_path / "soup").exists()
