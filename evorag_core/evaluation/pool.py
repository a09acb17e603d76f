"""Evaluation episodes on a pool of processes: what `evaluate` runs, several questions at a time.

Each worker process loads the data file, the retrieval runtime and the method once (`EvalSpec`: any method of the
registry, with its options); for the agent, one policy LM per worker serves the base model and every LoRA adapter a
job names (loaded when first named). A job is (adapter folder or None, question index in the data file) and returns
that question's `QuestionResult`. `EvalPool.runner(adapter)` gives `evaluate(..., run=...)` a runner that sends the
questions still to do to the pool and yields their results in question order (the rollout executors' reorder
buffer), so the results file reads as a serial run's does and resumes the same way: `evaluate` keeps the one home for
writing, resuming and summarising. `evorag eval --workers N` and `evorag ablate --workers N` use it; one pool serves
an ablation's base model and all its adapters.

Which process runs a question does not change its result (the evaluated methods decode greedily), except where
another torch thread count moves a floating-point tie between two choices.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from evorag_core.config import Config
from evorag_core.errors import ConfigError
from evorag_core.methods.base import MethodOptions, QuestionResult
from evorag_core.pairs.executors import in_order
from evorag_core.procs import core_share, pool_child_init, pool_context

if TYPE_CHECKING:
    from multiprocessing.pool import Pool

    from evorag_core.evaluation.runner import Method
    from evorag_core.types import Question

__all__ = ["EvalSpec", "EvalWorker", "EvalPool"]


@dataclass(frozen=True)
class EvalSpec:
    """What a worker needs to rebuild the driver's evaluation setting in its own process (all picklable)."""

    cfg: Config  # env.t_max is the evaluation episodes' T_max
    home: str
    data_path: str  # the data file; jobs name its questions by index
    threads: int = 1  # torch threads per worker (policy.threads wins if set)
    method: str = "agent"  # a name of the method registry
    options: MethodOptions = MethodOptions()
    corpus_from: tuple[str, ...] = ()  # retrieve from the pooled passages of these files (`--corpus-from`)


def _thread_share(spec: EvalSpec, workers: int) -> EvalSpec:
    """`spec` with each of `workers` processes held to its share of the cores: `policy.threads` (0 = torch's default,
    every core) above cores // workers is lowered to it. Oversubscribed, two 2-thread workers on 2 cores evaluated
    the agent at 14 s a question instead of 4.2 (a gate on 200 questions: 93 min instead of 28)."""
    if workers == 1:
        return spec
    share = core_share(workers)
    policy = spec.cfg.policy
    if 0 < policy.threads <= share and spec.threads <= share:
        return spec
    cfg = replace(spec.cfg, policy=replace(policy, threads=min(policy.threads or share, share)))
    return replace(spec, cfg=cfg, threads=min(spec.threads, share))


class EvalWorker:
    """One evaluation worker: the runtime and the method, loaded once; adapters loaded when first named."""

    def __init__(self, spec: EvalSpec):
        import torch

        from evorag_core.data.datasets import load_dataset, pooled_corpus
        from evorag_core.runtime import Runtime

        torch.set_num_threads(spec.threads)
        self.spec = spec
        dataset = load_dataset(Path(spec.data_path))
        self.questions = dataset.questions
        corpus = pooled_corpus(spec.corpus_from) if spec.corpus_from else None
        self.runtime = Runtime(spec.cfg, Path(spec.home), dataset, corpus)
        # the plain agent shares one policy LM between the base model and every adapter a job names
        self._shared = spec.method == "agent" and spec.options == MethodOptions()
        self._backend = None
        self._methods: dict[str | None, Method] = {}

    def run(self, adapter: str | None, index: int) -> tuple[int, QuestionResult]:
        question = self.questions[index]
        started = time.perf_counter()
        result = self._method(adapter).run_question(question)
        return index, replace(result, seconds=result.seconds or time.perf_counter() - started)

    def _method(self, folder: str | None) -> Method:
        if folder not in self._methods:
            if self._shared:
                from evorag_core.lm.backends import policy_backend
                from evorag_core.methods.agent import agent_on

                if self._backend is None:
                    self._backend = policy_backend(self.spec.cfg.policy, Path(self.spec.home))
                name = None
                if folder is not None:
                    from evorag_core.adapters.load import load_verified

                    name = f"eval-{len(self._methods)}"
                    load_verified(self._backend, name, folder)  # refused: the AdapterError reaches the driver
                self._methods[folder] = agent_on(self._backend, self.runtime, name)
            elif folder is None:
                from evorag_core.methods.registry import build_method

                self._methods[None] = build_method(self.spec.method, self.runtime, self.spec.options)
            else:
                raise ConfigError("a job's adapter is for the plain agent; give other methods theirs in "
                                  "EvalSpec.options")
        return self._methods[folder]


_WORKER: EvalWorker | None = None


def _init(spec: EvalSpec, parent: int, environ: dict[str, str]) -> None:
    global _WORKER
    pool_child_init(parent, environ)  # a killed driver leaves no worker evaluating
    _WORKER = EvalWorker(spec)


def _run(job: tuple[str | None, int]) -> tuple[int, QuestionResult]:
    assert _WORKER is not None, "the pool's initializer did not run"
    return _WORKER.run(*job)


class EvalPool:
    """`workers` processes (started on first use, kept until `close`) evaluating questions of `spec.data_path`."""

    def __init__(self, spec: EvalSpec, workers: int):
        from evorag_core.data.datasets import load_dataset

        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.spec, self.workers = _thread_share(spec, workers), workers
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
            self._pool = pool_context().Pool(self.workers, initializer=_init,
                                             initargs=(self.spec, os.getpid(), dict(os.environ)))
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
