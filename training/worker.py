"""The background training worker: a separate process that runs queued rounds, crash-safe through leases.

Loop: reap expired leases (`Store.expire_leases`: their rounds fail, or are queued again while attempts remain, and
their claimed pairs go back to the queue) -> claim the oldest queued round with a lease -> run it while a heartbeat
thread extends the lease every min(lease/3, 2) seconds and writes the latest progress {phase, step, total, loss, eta}
-> finish the round: succeeded with its metrics (its claimed pairs become consumed), or failed with a readable error
(released).

If the worker is killed (SIGKILL, power loss) nothing is finished; the lease runs out and the next worker to poll
reaps the round. If the heartbeat finds the round no longer ours (reaped after a long stall), the next progress
report raises `RoundLost` and training stops without touching the round. Cancel (studio, `evorag rounds cancel`)
records a request; every progress report (each training step, each phase change) reads it, so training stops
within one step: `RoundCancelled` is raised from the report, and the worker ends the round `cancelled` with its
claimed pairs released and no adapter registered (registering is itself a phase, checked first). SIGTERM and
Ctrl-C fail the running round ("worker stopped") before the process exits, so its pairs are released at once (in the
transaction that fails it; a second signal while it does so is ignored).

Each round's log lines (this module's and the objectives' INFO+ records while the round runs: the claim, each phase,
step lines with the loss, warnings, a failure's traceback, the outcome) also go to the store's `round_logs`
(training/round_log.py), where the studio's Training tab and `evorag rounds log ID` read them.

Under `accelerate launch` with several processes (one per GPU; training/README.md, "Rounds on several processes")
every process runs this loop: the main process claims, heartbeats and finishes; all train the round together.

    python -m training.worker [--once | --drain] [--poll S] [--lease S]      (same as `evorag worker`)
    accelerate launch --config_file training/accelerate/ddp.yaml --num_processes N -m training.worker ...
"""
from __future__ import annotations

import ctypes
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, cast

from sqlalchemy.exc import SQLAlchemyError

from evorag_core import test_hooks
from evorag_core.config import Config
from evorag_core.errors import StoreError, TrainingError
from evorag_core.objectives import OBJECTIVES
from evorag_core.store.records import ROUND_KL_KEYS

from training.job import AdapterRef, ProgressFn, ReportRef, RoundCancelled, RoundJob, RoundLost, RoundResult
from training.processes import SINGLE, Processes, exit_launched_process, launched_world_size, round_processes
from training.round_log import RoundLogHandler, capture_round_log

if TYPE_CHECKING:
    from evorag_core.store import Round, Store

__all__ = ["WorkerOptions", "Heartbeat", "new_worker_id", "process_one", "agreed_progress", "serve", "run_worker", "quiet_progress_bars",
           "tame_malloc", "release_memory", "main"]

log = logging.getLogger("evorag.worker")
_NOT_METRICS = frozenset({"step", "total", "elapsed_s", "epoch", "phase"})  # step reports' bookkeeping keys

RunFn = Callable[[RoundJob, Any, ProgressFn], RoundResult]
# the LoRA rounds (training.lora_round) run on several processes; DynaKrag's controller fit runs in one
MULTI_PROCESS_OBJECTIVES = tuple(n for n, o in OBJECTIVES.items() if o.artifact == "adapter")


PROGRESS_EVERY_S = 2.0  # the heartbeat writes progress (and extends the lease) at least this often
STEP_LOG_EVERY_S = 2.0  # a round logs its first and last step, and one step line at most this often in between


