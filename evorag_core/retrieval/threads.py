"""CPU thread counts for the embedder (torch) and FAISS, set explicitly by entry points.

Measured on the 2-core development machine while other jobs ran: one short query through MiniLM
takes ~12-20 ms with one torch thread but often 100-300 ms with two (a descheduled worker stalls the
whole op, and torch and FAISS each bring their own OpenMP pool). Serving single queries (the env, the
studio) should call `set_cpu_threads(1)`; bulk passage embedding may use more on an idle machine.
"""
from __future__ import annotations

from evorag_core.errors import ConfigError

__all__ = ["set_cpu_threads"]


def set_cpu_threads(n: int) -> None:
    """Use `n` threads in torch and FAISS (process-wide; call once from an entry point)."""
    if n < 1:
        raise ConfigError(f"thread count must be >= 1, got {n}")
    import faiss
    import torch

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)
