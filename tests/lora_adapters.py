"""Random LoRA adapters for the tests' tiny models: non-zero B matrices (so an adapter changes the scores), saved
with their checksum as a training round saves one. The one home of what several test modules need."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from evorag_core.config import TrainConfig


def random_adapter(model: Path | str, folder: Path, seed: int, train: TrainConfig | None = None,
                   base_id: str | None = None, scale: float = 0.5, fill: float | None = None) -> Path:
    """Attach LoRA (`train`'s rank and targets; the defaults if None) to `model`, fill every B matrix with
    N(0, scale²) draws seeded by `seed` (or, given `fill`, with that value: NaN makes a diverged adapter), and save
    it to `folder` with `base_id` (default: `model`) as its base."""
    from transformers import AutoModelForCausalLM

    from training.lora import attach_lora, save_adapter

    lora = attach_lora(AutoModelForCausalLM.from_pretrained(model),
                       dataclasses.replace(train if train is not None else TrainConfig(), seed=seed))
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed)
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale if fill is None else torch.full(p.shape, fill))
    save_adapter(lora, folder, {"round_id": None, "objective": "test", "base_model_id": base_id or str(model),
                                "metrics": {}})
    return folder
