"""The processes of one round under `accelerate launch` (one per GPU, or several CPU processes with gloo): who is the
main process, which share of a batch is this process's, and the few collectives the rounds need.

Plain `evorag worker` (no launcher, WORLD_SIZE unset or 1) gets `SINGLE`: index 0 of 1, every operation a no-op, no
process group, so one process behaves exactly as before. Under a launch of N processes `round_processes` initialises
accelerate's `PartialState` (NCCL on GPUs, gloo with `policy.device = cpu`; DeepSpeed's own under a DeepSpeed
config) and every process of the launch runs the same round:

- the main process alone talks to the store for writes (claims the round and its pairs, heartbeats, registers,
  finishes) and writes the adapter folder; what the others need from it (the round, the claimed pairs, the checksum)
  is broadcast;
- each process trains on its shard of every minibatch (`shard`: rows i, i + N, ...), so a step's global batch is the
  configured one whatever N is; `sum_gradients` all-reduces the LoRA (and value-head) gradients once per optimiser
  step, so every process takes the same step on the same parameters;
- metrics are weighted by each shard's share of the minibatch and summed across processes (`sum_values`), so the
  logged loss is the minibatch's mean, as one process logs it.

Why gradients are reduced by hand rather than by wrapping the model in DDP (`accelerator.prepare`): the loops call
the LM's inner model to run the LM head only on completion positions, which a DDP wrapper's forward never sees, and
the shards of a step can hold different numbers of micro-batches (a minibatch smaller than N leaves a process none;
R²AG drops flat groups), while DDP all-reduces at every backward pass and hangs when the counts differ. One
all-reduce per optimiser step is what DDP does under `no_sync` gradient accumulation. TRL's DPO round is the
exception: its Trainer prepares the model with accelerate (DDP or the DeepSpeed engine) itself.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, NoReturn, Sequence, TypeVar

if TYPE_CHECKING:
    import torch

__all__ = ["Processes", "SINGLE", "launched_world_size", "round_processes", "exit_launched_process"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Processes:
    """This process's place in the launch: `index` of `count` (index 0 is the main process)."""

    index: int = 0
    count: int = 1

    @property
    def main(self) -> bool:
        return self.index == 0

    @property
    def several(self) -> bool:
        return self.count > 1

    def shard(self, items: Sequence[T]) -> list[T]:
        """This process's rows of `items`: i, i + N, i + 2N, ... (accelerate's own sharding of a batch)."""
        return list(items[self.index :: self.count])

    def broadcast(self, value: T) -> T:
        """The main process's `value`, on every process (pickled; for small objects: ids, pairs, a checksum)."""
        if not self.several:
            return value
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([value], from_process=0)[0]

    def on_main(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """`fn(*args, **kwargs)` run by the main process only (a store write, saving the adapter), its result on every
        process; an exception it raises is raised on every process (so none waits for a result that never comes)."""
        if not self.several:
            return fn(*args, **kwargs)
        outcome: tuple[bool, Any] | None = None
        if self.main:
            try:
                outcome = (True, fn(*args, **kwargs))
            except Exception as exc:  # raised here as it is, and on the others as a copy
                self.broadcast((False, _portable(exc)))
                raise
        ok, value = self.broadcast(outcome)
        if not ok:
            raise value
        return value

    def gather(self, values: list[T]) -> list[T]:
        """Every process's `values`, concatenated in process order, on every process."""
        if not self.several:
            return list(values)
        from accelerate.utils import gather_object

        return list(gather_object(list(values)))

    def sum_values(self, values: dict[str, float]) -> dict[str, float]:
        """Each key summed over the processes (every process must pass the same keys, in any order)."""
        if not self.several or not values:
            return dict(values)
        import torch
        from accelerate.utils import reduce

        from accelerate import PartialState

        keys = sorted(values)
        summed = reduce(torch.tensor([float(values[k]) for k in keys], dtype=torch.float64,
                                     device=PartialState().device), "sum")
        return dict(zip(keys, summed.cpu().tolist()))

    def sum_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Replace each parameter's gradient by its sum over the processes (one flat all-reduce; a parameter without
        a gradient on this process counts as zeros)."""
        if not self.several:
            return
        import torch
        from accelerate.utils import reduce

        params = list(params)
        if not params:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = reduce(torch.cat([g.reshape(-1).float() for g in grads]), "sum")
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).to(p.dtype)
            offset += n

    def barrier(self) -> None:
        if self.several:
            from accelerate import PartialState

            PartialState().wait_for_everyone()

    def close(self) -> None:
        """End this process's part in the launch: destroy the process group. A process that exits with it alive can
        abort at exit (SIGABRT, "terminate called without an active exception": gloo's threads still hold tensors
        while the interpreter is torn down), failing a launch whose rounds all succeeded."""
        if not self.several:
            return
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


SINGLE = Processes()


def exit_launched_process(code: int) -> NoReturn:
    """End one process of a multi-process launch with `code`, skipping the interpreter's teardown (logging and the
    standard streams flushed first). Why: after a launch's rounds all succeeded and `Processes.close` destroyed the
    process group, rank 0 still aborted at exit now and then under load (SIGABRT, "terminate called without an
    active exception": a native thread of torch.distributed, likely the TCP store's server on rank 0, still joinable
    when the interpreter tears down), so the launcher reported a failure for finished work. Everything a round writes
    is committed before this point."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing left to flush
            pass
    os._exit(code)


def _portable(exc: Exception) -> Exception:
    """`exc` if it survives pickling (to travel to the other processes), else a RuntimeError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # an exception class whose __init__ pickle cannot replay (some database errors)
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def launched_world_size() -> int:
    """The launch's process count as its launcher set it (torchrun/accelerate: WORLD_SIZE), 1 when not launched."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def round_processes(device: str) -> Processes:
    """`SINGLE` outside a multi-process launch, else this process's place in it (accelerate's PartialState, made
    with cpu=True for `policy.device = cpu` so that the process group uses gloo)."""
    if launched_world_size() <= 1:
        return SINGLE
    from accelerate import PartialState

    state = PartialState(cpu=str(device).startswith("cpu"))
    return Processes(state.process_index, state.num_processes)
