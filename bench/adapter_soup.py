"""The mean of several LoRA adapters as one adapter: their factors concatenated along the rank.

For LoRA with `lora_alpha` a and rank r an adapter adds (a / r) B A to each target weight. Stacking the A factors
of n adapters (rank r each) and putting their B factors side by side gives rank n r, whose update with the same a is
(a / (n r)) sum_i B_i A_i: exactly the mean of the n updates, in one adapter the backend loads like any other (no
extra forward per read). The adapters must share the base model, target modules, rank and alpha (plain LoRA, not
rsLoRA or DoRA).

    python -m bench.adapter_soup --adapter H0/adapters/1 --adapter H1/adapters/1 --out SOUP_DIR
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file

from evorag_core.adapters.files import CONFIG_FILE, META_FILE, WEIGHTS_FILE, read_adapter_meta
from evorag_core.checksum import sha256_file

_SAME = ("r", "lora_alpha", "target_modules", "use_rslora", "use_dora")  # the base: evorag_adapter.json


def soup(adapters: Sequence[Path], out: Path) -> Path:
    """Write the mean of `adapters` (folders of `training.lora.save_adapter`) to the folder `out`."""
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
    meta = {"round_id": None, "objective": f"soup of {len(adapters)}: {', '.join(m['objective'] for m in metas)}",
            "base_model_id": metas[0]["base_model_id"], "metrics": {}, "sources": [str(a) for a in adapters],
            "sha256": sha256_file(tmp / WEIGHTS_FILE)}
    (tmp / META_FILE).write_text(json.dumps(meta, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", action="append", type=Path, required=True, help="an adapter folder (repeat)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    print(soup(args.adapter, args.out))


if __name__ == "__main__":
    main()
