"""What the studio's handlers work with: the config, runtimes per data file, the store, the policy provider and
the background worker process. One `Services` object per studio process, shared by every browser session.

Everything heavy (indexes, the embedder, the language model, the database) is opened lazily on first use, so
the page is served before any of it is loaded. What one browser page has seen (its charts' points, what it shows)
lives in that page's gr.State, never here.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from evorag_core.config import REPO_ROOT, Config
from evorag_core.errors import DataAccessError, StoreError
from evorag_core.runtime import Runtime

from app.common import uploads
from app.common.policies import FeatureUnavailable, PolicyProvider
from app.common.worker_process import WorkerProcess

if TYPE_CHECKING:
    from evorag_core.retrieval import RetrievalService
    from evorag_core.store import Store

__all__ = ["FeatureUnavailable", "Services", "WorkerProcess", "BENCHMARKS_DIR"]

log = logging.getLogger(__name__)

BENCHMARKS_DIR = REPO_ROOT.parent / "shared" / "benchmarks"
BUNDLED_DATA_DIR = REPO_ROOT / "data"
_MAX_RUNTIMES = 4  # data files kept loaded (each holds its corpus; indexes are cached on disk)


class Services:
    """Shared, lazily built back end of the studio (thread-safe: Gradio runs handlers in worker threads)."""

    def __init__(
        self,
        cfg: Config,
        home: Path,
        *,
        data_path: Path,
        db_url: str | None = None,
        auth_users: dict[str, str] | None = None,
    ):
        self.cfg = cfg
        self.home = Path(home)
        self.default_data = Path(data_path).resolve()
        self.uploads_dir = self.home / "uploads"  # where uploaded data files are kept
        self.db_url = db_url or os.environ.get("EVORAG_DB_URL") or f"sqlite:///{self.home / 'evorag.db'}"
        self.auth_users = auth_users
        self.policies = PolicyProvider(cfg, self.home)
        self.worker: WorkerProcess | None = None
        self.extra_files: list[Path] = []  # uploaded or typed data files, newest last
        self.warm_status = ""  # what the background warm-up is loading now ("" when idle or done)
        self._lock = threading.RLock()
        self._runtimes: OrderedDict[Path, Runtime] = OrderedDict()
        self._retrieval: RetrievalService | None = None
        self._store: Store | None = None

    # -- data and runtimes ----------------------------------------------------------------------------------
    @property
    def retrieval(self):
        """One RetrievalService (embedder, embedding cache, memoised indexes) for every runtime."""
        with self._lock:
            if self._retrieval is None:
                from evorag_core.retrieval import RetrievalService

                self._retrieval = RetrievalService(self.cfg.retrieval, self.home)
            return self._retrieval

    def data_roots(self) -> tuple[Path, ...]:
        """The folders the studio reads data files from: the bundled data/, the benchmark samples the pickers offer,
        the uploads folder and `studio.data_roots` (relative ones from the current folder), symlinks resolved."""
        roots = [BUNDLED_DATA_DIR, BENCHMARKS_DIR, self.uploads_dir, *map(Path, self.cfg.studio.data_roots)]
        return tuple(dict.fromkeys(r.expanduser().resolve() for r in roots))

    def allowed_data_path(self, path: str | Path) -> Path:
        """`path` with symlinks and `..` resolved, if it is the default data file or lies under a data root;
        DataAccessError otherwise. The check reads nothing and says the same whether or not the file exists."""
        resolved = Path(path).expanduser().resolve()
        if resolved == self.default_data or any(_in(resolved, root) for root in self.data_roots()):
            return resolved
        folders = ", ".join(str(root) for root in self.data_roots())
        raise DataAccessError(f"{str(path)[:200]!r} is not a data file the studio may read: it reads only from "
                              f"{folders} (an operator adds folders with studio.data_roots); upload the file instead")

    def runtime(self, path: str | Path | None = None) -> Runtime:
        """The Runtime of a data file (loaded once, then cached); the default data file when `path` is empty.
        Only files under `data_roots()` (or the default file) are read: DataAccessError for any other path."""
        from evorag_core.data.datasets import load_dataset

        resolved = self.allowed_data_path(path) if path else self.default_data
        if _in(resolved, self.uploads_dir.resolve()):
            uploads.touch(resolved)  # in use: not deleted by age
        with self._lock:
            if resolved in self._runtimes:
                self._runtimes.move_to_end(resolved)
                return self._runtimes[resolved]
        dataset = load_dataset(resolved)
        rt = Runtime(self.cfg, self.home, dataset)
        rt.__dict__["retrieval"] = self.retrieval  # share one embedder/cache: pre-fill Runtime's cached_property
        with self._lock:
            self._runtimes[resolved] = rt
            while len(self._runtimes) > _MAX_RUNTIMES:
                self._runtimes.popitem(last=False)
            if resolved != self.default_data and resolved not in self.extra_files and not _in(resolved, BENCHMARKS_DIR):
                self.extra_files.append(resolved)
        return rt

    def add_upload(self, src: str | Path) -> Path:
        """Keep an uploaded data file (at most studio.max_upload_mb; one content-addressed copy: app/common/uploads.py), load
        it, and offer it in the pickers in place of an earlier upload of the same name; DataAccessError when too
        large, the loader's error (and nothing kept) when it does not load. Old uploads are deleted first."""
        self.clean_uploads()
        target, new = uploads.store_upload(Path(src), self.uploads_dir.resolve(), max_mb=self.cfg.studio.max_upload_mb)
        try:
            self.runtime(target)
        except Exception:
            if new:
                self._forget([target])
                target.unlink(missing_ok=True)
            raise
        with self._lock:
            self.extra_files = [f for f in self.extra_files
                                if f == target or f.name != target.name or not _in(f, self.uploads_dir.resolve())]
        return target

    def clean_uploads(self) -> list[Path]:
        """Delete uploads unused for studio.upload_max_age_hours (not those loaded now); returns them."""
        with self._lock:
            loaded = list(self._runtimes)
        gone = uploads.clean_uploads(self.uploads_dir, self.cfg.studio.upload_max_age_hours * 3600.0, keep=loaded)
        self._forget(gone)
        if gone:
            log.info("deleted %d upload(s) unused for %g h", len(gone), self.cfg.studio.upload_max_age_hours)
        return gone

    def _forget(self, paths: list[Path]) -> None:
        with self._lock:
            dropped = {p.resolve() for p in paths}
            self.extra_files = [f for f in self.extra_files if f not in dropped]
            for p in dropped:
                self._runtimes.pop(p, None)

    def data_files(self) -> list[tuple[str, str]]:
        """(label, path) of the data files offered in the pickers: the default, the benchmark samples, uploads."""
        files = [self.default_data]
        if BENCHMARKS_DIR.is_dir():
            files += sorted(BENCHMARKS_DIR.glob("*.jsonl"))
        files += self.extra_files
        seen: dict[Path, None] = {}
        for f in files:
            seen.setdefault(f, None)
        return [(_label(f), str(f)) for f in seen]

    def warm(self) -> None:
        """Load the default data file, its retrieval index and the policy LM (in the background after launch);
        `warm_status` says what is loading, for the page header."""
        try:
            self.warm_status = "loading the retrieval index"
            rt = self.runtime()
            rt.retrieval.retriever_for(rt.pooled_corpus)
            rt.embed(["warm-up"])
            self.warm_status = "loading the policy model"
            self.policies.warm()
        finally:
            self.warm_status = ""

    # -- store ------------------------------------------------------------------------------------------------
    def store(self):
        """The Store (migrated on first open); StoreError with a readable message when it cannot be opened."""
        with self._lock:
            if self._store is None:
                from evorag_core.store import open_store

                self._store = open_store(self.db_url)
            return self._store

    def store_or_none(self):
        try:
            return self.store()
        except (StoreError, OSError) as exc:
            log.warning("store unavailable: %s", exc)
            return None

    def active_adapter(self):
        store = self.store_or_none()
        return store.active_adapter() if store is not None else None

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start_worker(self) -> WorkerProcess:
        """Start `evorag worker` against this studio's home and database, supervised: when it dies the rounds it held
        are reaped at once (run again while attempts remain) and it is restarted after a backoff
        (studio.worker_restart_s, doubling up to studio.worker_restart_max_s; app/common/worker_process.py)."""
        env = dict(os.environ, EVORAG_HOME=str(self.home), EVORAG_DB_URL=self.db_url)
        self.worker = WorkerProcess(self.worker_argv(), env, self.home / "logs" / "worker.log",
                                    backoff_s=self.cfg.studio.worker_restart_s,
                                    max_backoff_s=self.cfg.studio.worker_restart_max_s, on_exit=self.worker_exited)
        self.worker.start()
        return self.worker

    def worker_argv(self) -> list[str]:
        """`evorag worker` with this studio's home, database and settings: every value of the studio's config that
        differs from configs/default.toml is passed as `--set` (its `--model`, `--config` and `--set` included), so
        the worker trains and evaluates on the studio's base model and settings."""
        from evorag_core.config import overrides_from

        argv = [sys.executable, "-m", "evorag_core.cli.main", "worker", "--home", str(self.home), "--db", self.db_url]
        for key, value in overrides_from(self.cfg).items():
            argv += ["--set", f"{key}={value}"]
        return argv

    def worker_exited(self, pid: int, code: int) -> None:
        """A worker process of this machine died: its running rounds (lease owner `host:pid:`, training/worker.py's
        worker id) are reaped now - queued again while attempts remain, else failed - their pairs released."""
        store = self.store_or_none()
        if store is None:
            return
        report = store.reap_worker(f"{socket.gethostname()}:{pid}:", f"exited with code {code}")
        if report.failed or report.requeued or report.cancelled:
            log.warning("worker pid %s exited with code %s: rounds requeued %s, failed %s, cancelled %s; %d pair(s) "
                        "released", pid, code, list(report.requeued), list(report.failed), list(report.cancelled),
                        report.released_pairs)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


def _in(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def _label(path: Path) -> str:
    if _in(path, REPO_ROOT):
        return str(path.relative_to(REPO_ROOT))
    if _in(path, BENCHMARKS_DIR):
        return f"benchmarks/{path.name}"
    return path.name