@dataclass(frozen=True)
class WorkerOptions:
    lease_s: float = 60.0
    poll_s: float = 2.0
    once: bool = False  # process at most one round (reaping expired leases first), then return
    drain: bool = False  # process rounds until none is queued, then return (a batch job's worker)


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Heartbeat:
    """Extends a round's lease from a thread and carries the latest progress to the store."""

    def __init__(self, store: Store, round_id: int, worker_id: str, lease_s: float, *, first_attempt: bool = False):
        self.store, self.round_id, self.worker_id = store, round_id, worker_id
        self.first_attempt = first_attempt  # the test hold point `round:step` holds a round's first attempt only
        self.interval = max(min(lease_s / 3.0, PROGRESS_EVERY_S), 0.05)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by the first training step: write it at once
        self._lock = threading.Lock()
        self._progress: dict[str, Any] = {"step": 0, "total": None, "loss": None, "eta": None, "phase": "setup"}
        self._step_logged_at: float | None = None  # time.monotonic() of the last step line
        self._thread = threading.Thread(target=self._run, name=f"evorag-heartbeat-{round_id}", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    @property
    def thread_ident(self) -> int | None:
        """The heartbeat thread's id (its warnings belong to the round's log)."""
        return self._thread.ident

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()

    def report(self, entry: dict[str, Any]) -> None:
        """The rounds' `on_progress`: keeps {step, total, loss, eta, ...} (or a phase change {phase}); raises
        RoundLost once the round is gone and RoundCancelled once a cancel was requested (one read per report)."""
        if "step" not in entry and "phase" in entry:
            with self._lock:
                changed = self._progress.get("phase") != str(entry["phase"])
                self._progress = {**self._progress, "phase": str(entry["phase"])}
            if changed:
                log.info("round %s phase %s", self.round_id, entry["phase"])
            self._wake.set()
        else:
            self._log_step(entry)
            step, total, elapsed = entry.get("step"), entry.get("total"), entry.get("elapsed_s")
            eta = None
            if step and total and elapsed is not None:
                eta = round(float(elapsed) / float(step) * max(float(total) - float(step), 0.0), 1)
            now_in = str(entry.get("phase") or "train")  # an evaluation job's steps are questions ("evaluate NAME")
            with self._lock:
                first = self._progress.get("phase") != now_in
                self._progress = {**{k: v for k, v in entry.items() if isinstance(v, (int, float, str)) or v is None},
                                  "eta": eta, "phase": now_in, "at": round(time.time(), 3)}  # the ETA counts from it
            if first:
                self._wake.set()
            if self.first_attempt and step:
                test_hooks.hold_until("round:step", self._stop_asked)
        if self.lost.is_set():
            raise RoundLost(f"round {self.round_id} is no longer held by {self.worker_id}")
        try:
            requested = self.store.cancel_requested(self.round_id)
        except Exception as exc:  # a database hiccup must not fail the round: the next report reads it again
            log.warning("round %s: could not read a cancel request: %s", self.round_id, exc)
            requested = False
        if requested:
            raise RoundCancelled(f"round {self.round_id}: cancel requested")

    def _stop_asked(self) -> bool:
        """The lease is lost or a cancel was requested (what ends a test hold; a database hiccup reads as no)."""
        try:
            return self.lost.is_set() or self.store.cancel_requested(self.round_id)
        except Exception:
            return False

    def _log_step(self, entry: dict[str, Any]) -> None:
        """One line per step report for the first and the last step, and at most one per STEP_LOG_EVERY_S between:
        `round 3 step 4/20: loss 0.6931, kl 0.0012 (1.3 s/step)`."""
        step, total, elapsed = entry.get("step"), entry.get("total"), entry.get("elapsed_s")
        now = time.monotonic()
        try:
            last = step is not None and total is not None and float(step) >= float(total)
            if not (self._step_logged_at is None or last or now - self._step_logged_at >= STEP_LOG_EVERY_S):
                return
            values = [f"{key} {float(entry[key]):.4g}" for key in ("loss", *ROUND_KL_KEYS)
                      if isinstance(entry.get(key), (int, float))]
            if not values:  # an objective without a loss (DynaKrag's exploration): the first few numbers it reports
                values = [f"{key} {float(v):.4g}" for key, v in entry.items()
                          if key not in _NOT_METRICS and isinstance(v, (int, float)) and not isinstance(v, bool)][:4]
            speed = f" ({float(elapsed) / float(step):.2g} s/step)" if step and elapsed is not None else ""
        except (TypeError, ValueError):  # an odd report is no reason to stop training
            return
        self._step_logged_at = now
        of = f"/{total}" if total else ""
        what = ", ".join(values) or str(entry.get("phase") or "no loss reported")  # an evaluation: its side
        log.info("round %s step %s%s: %s%s", self.round_id, step, of, what, speed)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._progress)

    def beat(self) -> bool:
        """One heartbeat now; False (and `lost` set) when the store says the round is no longer ours."""
        ok = self.store.heartbeat(self.round_id, self.worker_id, progress=self.snapshot())
        if not ok:
            self.lost.set()
        return ok

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                if not self.beat():
                    log.warning("round %s: lease lost (reaped or cancelled); stopping", self.round_id)
                    return
            except Exception as exc:  # a database hiccup: keep beating; the lease outlives a few misses
                log.warning("round %s: heartbeat failed: %s", self.round_id, exc)


