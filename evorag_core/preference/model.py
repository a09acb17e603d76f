"""The multi-head preference model: one linear head per signal and a combiner, with its Bradley-Terry loss; saved and loaded as safetensors."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from evorag_core.config import PreferenceConfig
from evorag_core.errors import ConfigError, ModelLoadError
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.preference.encoder import PrefixEncoder


def preference_loss(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor, direction: torch.Tensor,
                    mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """L = (1/H) sum_k mean_{i: mask[i,k]} -log sigma(direction[i,k] * (chosen[i,k] - rejected[i,k])).

    All inputs are [n, H]; `direction` is +1 where head k prefers the chosen side, -1 where it prefers the rejected
    one. Returns (L, per-head mean losses [H]; 0 for a head without pairs)."""
    z = direction * (chosen_scores - rejected_scores)
    nll = nn.functional.softplus(-z) * mask
    counts = mask.sum(0)
    per_head = nll.sum(0) / counts.clamp(min=1)
    return per_head.sum() / chosen_scores.shape[1], per_head


class PreferenceModel(nn.Module):
    """Standardize -> [shared tanh layer] -> H linear heads; `combine` weighs the heads into one overall score."""

    def __init__(self, dim: int, heads: Sequence[str] = SIGNAL_NAMES, hidden: int = 0,
                 cfg: PreferenceConfig | None = None, model_id: str = "") -> None:
        super().__init__()
        self.heads_names = tuple(heads)
        self.cfg = cfg if cfg is not None else PreferenceConfig(hidden=hidden)
        self.model_id = model_id
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.shared = nn.Linear(dim, hidden) if hidden > 0 else None
        self.heads = nn.Linear(hidden if hidden > 0 else dim, len(self.heads_names), bias=False)
        nn.init.zeros_(self.heads.weight)
        self.combine = nn.Parameter(torch.full((len(self.heads_names),), 1.0 / len(self.heads_names)))
        self.encoder: PrefixEncoder | None = None
        self.metrics: dict[str, Any] = {}

    @property
    def dim(self) -> int:
        return int(self.mean.shape[0])

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Head scores [n, H] of features [n, dim]."""
        x = (features - self.mean) / self.std
        if self.shared is not None:
            x = torch.tanh(self.shared(x))
        return self.heads(x)

    def overall(self, features: torch.Tensor) -> torch.Tensor:
        return self(features) @ self.combine

    # -- persistence ---------------------------------------------------------------------------------------------
    def save(self, folder: Path | str) -> Path:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"))
        meta = {"format": "evorag-preference-v1", "heads": list(self.heads_names), "dim": self.dim,
                "model_id": self.model_id, "config": asdict(self.cfg), "metrics": self.metrics}
        (folder / "config.json").write_text(json.dumps(meta, indent=1))
        return folder

    @classmethod
    def load(cls, folder: Path | str, encoder: PrefixEncoder | None = None) -> "PreferenceModel":
        from safetensors.torch import load_file

        folder = Path(folder)
        try:
            meta = json.loads((folder / "config.json").read_text())
            state = load_file(str(folder / "model.safetensors"))
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{folder} holds no readable preference model (config.json, model.safetensors): "
                                 f"{exc}") from exc
        if meta.get("format") != "evorag-preference-v1":
            raise ModelLoadError(f"{folder}/config.json is not an evorag preference model")
        cfg = PreferenceConfig(**{"observation": False, **meta["config"]})  # saved before observations: reply only
        model = cls(int(meta["dim"]), meta["heads"], cfg.hidden, cfg, meta.get("model_id", ""))
        model.load_state_dict(state)
        model.metrics = meta.get("metrics", {})
        if encoder is not None:
            model.attach(encoder)
        return model.eval()

    def attach(self, encoder: PrefixEncoder) -> "PreferenceModel":
        """Use `encoder` for raw (prompt, completion) inputs; it must be the model and layer/pooling trained on."""
        if self.model_id and encoder.model_id != self.model_id:
            raise ConfigError(f"this preference model was trained on features of {self.model_id!r}; "
                              f"the encoder is {encoder.model_id!r}")
        if encoder.specs[0] != (self.cfg.layer, self.cfg.pooling):
            encoder = PrefixEncoder(encoder.model, encoder.tokenizer, encoder.model_id,
                                    ((self.cfg.layer, self.cfg.pooling),), backend=encoder.backend)
        self.encoder = encoder
        return self


# -- training and evaluation -------------------------------------------------------------------------------------
