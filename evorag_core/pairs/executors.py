"""Where sibling-branch rollouts run: in this process, in a local process pool, or on Ray actors.

Every executor runs the same `RolloutWorker`: it loads the data file, the retrieval runtime and the policy LM (with
the adapter, if any) once, then rolls out questions by their index in the data file and returns each finished
`EpisodeRollout`; nothing is written by a worker. The driver (`store_rollouts`) stores each episode and its pairs as
results come back, in question order: episodes finish out of order, but the pair selector's greedy-side balance
depends on the order pairs are offered, so a reorder buffer makes the stored pairs the same as a serial run's for
a fixed seed (sibling sampling is seeded per question and state, `rollout.seed`, not per worker). An episode that
finished while an earlier one is still running waits in the buffer; Ctrl-C or an error keeps every stored episode.

- `local_results(spec, indices, workers)`: `workers` = 1 runs in this process; more start a process pool
  (`procs.pool_context`: forked from a server that imported the model stack; one worker per process). The default.
- `ray_results(spec, indices, workers, address)`: Ray actors, one `RolloutWorker` each (`ray.remote`), fed by
  `ray.util.ActorPool.map_unordered`. `address` None starts a local Ray instance for this run; "auto" or
  "ray://host:10001" joins a running cluster, whose nodes must have this package installed and read the same home
  folder (models, indexes) and data file paths. A local Ray started here runs its actors at normal priority
  (`RAY_worker_niceness=0` unless set; Ray's default renices workers to 15). Ray is optional
  (`pip install 'evorag-studio[ray]'`).
"""
from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence, TypeVar

from evorag_core.config import Config
from evorag_core.errors import ConfigError
from evorag_core.pairs.branches import EpisodeRollout
from evorag_core.pairs.persist import SavedRollout, save_rollout
from evorag_core.pairs.selection import PairSelector, RolloutStats
from evorag_core.procs import core_share, pool_child_init, pool_context

if TYPE_CHECKING:
    from evorag_core.store import Store
    from evorag_core.types import Question

__all__ = ["EXECUTORS", "WorkerSpec", "RolloutWorker", "policy_name", "warm", "in_order", "local_results",
           "ray_results", "results_for", "store_rollouts"]

EXECUTORS: tuple[str, ...] = ("local", "ray")
T = TypeVar("T")


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to rebuild the driver's setting in its own process (all picklable)."""

    cfg: Config
    home: str
    data_path: str
    corpus_from: tuple[str, ...] = ()  # retrieve from the pooled passages of these files instead of the data's own
    adapter: str | None = None  # LoRA adapter folder to roll out with
    stage: str | None = None
    threads: int | None = None  # torch threads per worker (None: its share of the cores in a pool, else torch's
    # default; policy.threads wins if set)
    adapter_checksum: str | None = None  # the registry's sha256 of a registered adapter's weights, checked at load


class RolloutWorker:
    """One rollout worker: the policy LM and the retrieval runtime, loaded once; `rollout(i)` for question i."""

    def __init__(self, spec: WorkerSpec):
        import torch

        from evorag_core.data.datasets import load_dataset
        from evorag_core.lm.hf_backend import TransformersBackend
        from evorag_core.policy.agent import LMPolicy
        from evorag_core.runtime import Runtime

        if spec.threads:
            torch.set_num_threads(spec.threads)
        self.spec = spec
        dataset = load_dataset(Path(spec.data_path))
        self.questions = dataset.questions
        self.runtime = Runtime(spec.cfg, Path(spec.home), dataset, _fixed_corpus(spec))
        self.backend = TransformersBackend(spec.cfg.policy, Path(spec.home))
        if spec.adapter is not None:
            from evorag_core.adapters.load import load_verified

            load_verified(self.backend, "rollout", spec.adapter, spec.adapter_checksum)
            self.backend.activate("rollout")
        self.policy = LMPolicy(self.backend, spec.cfg.policy, spec.cfg.answer)
        self.policy_name = policy_name(self.backend.model_id, spec.adapter, spec.cfg.answer.adapter)

    def rollout(self, index: int) -> tuple[int, EpisodeRollout]:
        from evorag_core.pairs.rollout import rollout_question

        question = self.questions[index]
        result = rollout_question(self.runtime.make_env(question), self.policy, question, self.spec.cfg.rollout,
                                  stage=self.spec.stage, meta={"policy": self.policy_name})
        return index, result


def policy_name(model_id: str, adapter: str | None, reader: str | None = None) -> str:
    """The `policy` column of rollout episodes: `lm:<model id>[+<adapter folder name>][+reader:<folder name>]`
    (`reader`: the reader's own adapter, `answer.adapter`, which changes the answers and so the episodes)."""
    return (f"lm:{model_id}" + (f"+{Path(adapter).name}" if adapter else "")
            + (f"+reader:{Path(reader).name}" if reader else ""))


# -- executors: each yields (index, rollout) as rollouts finish, in any order -------------------------------------

_PROCESS_WORKER: RolloutWorker | None = None


def _process_init(spec: WorkerSpec, parent: int, environ: dict[str, str]) -> None:
    global _PROCESS_WORKER
    pool_child_init(parent, environ)  # a killed driver leaves no worker rolling out
    _PROCESS_WORKER = RolloutWorker(spec)


def _process_rollout(index: int) -> tuple[int, EpisodeRollout]:
    assert _PROCESS_WORKER is not None, "the pool's initializer did not run"
    return _PROCESS_WORKER.rollout(index)


