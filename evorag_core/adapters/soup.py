"""An adapter soup: the mean of several LoRA adapters as one adapter, their factors concatenated along the rank.

For LoRA with `lora_alpha` a and rank r an adapter adds (a / r) B A to each target weight. Stacking the A factors
of n adapters (rank r each) and putting their B factors side by side gives rank n r, whose update with the same a is
(a / (n r)) sum_i B_i A_i: exactly the mean of the n updates, in one adapter the backend loads like any other (no
extra forward per read). The adapters must share the base model, target modules, rank and alpha (plain LoRA, not
rsLoRA or DoRA). A served backend must allow the soup's rank (vLLM's `max_lora_rank`, 64 by default).

Why a product feature: the same round trained with two seeds moves held-out F1 by similar amounts in different
answers, and the mean update keeps what the seeds agree on (docs/answers.md, items 17 and 21: the soup of two
answer-round adapters against each of them).

- `soup_folders`: the file operation on adapter folders.
- `soup_registered`: registered adapters by name (each verified against the registry's checksum, all of one role),
  the soup written under `<home>/adapters/soups/NAME` and registered staged in their role, through
  `registry.register_verified`; it goes live like any round's adapter, through the gate or `activate`.
  CLI: `evorag adapters soup A B --name NAME`.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import torch
from safetensors.torch import load_file, save_file

from evorag_core.adapters.files import CONFIG_FILE, META_FILE, WEIGHTS_FILE, read_adapter_meta
from evorag_core.adapters.registry import register_verified, verify_registered
from evorag_core.checksum import sha256_file
from evorag_core.errors import ConfigError

if TYPE_CHECKING:
    from evorag_core.store import Adapter, Store

__all__ = ["soup_folders", "soup_registered", "soup_dir", "NAME_PATTERN"]

_SAME = ("r", "lora_alpha", "target_modules", "use_rslora", "use_dora")  # the base: evorag_adapter.json
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"  # a soup's name is its folder's name too


def soup_folders(adapters: Sequence[Path], out: Path, *, names: Sequence[str] | None = None) -> Path:
    """Write the mean of `adapters` (folders of `training.lora.save_adapter`) to the folder `out` (replaced whole:
    written beside it, then renamed). `names`: what the metadata calls the sources (default: their paths).
    ValueError if they do not fit together (nothing written)."""
    if len(adapters) < 2:
        raise ValueError("a soup needs at least two adapters")
    configs = [json.loads((Path(a) / CONFIG_FILE).read_text()) for a in adapters]
    metas = [read_adapter_meta(Path(a)) for a in adapters]
    for key in _SAME:  # target_modules is a set saved as a list: its order carries no meaning
        if len({json.dumps(sorted(v) if isinstance(v := c.get(key), list) else v) for c in configs}) != 1:
            raise ValueError(f"the adapters differ in {key}")
    if configs[0].get("use_rslora") or configs[0].get("use_dora") or configs[0].get("rank_pattern"):
        raise ValueError("only plain LoRA with one rank is supported")
    if len({m["base_model_id"] for m in metas}) != 1:
        raise ValueError("the adapters belong to different base models")
    weights = [load_file(str(Path(a) / WEIGHTS_FILE)) for a in adapters]
    if len({tuple(sorted(w)) for w in weights}) != 1:
        raise ValueError("the adapters hold different tensors")
    merged = {}
    for key in weights[0]:
        parts = [w[key] for w in weights]
        if "lora_A" in key:
            merged[key] = torch.cat(parts, dim=0).contiguous()
        elif "lora_B" in key:
            merged[key] = torch.cat(parts, dim=1).contiguous()
        else:
            raise ValueError(f"unexpected tensor {key}: only LoRA factors can be averaged this way")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(merged, str(tmp / WEIGHTS_FILE))
    config = dict(configs[0], r=configs[0]["r"] * len(adapters))
    (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    sources = list(names) if names is not None else [str(a) for a in adapters]
    meta = {"round_id": None, "objective": f"soup of {len(adapters)}: {', '.join(m['objective'] for m in metas)}",
            "base_model_id": metas[0]["base_model_id"], "metrics": {}, "sources": sources,
            "sha256": sha256_file(tmp / WEIGHTS_FILE)}
    (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def soup_dir(home: Path, name: str) -> Path:
    return Path(home) / "adapters" / "soups" / name


def soup_registered(store: Store, names: Sequence[str], name: str, home: Path, base_model_id: str) -> Adapter:
    """Register adapter `name`: the soup of the registered adapters `names`, in their role, staged (inactive).

    ConfigError for a bad request (fewer than two distinct names, an unknown one, a taken or unsafe new name,
    adapters of different roles or shapes); AdapterError if an input fails verification (corrupt, replaced since
    registration, another base model). Nothing is registered and no folder is left behind on any error."""
    if not re.fullmatch(NAME_PATTERN, name or ""):
        raise ConfigError(f"soup name {name!r}: letters, digits, '.', '_' or '-', at most 64, starting with a "
                          "letter or digit")
    if len(names) < 2 or len(set(names)) != len(names):
        raise ConfigError("a soup needs at least two different adapters")
    if name in {a.name for a in store.list_adapters()}:
        raise ConfigError(f"an adapter named {name!r} is registered already; choose another name")
    rows = []
    for n in names:
        try:
            rows.append(store.get_adapter(n))
        except KeyError:
            raise ConfigError(f"no adapter named {n!r}; see `evorag adapters list`") from None
    roles = {r.role for r in rows}
    if len(roles) != 1:
        raise ConfigError("a soup averages adapters of one role; these are "
                          + ", ".join(f"{r.name} ({r.role})" for r in rows))
    for row in rows:  # the weights the registry recorded, on this base model, before any is read
        verify_registered(row, base_model_id)
    out = soup_dir(home, name)
    try:
        soup_folders([Path(r.path) for r in rows], out, names=list(names))
    except ValueError as exc:
        raise ConfigError(f"cannot average {', '.join(names)}: {exc}") from None
    try:
        return register_verified(store, name, out, base_model_id=base_model_id,
                                 checksum=read_adapter_meta(out)["sha256"],
                                 objective=f"soup: {' + '.join(names)}", metrics={"soup_of": ",".join(names)},
                                 role=roles.pop())
    except BaseException:  # e.g. the name registered meanwhile (StoreError), or the written soup refused
        shutil.rmtree(out, ignore_errors=True)
        raise
