"""LoRA for training: the peft config, attaching a fresh adapter, and saving it atomically as an adapter folder
(the folder format, verification and loading live in `evorag_core.adapters.files`)."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn

from evorag_core.adapters.files import CONFIG_FILE, META_FILE, REQUIRED_META, WEIGHTS_FILE, quiet_peft
from evorag_core.checksum import sha256_file
from evorag_core.config import TrainConfig
from evorag_core.errors import AdapterError

__all__ = ["LLAMA_TARGETS", "lora_config", "attach_lora", "save_adapter"]

LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")  # attention projections of Llama-style models (SmolLM2)


def lora_config(cfg: TrainConfig) -> LoraConfig:
    """LoRA on q/k/v/o with rank, alpha and dropout from the [train] section."""
    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(LLAMA_TARGETS),
        bias="none",
        task_type="CAUSAL_LM",
    )


def attach_lora(model: nn.Module, cfg: TrainConfig) -> PeftModel:
    """Wrap `model` (modified in place) with a fresh trainable LoRA adapter named "default".

    LoRA's A matrices are drawn from a generator seeded with cfg.seed (the global RNG state is restored after),
    B starts at zero, so the wrapped model initially computes exactly what the base model computes.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        with quiet_peft():
            return get_peft_model(model, lora_config(cfg))


def save_adapter(
    model: PeftModel,
    out_dir: Path,
    meta: Mapping[str, Any],
    *,
    adapter_name: str = "default",
    overwrite: bool = False,
) -> str:
    """Write the adapter `adapter_name` of `model` to `out_dir` atomically; returns the weights' sha256.

    `meta` must hold round_id, objective, base_model_id and metrics (JSON-serialisable); the checksum and the
    weights file name are added. An existing non-empty `out_dir` raises AdapterError unless overwrite=True.
    """
    missing = [k for k in REQUIRED_META if k not in meta]
    if missing:
        raise AdapterError(f"adapter metadata lacks {', '.join(missing)} (required: {', '.join(REQUIRED_META)})")
    if adapter_name not in getattr(model, "peft_config", {}):
        raise AdapterError(f"model has no LoRA adapter named {adapter_name!r}")
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise AdapterError(f"{out_dir} already exists and is not empty; pick a new folder or pass overwrite=True")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp, selected_adapters=[adapter_name], safe_serialization=True)
        written = tmp / adapter_name if adapter_name != "default" else tmp  # peft puts other names in subfolders
        for name in (WEIGHTS_FILE, CONFIG_FILE):
            if written != tmp:
                os.replace(written / name, tmp / name)
        checksum = sha256_file(tmp / WEIGHTS_FILE)
        record = {**dict(meta), "weights_file": WEIGHTS_FILE, "sha256": checksum}
        (tmp / META_FILE).write_text(json.dumps(record, indent=2, sort_keys=True, default=str), encoding="utf-8")
        tmp.chmod(0o755)
        _move_into_place(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return checksum


def _move_into_place(tmp: Path, out_dir: Path) -> None:
    if out_dir.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.replace(out_dir, old / "adapter")
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)
