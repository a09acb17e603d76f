"""The studio's Activate button through its handler: real Services, a real SQLite store, the tiny 2-layer random Llama
as the studio's policy model and real LoRA adapter folders. A good adapter goes live; one whose weights were garbled
or deleted, or that was trained on another base model, is refused with a message naming the reason and what stays
live, and the previous adapter stays live in the store and in the model the next LM episode runs on.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.paths import DEMO
from app.common.policies import LIVE
from app.common.services import Services
from app.common.session import EpisodeSettings
from app.common.wiring import error_message
from app.tabs.episode import handlers as episode_handlers
from app.tabs.training import handlers as training_handlers
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import AdapterError
from tests.lora_adapters import random_adapter



@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def tiny_services(tiny: Path, home: Path, tmp_path: Path, **overrides: str) -> Services:
    """Services on the tiny model in `home` with a store in `tmp_path`; `overrides`: more `section.key` settings."""
    torch.set_num_threads(1)  # tiny model: one thread is fastest
    cfg = apply_overrides(load_config(), {"policy.model": str(tiny), "policy.device": "cpu", "policy.threads": 1,
                                          "env.t_max": 4, "policy.max_answer_tokens": 4, **overrides})
    return Services(cfg, home, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")


@pytest.fixture()
def svc(tiny, session_home, tmp_path):
    services = tiny_services(tiny, session_home, tmp_path)
    yield services
    services.close()


def make_adapter(cfg, base_id: str, folder: Path, seed: int) -> Path:
    """A LoRA adapter with random (non-zero) B matrices for the tiny model, saved with its checksum; `base_id` is
    the base model id written into its metadata."""
    return random_adapter(cfg.policy.model, folder, seed, cfg.train, base_id)


def register(svc: Services, name: str, folder: Path) -> None:
    checksum = json.loads((folder / "evorag_adapter.json").read_text())["sha256"]
    svc.store().register_adapter(name, str(folder), base_model=svc.cfg.policy.model, objective="dpo",
                                 checksum=checksum)


def refusal(svc: Services, name: str) -> str:
    """Click Activate on `name`, expecting a refusal; returns the one line the page's error toast shows."""
    with pytest.raises(AdapterError) as caught:
        training_handlers.activate_adapter(svc, name)
    return error_message(caught.value)


def _good_live_and_three_bad(svc: Services, tmp_path: Path) -> None:
    """Register good, garbled, deleted and foreign; activate good; then garble, delete."""
    base = svc.cfg.policy.model
    folders = {name: make_adapter(svc.cfg, base if name != "foreign" else "someone/else-135m",
                                  tmp_path / "adapters" / name, seed)
               for seed, name in enumerate(("good", "garbled", "deleted", "foreign"), start=1)}
    for name, folder in folders.items():
        register(svc, name, folder)
    assert "Adapter good is live" in training_handlers.activate_adapter(svc, "good")
    weights = folders["garbled"] / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-16] + b"\x00" * 16)
    shutil.rmtree(folders["deleted"])


def test_activate_refuses_garbled_deleted_or_foreign_adapters_and_the_previous_stays_live(svc, tmp_path):
    """good -> live. garbled (last 16 bytes of the weights zeroed after registration): sha256 mismatch. deleted (its
    folder removed): missing folder. foreign (trained on another base model): base model mismatch. After each
    refusal the store's active row and the page's live name are still 'good'."""
    _good_live_and_three_bad(svc, tmp_path)
    msg = refusal(svc, "garbled")
    assert "adapter 'garbled' refused" in msg and "sha256" in msg and msg.endswith("adapter good stays live")
    msg = refusal(svc, "deleted")
    assert "adapter 'deleted' refused" in msg and "does not exist" in msg and msg.endswith("adapter good stays live")
    msg = refusal(svc, "foreign")
    assert "trained on 'someone/else-135m'" in msg and msg.endswith("adapter good stays live")

    assert svc.store().active_adapter().name == "good"
    assert training_handlers.training_view(svc).live == "good"
    assert 'id="evo-live-adapter">good<' in training_handlers.header_status(svc)


@pytest.mark.slow
def test_after_a_refusal_the_next_lm_episode_runs_on_the_previous_adapter(svc, tmp_path):
    """The model side: after garbled is refused, an LM episode on the live adapter (retrieval index, tiny LM) runs
    on 'good', the only adapter loaded into the studio's backend."""
    _good_live_and_three_bad(svc, tmp_path)
    refusal(svc, "garbled")
    _, session = episode_handlers.start_episode(svc, EpisodeSettings(policy=LIVE, question_id="demo-001"))
    episode_handlers.step_episode(session)
    assert session.policy.adapter == "good"
    backend = svc.policies._get_backend()
    assert backend.active_adapter == "good" and backend.list_adapters() == ["good"]


def test_activate_with_nothing_live_keeps_the_base_model(svc, tmp_path):
    """No adapter active yet: a refused activation leaves none active and says the base model stays live."""
    folder = make_adapter(svc.cfg, svc.cfg.policy.model, tmp_path / "adapters" / "only", 7)
    register(svc, "only", folder)
    (folder / "adapter_config.json").unlink()
    msg = refusal(svc, "only")
    assert "missing adapter_config.json" in msg and msg.endswith("the base model stays live")
    assert svc.store().active_adapter() is None and training_handlers.training_view(svc).live == "base model"
    with pytest.raises(ValueError, match="choose an adapter"):
        training_handlers.activate_adapter(svc, "")


def test_the_policy_loader_refuses_weights_flipped_after_activation(svc, tmp_path):
    """good is activated intact, then 64 bytes of its weights are inverted on disk: "LM · live adapter" (and
    "lm:good") is refused by the studio's policy loader with the sha256 reason, and no adapter reaches the model."""
    from app.common.handlers import adapter_lookup

    folder = make_adapter(svc.cfg, svc.cfg.policy.model, tmp_path / "adapters" / "good", 1)
    register(svc, "good", folder)
    assert "Adapter good is live" in training_handlers.activate_adapter(svc, "good")
    weights = folder / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = bytes(b ^ 0xFF for b in data[len(data) // 2:len(data) // 2 + 64])
    weights.write_bytes(bytes(data))
    for choice in (LIVE, "lm:good"):
        with pytest.raises(AdapterError, match=r"adapter 'good' refused: .*sha256"):
            svc.policies.make(choice, adapter_lookup=adapter_lookup(svc))
    assert svc.policies._get_backend().list_adapters() == []