def warm(spec: WorkerSpec) -> None:
    """Convert the embedded model and build a persisted pooled index once, here, before workers start (they would
    otherwise all do the same work at once; the writes are atomic, so this saves time, not correctness)."""
    from evorag_core.lm.loading import resolve_model

    resolve_model(spec.cfg.policy.model, Path(spec.home))
    if spec.corpus_from or spec.cfg.env.corpus == "pooled":
        from evorag_core.data.datasets import load_dataset
        from evorag_core.runtime import Runtime

        dataset = load_dataset(Path(spec.data_path))
        Runtime(spec.cfg, Path(spec.home), dataset, _fixed_corpus(spec)).retriever_for(dataset.questions[0])


def _fixed_corpus(spec: WorkerSpec):
    if not spec.corpus_from:
        return None
    from evorag_core.data.datasets import pooled_corpus

    return pooled_corpus(spec.corpus_from)


def held_to_share(spec: WorkerSpec, workers: int) -> WorkerSpec:
    """`spec` for each of `workers` pool processes: `threads` unset or above the share of the cores
    (`procs.core_share`) is set to it, and `policy.threads`, which wins in the worker when set, is lowered to it;
    one worker keeps what it was given. Unlike the evaluation pool's share, an unset policy.threads stays unset, so
    that `--threads` (this spec's `threads`), the rollout's own setting, is what a worker runs with."""
    if workers <= 1:
        return spec
    share = core_share(workers)
    policy = replace(spec.cfg.policy, threads=min(spec.cfg.policy.threads, share))
    return replace(spec, cfg=replace(spec.cfg, policy=policy), threads=min(spec.threads or share, share))


def local_results(spec: WorkerSpec, indices: Sequence[int], workers: int = 1,
                  worker: RolloutWorker | None = None) -> Iterator[tuple[int, EpisodeRollout]]:
    """In this process (`workers` = 1; `worker` reuses one already loaded) or a pool of `workers` processes, each
    held to its share of the cores (`held_to_share`)."""
    if workers <= 1:
        worker = worker or RolloutWorker(spec)
        for i in indices:
            yield worker.rollout(i)
        return
    spec = held_to_share(spec, workers)
    with pool_context().Pool(min(workers, len(indices)) or 1, initializer=_process_init,
                             initargs=(spec, os.getpid(), dict(os.environ))) as pool:
        yield from pool.imap_unordered(_process_rollout, indices)  # leaving the block terminates the pool


def ray_results(spec: WorkerSpec, indices: Sequence[int], workers: int = 1,
                address: str | None = None) -> Iterator[tuple[int, EpisodeRollout]]:
    """On `workers` Ray actors (see the module docstring for `address`)."""
    try:
        import ray
        from ray.util import ActorPool
    except ImportError as exc:
        raise ConfigError("--executor ray needs Ray: pip install 'evorag-studio[ray]'") from exc
    started_here = not ray.is_initialized()
    if started_here:
        if address is None:
            # Ray renices its worker processes to 15 by default; a rollout actor should compete for the cores as a
            # pool process does (measured: under a busy machine the niced actors got ~13 % CPU each).
            os.environ.setdefault("RAY_worker_niceness", "0")
            ray.init(num_cpus=max(1, workers * (spec.threads or 1)), include_dashboard=False, log_to_driver=True,
                     configure_logging=False)
        else:
            ray.init(address=address, configure_logging=False)
    actors = []
    try:
        remote = ray.remote(num_cpus=spec.threads or 1)(RolloutWorker)
        actors = [remote.remote(spec) for _ in range(max(1, min(workers, len(indices))))]
        pool = ActorPool(actors)
        yield from pool.map_unordered(lambda actor, i: actor.rollout.remote(i), list(indices))
    finally:
        for actor in actors:
            ray.kill(actor)
        if started_here:
            ray.shutdown()


def results_for(executor: str, spec: WorkerSpec, indices: Sequence[int], workers: int = 1,
                address: str | None = None) -> Iterator[tuple[int, EpisodeRollout]]:
    if executor == "local":
        if address is not None:
            raise ConfigError("--address is for --executor ray")
        return local_results(spec, indices, workers)
    if executor == "ray":
        return ray_results(spec, indices, workers, address)
    raise ConfigError(f"unknown executor {executor!r}; one of {', '.join(EXECUTORS)}")


def in_order(results: Iterable[tuple[int, T]], order: Sequence[int]) -> Iterator[T]:
    """The results in `order`, each as soon as it and every one before it have arrived (a reorder buffer; also
    used by the evaluation pool, evaluation/pool.py)."""
    waiting: dict[int, T] = {}
    position = 0
    for index, rollout in results:
        waiting[index] = rollout
        while position < len(order) and order[position] in waiting:
            yield waiting.pop(order[position])
            position += 1
    if position < len(order):
        missing = [i for i in order[position:] if i not in waiting]
        raise RuntimeError(f"the executor ended without results for question indices {missing[:10]}")


def store_rollouts(results: Iterable[tuple[int, EpisodeRollout]], order: Sequence[int], store: Store,
                   selector: PairSelector, spec: WorkerSpec, name: str, *,
                   write_guard: Callable[[], AbstractContextManager] = nullcontext,
                   on_episode: Callable[[Question, SavedRollout], None] | None = None, run: str | None = None
                   ) -> RolloutStats:
    """Store each rollout (episode, then its pairs) in question order as results arrive; see the module docstring.
    Call `selector.finish()` when done."""
    adapter = Path(spec.adapter).name if spec.adapter else None
    for rollout in in_order(results, order):
        with write_guard():
            saved = save_rollout(store, rollout, selector, spec.cfg.rollout, name, run=run, adapter=adapter,
                                 data_path=spec.data_path)
        if on_episode is not None:
            on_episode(rollout.question, saved)
    return selector.stats