def _readable(exc: BaseException) -> str:
    """`Type: message (at file:line in function)` of the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    message = str(exc).strip() or "(no message)"
    return f"{type(exc).__name__}: {message}{where}"[:2000]


def _reap_and_claim(store: Store, worker_id: str, opts: WorkerOptions) -> Round | None:
    """Reap expired leases, then claim the oldest queued round (None if none is queued)."""
    report = store.expire_leases()
    if report.failed or report.requeued:
        log.info("expired leases: failed %s, requeued %s, %d pair(s) released",
                 list(report.failed), list(report.requeued), report.released_pairs)
    return store.claim_round(worker_id, opts.lease_s)


def process_one(
    store: Store, cfg: Config, home: Path, worker_id: str, opts: WorkerOptions, run: RunFn | None = None,
    processes: Processes = SINGLE,
) -> Round | None:
    """Reap expired leases, then claim and run one round; returns the round as finished (None if none was queued).

    Under an `accelerate launch` of several processes (`processes`) every process calls this: the main one reaps,
    claims and tells the others which round; all of them run it (each its shard: training/processes.py); the main
    one alone heartbeats, logs to the store and finishes the round. A cancel request or a lost lease is agreed on by
    every process at the same progress report, so all stop there."""
    claimed = processes.on_main(_reap_and_claim, store, worker_id, opts)
    if claimed is None:
        return None
    if not processes.main:
        return _run_beside_main(store, cfg, home, run, claimed, processes)
    with capture_round_log(store, claimed.id) as round_log:  # this thread's and the heartbeat's lines
        return _run_claimed(store, cfg, home, worker_id, opts, run, claimed, round_log, processes)


def agreed_progress(report: ProgressFn | None, processes: Processes) -> ProgressFn | None:
    """The rounds' `on_progress` under several processes: the main process reports (its heartbeat may raise
    RoundCancelled or RoundLost), and every process raises what it raised, at the same report; one process: `report`."""
    if not processes.several:
        return report

    def forward(entry: dict[str, Any]) -> None:
        verdict: Exception | None = None
        if processes.main and report is not None:
            try:
                report(entry)
            except (RoundCancelled, RoundLost) as exc:
                verdict = exc
        verdict = processes.broadcast(verdict)
        if verdict is not None:
            raise verdict

    return forward


def _run_agreed(run: RunFn, make_job: Callable[[], RoundJob], store: Any, report: ProgressFn | None,
                processes: Processes) -> RoundResult:
    """run(job, store, progress) on this process; under several processes their outcomes are gathered, so a round
    that failed on any process raises on every one (the main process then fails it with that process's error)."""
    if not processes.several:
        return run(make_job(), store, report)
    failure: Exception | None = None
    ref: RoundResult | None = None
    try:
        job = make_job()
        if job.objective not in MULTI_PROCESS_OBJECTIVES:
            raise TrainingError(f"{job.objective} rounds run in one process; start this worker without a "
                                f"multi-process launch (objectives that run on several: {', '.join(MULTI_PROCESS_OBJECTIVES)})")
        ref = run(job, store, agreed_progress(report, processes))
    except (RoundCancelled, RoundLost):
        raise  # agreed on by every process at the same report
    except Exception as exc:
        failure = exc
    errors = [e for e in processes.gather([None if failure is None else
                                           f"process {processes.index}: {_readable(failure)}"]) if e]
    if failure is not None:
        raise failure
    if errors:
        raise TrainingError("; ".join(errors))
    return cast(RoundResult, ref)  # run returned on every process


def _run_beside_main(store: Any, cfg: Config, home: Path, run: RunFn | None, claimed: Any,
                     processes: Processes) -> Any:
    """A process other than the main one runs the round the main one claimed: no heartbeat, no store writes, no
    finishing (the main process does those); returns the round as claimed."""
    if run is None:
        from training.rounds import run_round as run
    try:
        _run_agreed(run, lambda: RoundJob.from_config(claimed.id, claimed.objective, claimed.config, cfg, home,
                                                      processes), store, None, processes)
    except (RoundCancelled, RoundLost) as exc:
        log.info("process %d: %s: stopping", processes.index, exc)
    except Exception as exc:  # the main process records the failure
        log.error("process %d: round %s failed: %s", processes.index, claimed.id, _readable(exc))
    return claimed


def _run_claimed(store: Any, cfg: Config, home: Path, worker_id: str, opts: WorkerOptions, run: RunFn | None,
                 claimed: Any, round_log: RoundLogHandler, processes: Processes = SINGLE) -> Any | None:
    """Run the claimed round and finish it: succeeded, failed or cancelled (see the module docstring)."""
    log.info("round %s (%s, attempt %d/%d) claimed by %s%s", claimed.id, claimed.objective, claimed.attempts,
             claimed.max_attempts, worker_id, f" ({processes.count} processes)" if processes.several else "")
    prepare_for_rounds(cfg)
    if run is None:
        from training.rounds import run_round as run
    heartbeat = Heartbeat(store, claimed.id, worker_id, opts.lease_s, first_attempt=claimed.attempts == 1).start()
    round_log.watch_thread(heartbeat.thread_ident)
    try:
        ref = _run_agreed(run, lambda: RoundJob.from_config(claimed.id, claimed.objective, claimed.config, cfg, home,
                                                            processes), store, heartbeat.report, processes)
    except RoundLost as exc:
        log.warning("%s; leaving the round as the store has it", exc)
        return store.get_round(claimed.id)
    except RoundCancelled as exc:
        heartbeat.stop()
        log.info("%s: stopping", exc)
        return _cancel(store, claimed.id, worker_id, heartbeat.snapshot())
    except (KeyboardInterrupt, SystemExit):
        heartbeat.stop()  # stop() is idempotent; the finally below calls it again
        log.error("round %s failed: the worker was stopped (SIGTERM or Ctrl-C) mid-round", claimed.id)
        _fail(store, claimed.id, worker_id, "interrupted: the worker was stopped (SIGTERM or Ctrl-C) mid-round")
        raise
    except Exception as exc:  # the round's failure is recorded, with a readable message; the worker lives on
        log.error("round %s failed:\n%s", claimed.id, traceback.format_exc())
        heartbeat.stop()
        return _fail(store, claimed.id, worker_id, _readable(exc))
    finally:
        heartbeat.stop()
    if not heartbeat.lost.is_set():
        heartbeat.beat()  # the final progress (the last step may have come after the last beat)
    if heartbeat.lost.is_set():
        log.warning("round %s finished training but its lease was lost; not finishing it", claimed.id)
        return store.get_round(claimed.id)
    metrics, product = _result_metrics(ref)
    try:
        done = store.finish_round(claimed.id, metrics=metrics, worker_id=worker_id)
    except StoreError as exc:  # reaped or cancelled between the last heartbeat and now
        log.warning("round %s trained (%s) but could not be finished: %s", claimed.id, product, exc)
        return store.get_round(claimed.id)
    log.info("round %s succeeded: %s", claimed.id, product)
    if isinstance(ref, AdapterRef) and cfg.promotion.evaluate:
        _queue_evaluation(store, cfg, claimed, ref)
    return done


def _queue_evaluation(store: Store, cfg: Config, claimed: Round, ref: AdapterRef) -> None:
    """Gated promotion: queue the evaluation of the adapter the round registered (evorag_core/promotion/); it stays
    staged until that job's report passes (then `promotion.auto` activates it) or an admin activates it."""
    from training.job import EVALUATE, job_config

    base_model = (claimed.config or {}).get("base_model")
    try:
        rid = store.enqueue_round(EVALUATE, job_config(EVALUATE, adapter=ref.name, against=cfg.promotion.against,
                                                       base_model=base_model))
    except (StoreError, SQLAlchemyError) as exc:  # the round stays succeeded; the admin can evaluate by hand
        log.warning("round %s: its adapter's evaluation could not be queued: %s", claimed.id, exc)
        return
    log.info("round %s: adapter %s staged; its evaluation against %s is queued as round %s", claimed.id, ref.name,
             cfg.promotion.against, rid)


def _result_metrics(ref: RoundResult) -> tuple[dict[str, Any], str]:
    """The round's metrics as finished, with what it produced (an adapter: name, folder, checksum; a controller:
    its folder), and that product in words for the log."""
    if isinstance(ref, AdapterRef):
        return ({**ref.metrics, "adapter": ref.name, "adapter_path": str(ref.path), "checksum": ref.checksum},
                f"adapter {ref.name} at {ref.path}")
    if isinstance(ref, ReportRef):
        live = "; it is live now" if ref.activated else ""
        return dict(ref.metrics), f"promotion report {ref.promotion_id} of {ref.adapter}: {ref.verdict}{live}"
    return {**ref.metrics, "controller": str(ref.path)}, f"{ref.objective} controller at {ref.path}"


def _cancel(store: Store, round_id: int, worker_id: str, progress: dict[str, Any]) -> Round | None:
    """End a cancelled round: the last progress written (the phase and step it stopped at), then cancelled, its
    pairs released."""
    try:
        store.heartbeat(round_id, worker_id, progress={**progress, "eta": None})
        done = store.confirm_cancel(round_id, worker_id=worker_id)
        step = f" at step {progress.get('step') or 0}/{progress['total']}" if progress.get("total") else ""
        log.info("round %s cancelled%s (phase %s): its pairs are queued again, no adapter registered", round_id, step,
                 progress.get("phase", "setup"))
        return done
    except StoreError as exc:  # reaped meanwhile: the reaper already cancelled it and released its pairs
        log.warning("round %s could not be marked cancelled: %s", round_id, exc)
        return store.get_round(round_id)


def _fail(store: Store, round_id: int, worker_id: str, error: str) -> Round | None:
    """Mark the round failed with `error`, its pairs released (one transaction). A database error is tried once more
    on fresh connections (an interrupt may have left one mid-transaction); then the lease reaps the round later."""
    for attempt in (1, 2):
        try:
            return store.finish_round(round_id, error=error, worker_id=worker_id)
        except StoreError as exc:  # reaped or cancelled meanwhile: the store already released its pairs
            log.warning("round %s could not be marked failed: %s", round_id, exc)
            return store.get_round(round_id)
        except SQLAlchemyError as exc:
            log.warning("round %s could not be marked failed (attempt %d): %s", round_id, attempt, exc)
            store.engine.dispose()
    return None


def serve(store: Store, cfg: Config, home: Path, opts: WorkerOptions, *, worker_id: str | None = None,
          stop: threading.Event | None = None, run: RunFn | None = None, processes: Processes = SINGLE) -> int:
    """Process rounds until `stop` is set (with opts.once: after one poll; with opts.drain: at the first poll that
    finds no queued round); returns how many rounds ran. Under several processes every process gets the same claim,
    so all of them stop at the same poll."""
    worker_id = worker_id or new_worker_id()
    stop = stop or threading.Event()
    if processes.main:
        log.info("worker %s polling %s every %.1f s (lease %.0f s)%s", worker_id, store.url, opts.poll_s,
                 opts.lease_s, f", {processes.count} processes per round" if processes.several else "")
    count = 0
    while not stop.is_set():
        try:
            done = process_one(store, cfg, home, worker_id, opts, run, processes)
        except (StoreError, SQLAlchemyError) as exc:  # the database is unreachable or locked: retry after a poll
            log.error("worker %s: database error, retrying in %.1f s: %s", worker_id, opts.poll_s, exc)
            done = None
        count += done is not None
        if done is not None:
            release_memory()  # the round's model and activations are garbage now: hand the pages back
        if opts.once or (opts.drain and done is None):
            break
        if done is None:
            stop.wait(opts.poll_s)
    return count


class _StopOnce:
    """The worker's SIGTERM and SIGINT handler: the first signal raises KeyboardInterrupt in the main thread (the
    running round is failed, its pairs released, on the way out); later ones are only logged. A second signal comes
    often - the studio's SIGTERM on close and then the kernel's when the studio exits (PR_SET_PDEATHSIG), or Ctrl-C
    reaching both processes of a terminal - and raised inside the transaction that fails the round it would leave the
    round running with its pairs claimed until the lease runs out."""

    def __init__(self) -> None:
        self.stopping = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            log.info("worker already stopping (signal %d ignored)", signum)
            return
        self.stopping = True
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """`python -m training.worker`: the same options as `evorag worker`."""
    from evorag_core.cli.main import main as cli_main

    return cli_main(["worker", *(argv if argv is not None else sys.argv[1:])])


def run_worker(cfg: Config, home: Path, db_url: str, opts: WorkerOptions) -> int:
    """Open the store and serve until done (--once) or stopped: SIGTERM and Ctrl-C fail the running round cleanly
    (see the module docstring) and end the loop; returns how many rounds ran."""
    from evorag_core.store import open_store

    tame_malloc()
    stop_once = _StopOnce()
    previous = signal.signal(signal.SIGTERM, stop_once), signal.signal(signal.SIGINT, stop_once)
    stop = threading.Event()
    processes = round_processes(cfg.policy.device)  # SINGLE unless started by a multi-process accelerate launch
    try:
        with open_store(db_url) as store:
            return serve(store, cfg, home, opts, stop=stop, processes=processes)
    except KeyboardInterrupt:
        log.info("worker stopped")
        return 0
    finally:
        processes.close()
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])


