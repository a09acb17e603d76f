"""A round's log lines into the store: the worker's INFO+ records while it runs a round, for the studio's Training tab
and `evorag rounds log ID`, wherever the worker runs (the store: evorag_core/store/round_logs.py, migration 0005).

    with capture_round_log(store, round_id) as handler:   # training/worker.py, around one round
        handler.watch_thread(heartbeat_thread_ident)
        ... run the round ...

`RoundLogHandler` sits on the root logger for the duration of the round and takes the records of the threads that
work on it (the thread that runs the round, the heartbeat): another worker thread's round, a web server's requests
in the same process, or its own store writes never end up in this round's log. `emit` only queues the record;
a background thread writes the queue to the store in batches (every FLUSH_EVERY_S, at once for a warning), so a
slow or locked database never stalls a training step, and a failing write never breaks the round: the lines wait
for the next try (at most MAX_PENDING of them; beyond that they are counted and reported as one "dropped" line),
and the worker's own log file keeps everything. Closing the handler writes what is left (bounded by CLOSE_WAIT_S).

The "evorag" loggers are set to at least INFO while a round is captured, so the stored log does not depend on how
verbose the process's console is; the store bounds each round's lines and their length.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from evorag_core.store.records import NewLogLine

__all__ = ["RoundLogHandler", "capture_round_log", "FLUSH_EVERY_S", "MAX_PENDING", "CLOSE_WAIT_S"]

log = logging.getLogger("evorag.worker")

FLUSH_EVERY_S = 0.5  # how often queued lines are written (a warning or an error: at once)
MAX_PENDING = 2000  # lines held while the store cannot be written; more are dropped (and counted)
CLOSE_WAIT_S = 10.0  # how long closing the handler tries to write the last lines


class RoundLogHandler(logging.Handler):
    """Queues the INFO+ records of the watched threads and writes them to round `round_id`'s log from a thread."""

    def __init__(self, store: Any, round_id: int, *, level: int = logging.INFO, flush_every_s: float = FLUSH_EVERY_S,
                 max_pending: int = MAX_PENDING):
        super().__init__(level)
        self.store, self.round_id = store, round_id
        self.flush_every_s, self.max_pending = flush_every_s, max_pending
        self.setFormatter(logging.Formatter("%(message)s"))
        self._threads = {threading.get_ident()}
        self._pending: deque[NewLogLine] = deque()
        self._queue_lock = threading.Lock()
        self._write_lock = threading.Lock()  # one write at a time: the flusher thread, or close()
        self._dropped = 0
        self._failures = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"evorag-roundlog-{round_id}", daemon=True)

    def watch_thread(self, ident: int | None) -> None:
        """Take the records of thread `ident` too (the round's heartbeat)."""
        if ident is not None:
            self._threads.add(ident)

    def start(self) -> "RoundLogHandler":
        self._thread.start()
        return self

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread not in self._threads:
            return
        try:
            line = NewLogLine(record.levelname, self.format(record).rstrip(),
                              datetime.fromtimestamp(record.created, timezone.utc))
        except Exception:  # a record that cannot be formatted: logging's own error report, never the round's
            self.handleError(record)
            return
        with self._queue_lock:
            if len(self._pending) >= self.max_pending:
                self._dropped += 1
                return
            self._pending.append(line)
        if record.levelno >= logging.WARNING:
            self._wake.set()

    def flush(self) -> None:
        """Write the queued lines now (the caller waits); on failure they stay queued for the next try."""
        with self._write_lock:
            with self._queue_lock:
                batch = list(self._pending)
                dropped = self._dropped
            if dropped:
                batch.append(NewLogLine("WARNING", f"… {dropped} log line(s) of this round were dropped (the store "
                                                   "could not be written); the worker's log file has them"))
            if not batch:
                return
            try:
                self.store.add_round_logs(self.round_id, batch)
            except Exception as exc:  # a database hiccup: the lines wait for the next flush; the round goes on
                self._failures += 1
                if self._failures == 1 or self._failures % 20 == 0:
                    log.warning("round %s: could not store %d log line(s) (try %d): %s", self.round_id, len(batch),
                                self._failures, exc)
                return
            self._failures = 0
            with self._queue_lock:
                for _ in range(len(batch) - (1 if dropped else 0)):
                    self._pending.popleft()
                self._dropped -= dropped

    def close(self) -> None:
        """Stop the writer thread and write what is left, trying for at most CLOSE_WAIT_S."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        deadline = time.monotonic() + CLOSE_WAIT_S
        while self._pending_count() and time.monotonic() < deadline:
            self.flush()
            if self._pending_count():
                time.sleep(0.2)
        if self._pending_count():
            log.warning("round %s: %d log line(s) could not be stored", self.round_id, self._pending_count())
        super().close()

    def _pending_count(self) -> int:
        with self._queue_lock:
            return len(self._pending) + (1 if self._dropped else 0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_every_s)
            self._wake.clear()
            try:
                self.flush()
            except Exception as exc:  # never let the writer thread die silently
                log.warning("round %s: log writer: %s", self.round_id, exc)


@contextmanager
def capture_round_log(store: Any, round_id: int) -> Iterator[RoundLogHandler]:
    """Copy the calling thread's INFO+ log records (and those of threads added with `watch_thread`) to round
    `round_id`'s log in the store until the block ends; the last lines are written before it returns."""
    handler = RoundLogHandler(store, round_id).start()
    root, ours = logging.getLogger(), logging.getLogger("evorag")
    level = ours.level
    if ours.getEffectiveLevel() > logging.INFO:
        ours.setLevel(logging.INFO)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        ours.setLevel(level)
        handler.close()
