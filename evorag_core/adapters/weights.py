"""LoRA adapters hot-swapped on one loaded base model (peft's functional API, no PeftModel wrapper).

Each adapter is injected under its own name next to the others; exactly one adapter or none (the base model) is
active. With none active every LoRA layer is disabled and returns `base_layer(x)` unchanged, so the base model's
outputs are restored exactly. A folder that cannot be loaded raises `AdapterError`; whatever it had injected is
deleted again and the previous active adapter stays active.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from evorag_core.errors import AdapterError

if TYPE_CHECKING:  # torch is imported where it is used: the CLI and the studio import this module at start
    import torch

__all__ = ["AdapterSet", "read_adapter_config", "read_adapter_weights", "refuse_nonfinite"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SAVED_PREFIX = "base_model.model."  # keys written by PeftModel.save_pretrained


def read_adapter_config(path: Path):
    """The LoRA config of a peft adapter folder (AdapterError if missing, unreadable or not plain LoRA)."""
    from peft import PeftConfig, PeftType

    if not (path / "adapter_config.json").is_file():
        raise AdapterError(f"{path} holds no adapter_config.json; expected a folder written by peft's save_pretrained")
    try:
        config = PeftConfig.from_pretrained(str(path))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise AdapterError(f"{path}/adapter_config.json is unreadable: {exc}") from exc
    if config.peft_type != PeftType.LORA:
        raise AdapterError(f"{path} is a {config.peft_type} adapter; only LoRA adapters are supported")
    if getattr(config, "modules_to_save", None) or getattr(config, "trainable_token_indices", None):
        raise AdapterError(f"{path}: adapters with modules_to_save/trainable tokens are not supported, only LoRA layers")
    config.inference_mode = True
    return config


def read_adapter_weights(path: Path) -> dict[str, torch.Tensor]:
    """The adapter's tensors with the PeftModel key prefix removed (AdapterError if unreadable)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    file = path / "adapter_model.safetensors"
    try:
        if file.is_file():
            state = load_file(str(file))
        elif (path / "adapter_model.bin").is_file():
            import torch

            state = torch.load(path / "adapter_model.bin", map_location="cpu", weights_only=True)
        else:
            raise AdapterError(f"{path} holds neither adapter_model.safetensors nor adapter_model.bin")
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise AdapterError(f"{path}: the adapter weights are corrupt or unreadable: {exc}") from exc
    if not state:
        raise AdapterError(f"{path}: the adapter weight file is empty")
    refuse_nonfinite(state, file)
    return {k.removeprefix(_SAVED_PREFIX): v for k, v in state.items()}


def refuse_nonfinite(state: Mapping[str, torch.Tensor], where: Path | str) -> None:
    """Raise AdapterError if any tensor of `state` holds NaN or ±inf (a diverged round: every output would be NaN)."""
    import torch

    bad = [key for key, t in state.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise AdapterError(f"{where}: {len(bad)} of {len(state)} tensors hold NaN or infinite values (e.g. {bad[0]}); "
                           "a non-finite adapter is refused")


class AdapterSet:
    """The adapters loaded into `model` and which one is active (None = the base model)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.paths: dict[str, Path] = {}
        self.active: str | None = None

    def names(self) -> list[str]:
        return sorted(self.paths)

    def load(self, name: str, path: Path | str) -> None:
        """Inject adapter `name` from `path` without activating it."""
        from peft.functional import inject_adapter_in_model, set_peft_model_state_dict

        if not isinstance(name, str) or not _NAME.match(name):
            raise AdapterError(f"adapter name {name!r} must be 1-64 letters, digits, '_' or '-'")
        if name in self.paths:
            raise AdapterError(f"an adapter named {name!r} is already loaded; unload it first or pick another name")
        path = Path(path)
        config = read_adapter_config(path)
        state = read_adapter_weights(path)
        try:
            with warnings.catch_warnings():  # several named adapters in one model is the point here
                warnings.filterwarnings("ignore", message="Already found a `peft_config` attribute")
                inject_adapter_in_model(config, self.model, adapter_name=name)
            result = set_peft_model_state_dict(self.model, state, adapter_name=name)
            # this adapter's own keys (`...q_proj.lora_A.<name>.weight`); not a base weight whose path merely
            # contains `.<name>.` (an adapter named "1" and `model.layers.1.…base_layer.weight`)
            own = re.compile(rf"\.lora_[A-Za-z_]+\.{re.escape(name)}(\.|$)")
            missing = [k for k in result.missing_keys if own.search(k)]
            if result.unexpected_keys or missing:
                some = (list(result.unexpected_keys) + missing)[:3]
                raise AdapterError(f"{path} does not fit this base model (mismatched keys, e.g. {some})")
            self._cast(name)
            self.model.eval()  # peft injects the LoRA dropout modules in train mode: inference must not drop out
        except (AdapterError, ValueError, RuntimeError, KeyError, TypeError) as exc:
            self._purge(name)
            self._apply()
            if isinstance(exc, AdapterError):
                raise
            raise AdapterError(f"{path} is incompatible with this base model: {exc}") from exc
        self.paths[name] = path
        self._apply()

    def unload(self, name: str) -> None:
        if name not in self.paths:
            raise AdapterError(f"no adapter named {name!r} is loaded (loaded: {', '.join(self.names()) or 'none'})")
        if self.active == name:
            self.active = None
        self._purge(name)
        del self.paths[name]
        self._apply()

    def activate(self, name: str | None) -> None:
        if name is not None and name not in self.paths:
            raise AdapterError(f"no adapter named {name!r} is loaded (loaded: {', '.join(self.names()) or 'none'})")
        self.active = name
        self._apply()

    def _layers(self):
        from peft.tuners.tuners_utils import BaseTunerLayer

        return [m for m in self.model.modules() if isinstance(m, BaseTunerLayer)]

    def _cast(self, name: str) -> None:
        """Put the new LoRA weights on the base weights' device (dtype: peft keeps adapters in float32)."""
        device = next(self.model.parameters()).device
        for layer in self._layers():
            for attr in ("lora_A", "lora_B"):
                modules = getattr(layer, attr, {})
                if name in modules:
                    modules[name].to(device)

    def _purge(self, name: str) -> None:
        from peft.functional import delete_adapter

        with warnings.catch_warnings():  # "setting active adapter to ...": _apply() decides that right after
            warnings.filterwarnings("ignore", message="Adapter .* was active which is now deleted")
            delete_adapter(self.model, name, prefix="lora_")
        getattr(self.model, "peft_config", {}).pop(name, None)

    def _apply(self) -> None:
        """Make every LoRA layer agree with `self.active` (newly injected layers start enabled)."""
        for layer in self._layers():
            if self.active is None:
                layer.enable_adapters(False)
            else:
                layer.enable_adapters(True)
                layer.set_adapter(self.active, inference_mode=True)