_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8  # glibc mallopt parameters (malloc.h)
MMAP_THRESHOLD = 1 << 20


def _libc() -> Any | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): leave the allocator alone
        return None


def tame_malloc() -> None:
    """glibc only: blocks of >= 1 MiB (every activation tensor of a round) are mmapped and so returned to the system
    when freed, and at most 2 malloc arenas. glibc's default raises its mmap threshold to the largest block freed
    (up to 32 MiB), after which a training step's 10-30 MiB activations come from the heap and stay resident as
    fragmentation (measured: the worker held 7.9 GB after a round whose live tensors were ~1 GB)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(_M_ARENA_MAX, 2)


def release_memory() -> None:
    """Collect garbage and return free heap pages to the system (glibc `malloc_trim`), after a round."""
    gc.collect()
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


_prepared = threading.Event()


def prepare_for_rounds(cfg: Config) -> None:
    """Once per process, before its first round: torch's thread count (`policy.threads`) and no progress bars from
    datasets / transformers. Not at start: a worker waiting on an empty queue (the studio's, most of its life) then
    never loads torch (~2.5 s of CPU and ~250 MB less per idle worker)."""
    if _prepared.is_set():
        return
    import torch

    if cfg.policy.threads > 0:
        torch.set_num_threads(cfg.policy.threads)
    quiet_progress_bars()
    _prepared.set()


def quiet_progress_bars() -> None:
    """The worker logs to a file: no tqdm bars from datasets/transformers (the store carries the progress)."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()


if __name__ == "__main__":
    code = main()
    if launched_world_size() > 1:  # one process of `accelerate launch --num_processes N`: see exit_launched_process
        exit_launched_process(code)
    raise SystemExit(code)
