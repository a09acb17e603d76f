"""Adapter folders on disk: the file names, reading the metadata, verifying a folder and loading it onto a model.

An adapter folder holds peft's `adapter_model.safetensors` and `adapter_config.json` plus our
`evorag_adapter.json` (round id, objective, base model id, metrics, sha256 of the weights file); `training.lora`
writes it atomically. `verify_adapter` checks the three files, the checksum, the base model id and the tensor shapes.
"""
from __future__ import annotations

import json
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from safetensors import SafetensorError, safe_open

from evorag_core.checksum import sha256_file
from evorag_core.errors import AdapterError
from evorag_core.adapters.weights import refuse_nonfinite

if TYPE_CHECKING:
    from peft import PeftModel
    from torch import nn

__all__ = ["WEIGHTS_FILE", "CONFIG_FILE", "META_FILE", "REQUIRED_META", "quiet_peft", "read_adapter_meta",
           "verify_adapter", "load_adapter"]

WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
META_FILE = "evorag_adapter.json"
REQUIRED_META = ("round_id", "objective", "base_model_id", "metrics")


@contextmanager
def quiet_peft():
    """peft 0.21 reads `model.is_gradient_checkpointing`, which transformers 5.24 deprecates with a FutureWarning on
    every wrap: nothing a user can act on, so that one warning is silenced here (every other warning still shows)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def read_adapter_meta(path: Path) -> dict[str, Any]:
    """The parsed `evorag_adapter.json` of an adapter folder (not verified; see `verify_adapter`)."""
    meta_path = Path(path) / META_FILE
    try:
        return json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(f"{path}: missing {META_FILE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AdapterError(f"{meta_path}: not valid JSON ({exc})") from None


def verify_adapter(path: Path, base_model_id: str, model: nn.Module | None = None) -> None:
    """Raise AdapterError unless `path` is a complete, intact adapter for `base_model_id`.

    Checks: the three files exist; the weights' sha256 matches the metadata; the recorded base model id equals
    `base_model_id`; every lora_A is [r, in] and lora_B is [out, r] with r from adapter_config.json; and, when
    `model` (the base model, without LoRA) is given, that in/out match the targeted Linear layers; no tensor holds
    NaN or ±inf.
    """
    path = Path(path)
    if not path.is_dir():
        raise AdapterError(f"adapter folder {path} does not exist")
    for name in (WEIGHTS_FILE, CONFIG_FILE, META_FILE):
        if not (path / name).is_file():
            raise AdapterError(f"{path}: missing {name}")
    meta = read_adapter_meta(path)
    expected = meta.get("sha256")
    actual = sha256_file(path / WEIGHTS_FILE)
    if actual != expected:
        raise AdapterError(f"{path / WEIGHTS_FILE}: sha256 {actual[:12]}… does not match the recorded {str(expected)[:12]}…")
    if meta.get("base_model_id") != base_model_id:
        raise AdapterError(f"{path}: adapter was trained on {meta.get('base_model_id')!r}, not {base_model_id!r}")
    try:
        rank = int(json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))["r"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise AdapterError(f"{path / CONFIG_FILE}: unreadable LoRA rank ({exc})") from None
    _check_shapes(path / WEIGHTS_FILE, rank, model)
    from safetensors.torch import load_file

    refuse_nonfinite(load_file(str(path / WEIGHTS_FILE)), path / WEIGHTS_FILE)


def _check_shapes(weights: Path, rank: int, model: nn.Module | None) -> None:
    modules = dict(model.named_modules()) if model is not None else {}
    try:
        with safe_open(str(weights), framework="pt") as fh:
            shapes = {key: tuple(fh.get_slice(key).get_shape()) for key in fh.keys()}
    except (SafetensorError, OSError) as exc:
        raise AdapterError(f"{weights}: unreadable safetensors file ({exc})") from None
    if not any(".lora_A." in key for key in shapes):
        raise AdapterError(f"{weights}: holds no LoRA tensors")
    for key, shape in shapes.items():
        if ".lora_A." not in key and ".lora_B." not in key:
            continue
        is_a = ".lora_A." in key
        if len(shape) != 2 or (shape[0] if is_a else shape[1]) != rank:
            raise AdapterError(f"{weights}: {key} has shape {shape}, inconsistent with rank {rank}")
        if model is None:
            continue
        target = _base_module(modules, key)
        if target is None:
            raise AdapterError(f"{weights}: {key} targets a layer the base model does not have")
        want = target.in_features if is_a else target.out_features
        got = shape[1] if is_a else shape[0]
        if got != want:
            raise AdapterError(f"{weights}: {key} has shape {shape}; the base layer needs {'in' if is_a else 'out'}={want}")


def _base_module(modules: Mapping[str, nn.Module], key: str) -> nn.Module | None:
    """Map a saved key like `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight` to the base Linear."""
    name = key.split(".lora_")[0]
    for prefix in ("base_model.model.", ""):
        if name.startswith(prefix) and name[len(prefix):] in modules:
            module = modules[name[len(prefix):]]
            return module.base_layer if hasattr(module, "base_layer") else module
    return None


def load_adapter(
    model: nn.Module,
    path: Path,
    base_model_id: str,
    *,
    adapter_name: str = "default",
    trainable: bool = False,
) -> PeftModel:
    """Verify `path` and load it onto `model` (modified in place) as `adapter_name`.

    A plain model becomes a PeftModel; on a PeftModel the adapter is added beside the existing ones. (peft is imported
    here, not with the module: importing it costs ~4 s of CPU, and every CLI command and studio start imports this
    module through the registry.)
    """
    from peft import PeftModel

    base = model.get_base_model() if isinstance(model, PeftModel) else model
    verify_adapter(path, base_model_id, base)
    if isinstance(model, PeftModel):
        model.load_adapter(str(path), adapter_name=adapter_name, is_trainable=trainable)
        return model
    with quiet_peft():
        return PeftModel.from_pretrained(model, str(path), adapter_name=adapter_name, is_trainable=trainable)
