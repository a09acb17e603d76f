"""Evaluation episodes on a pool of processes: the greedy agent episodes `evaluate` runs, several at a time.

Each worker process loads the data file, the retrieval runtime and the policy LM once (`EvalSpec`), and a LoRA
adapter the first time a job names it; a job is (adapter folder or None, question index in the data file) and
returns that question's `QuestionResult`. `EvalPool.runner(adapter)` gives `evaluate(..., run=...)` a runner that
sends the questions still to do to the pool and yields their results in question order (the rollout executors'
reorder buffer), so the results file reads as a serial run's does and resumes the same way: `evaluate` keeps the
one home for writing, resuming and summarising. One pool serves many policies (an ablation's base model and
every adapter): the model is loaded once per worker, not once per policy.

The episodes are greedy, so which process runs a question does not change its result, except where another torch
thread count moves a floating-point tie between two choices.
"""
from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from evorag_core.config import Config
from evorag_core.methods.base import QuestionResult
from evorag_core.pairs.executors import in_order

if TYPE_CHECKING:
    from multiprocessing.pool import Pool

    from evorag_core.types import Question

__all__ = ["EvalSpec", "EvalWorker", "EvalPool"]


@dataclass(frozen=True)
class EvalSpec:
    """What a worker needs to rebuild the driver's evaluation setting in its own process (all picklable)."""

    cfg: Config  # env.t_max is the evaluation episodes' T_max
    home: str
    data_path: str  # the data file; jobs name its questions by index
    threads: int = 1  # torch threads per worker (policy.threads wins if set)


class EvalWorker:
    """One evaluation worker: the runtime and the policy LM, loaded once; adapters loaded when first named."""

    def __init__(self, spec: EvalSpec):
        import torch

        from evorag_core.data.datasets import load_dataset
        from evorag_core.lm.backends import policy_backend
        from evorag_core.runtime import Runtime

        torch.set_num_threads(spec.threads)
        dataset = load_dataset(Path(spec.data_path))
        self.questions = dataset.questions
        self.runtime = Runtime(spec.cfg, Path(spec.home), dataset)
        self.backend = policy_backend(spec.cfg.policy, Path(spec.home))
        self._adapters: dict[str, str] = {}  # folder -> the name it was loaded under

    def run(self, adapter: str | None, index: int) -> tuple[int, QuestionResult]:
        from evorag_core.methods.agent import agent_on

        question = self.questions[index]
        started = time.perf_counter()
        result = agent_on(self.backend, self.runtime, self._adapter(adapter)).run_question(question)
        return index, replace(result, seconds=result.seconds or time.perf_counter() - started)

    def _adapter(self, folder: str | None) -> str | None:
        if folder is None:
            return None
        if folder not in self._adapters:
            name = f"eval-{len(self._adapters)}"
            self.backend.load_adapter(name, folder)  # verifies the checksum; AdapterError reaches the driver
            self._adapters[folder] = name
        return self._adapters[folder]


_WORKER: EvalWorker | None = None


def _init(spec: EvalSpec) -> None:
    global _WORKER
    _WORKER = EvalWorker(spec)


def _run(job: tuple[str | None, int]) -> tuple[int, QuestionResult]:
    assert _WORKER is not None, "the pool's initializer did not run"
    return _WORKER.run(*job)


class EvalPool:
    """`workers` processes (spawned on first use, kept until `close`) evaluating questions of `spec.data_path`."""

    def __init__(self, spec: EvalSpec, workers: int):
        from evorag_core.data.datasets import load_dataset

        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.spec, self.workers = spec, workers
        self._index = {q.id: i for i, q in enumerate(load_dataset(Path(spec.data_path)).questions)}
        self._pool: Pool | None = None

    def runner(self, adapter: str | Path | None = None) -> Callable[[list[Question]], Iterator[QuestionResult]]:
        """For `evaluate(method, questions, run=pool.runner(adapter))`: the base model (None) or an adapter folder."""
        folder = None if adapter is None else str(adapter)

        def run(questions: list[Question]) -> Iterator[QuestionResult]:
            missing = [q.id for q in questions if q.id not in self._index]
            if missing:
                raise KeyError(f"questions not in {self.spec.data_path}: {', '.join(missing[:5])}")
            indices = [self._index[q.id] for q in questions]
            if indices:
                yield from in_order(self._get().imap_unordered(_run, [(folder, i) for i in indices]), indices)

        return run

    def _get(self) -> Pool:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")  # fork after torch / faiss threads have started is unsafe
            self._pool = ctx.Pool(self.workers, initializer=_init, initargs=(self.spec,))
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def __enter__(self) -> EvalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
