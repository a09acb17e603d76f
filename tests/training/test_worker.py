"""The training worker as a real process (`python -m evorag_core.cli.main worker`) on a real SQLite store, with a tiny
2-layer random Llama folder as the policy model: `evorag train --wait`, the adapter registry, and crash safety
(SIGKILL mid-round -> the lease expires -> the round fails or is retried; its pairs are released, none is lost and
none consumed twice).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from tests.paths import REPO
from evorag_core.cli.main import main as cli_main
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import TrainingError
from evorag_core.store import NewPair, open_store
from evorag_core.store.base import utcnow
from evorag_core.test_hooks import ENV
from training.worker import WorkerOptions, process_one

DEMO = REPO / "data" / "demo" / "demo.jsonl"
PROMPT = "<|im_start|>system\nYou answer.<|im_end|>\n<|im_start|>user\nQuestion: {}<|im_end|>\n<|im_start|>assistant\n"
LEASE_S = 3.0
SETTINGS = {"policy.device": "cpu", "policy.threads": 1, "train.max_length": 96, "train.lr": 1e-3,
            "train.batch_size": 1, "promotion.evaluate": False}  # the gate's evaluation job: tests/promotion/
HOLD = {ENV: "round:step"}  # a round's first attempt holds after its first step (evorag_core.test_hooks)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture()
def world(tmp_path, tiny):
    """(home, db url, store with 8 queued pairs, config as the worker process sees it)."""
    torch.set_num_threads(1)  # tiny model: one thread is fastest (and 2 threads crawl on a busy machine)
    url = f"sqlite:///{tmp_path / 'evorag.db'}"
    store = open_store(url)
    store.add_pairs([NewPair(PROMPT.format(f"who founded town {i}"), f"SEARCH: town {i} founder", f"ANSWER: {i}")
                     for i in range(8)])
    cfg = apply_overrides(load_config(), {**SETTINGS, "policy.model": str(tiny)})
    yield tmp_path, url, store, cfg
    store.close()


def cli_args(home: Path, url: str, tiny: Path) -> list[str]:
    out = ["--home", str(home), "--db", url, "--model", str(tiny)]
    for key, value in SETTINGS.items():
        out += ["--set", f"{key}={value}"]
    return out


class Worker:
    """`evorag worker` in its own process; its log is printed when a test fails. `hold`: each round's first attempt
    stays mid-round after its first step until it is cancelled or the worker is stopped (`HOLD`)."""

    def __init__(self, home: Path, url: str, tiny: Path, *, hold: bool = False):
        self.log = home / f"worker-{time.monotonic_ns()}.log"
        argv = [sys.executable, "-m", "evorag_core.cli.main", "worker", *cli_args(home, url, tiny),
                "--lease", str(LEASE_S), "--poll", "0.3"]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO),
                   **(HOLD if hold else {}))
        self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def wait_for(predicate, timeout: float, what: str, worker: Worker | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if worker is not None and worker.proc.poll() is not None:
            pytest.fail(f"worker exited with {worker.proc.returncode} while waiting for {what}:\n{worker.tail()}")
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what}" + (f":\n{worker.tail()}" if worker else ""))


def kill_mid_round(store, round_id: int, worker: Worker) -> None:
    """Wait until the worker (started with `hold`) reported a training step of the round, then SIGKILL it."""
    wait_for(lambda: (store.get_round(round_id).progress or {}).get("step", 0) >= 1, 240, "training progress", worker)
    os.kill(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait(10)
    assert worker.proc.returncode == -signal.SIGKILL


# -- fast: the worker loop with a stand-in round function (the real ones run in the slow tests) --------------------

def test_a_failing_round_is_failed_with_a_readable_error_and_its_pairs_released(world):
    """The round function claims 8 pairs and raises: the round fails with `Type: message (at file:line in fn)`,
    the pairs are queued again, and the worker itself carries on (process_one returns the failed round)."""
    home, _, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8})

    def run(job, st, on_progress):
        st.claim_pairs(job.round_id, job.pairs)
        raise TrainingError("nothing to train on")

    done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=5), run)
    assert done.id == rid and done.status == "failed"
    assert done.error.startswith("TrainingError: nothing to train on (at test_worker.py:") and " in run)" in done.error
    assert store.count_pairs("status") == {"queued": 8}


def test_drain_runs_every_queued_round_then_returns_and_once_runs_one(world):
    """`evorag worker --drain`: three queued rounds (the second queues a fourth as it runs, as a round's gated
    evaluation is queued) all run in queue order, then the loop returns at the first poll that finds none, without
    waiting for a stop; `--once` runs one. The stand-in round function records the order."""
    from training.job import ControllerRef
    from training.worker import serve

    home, _, store, cfg = world
    ran: list[int] = []

    def run(job, st, on_progress):
        ran.append(job.round_id)
        if len(ran) == 2:
            st.enqueue_round("grpo", {})
        return ControllerRef(home / "controller", job.round_id, job.objective, {"steps": 0})

    first = [store.enqueue_round(objective, {}) for objective in ("grpo", "ppo", "grpo")]
    assert serve(store, cfg, home, WorkerOptions(lease_s=5, poll_s=60, once=True), run=run) == 1
    assert ran == first[:1]
    assert serve(store, cfg, home, WorkerOptions(lease_s=5, poll_s=60, drain=True), run=run) == 3
    assert ran == [*first, first[-1] + 1]
    assert {r.status for r in store.list_rounds()} == {"succeeded"}


def test_a_worker_on_an_empty_queue_does_not_load_torch(tmp_path):
    """`evorag worker --once` on an empty store polls and exits without importing torch, transformers or datasets
    (the studio's supervised worker waits like this most of its life); torch comes with the first claimed round
    (`training.worker.prepare_for_rounds`, run by the round tests of this file)."""
    db = f"sqlite:///{tmp_path / 'e.db'}"
    code = ("import sys; from evorag_core.cli.main import main; "
            f"main(['worker', '--once', '--home', {str(tmp_path)!r}, '--db', {db!r}]); "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
    assert "polling" in done.stderr


def test_heartbeat_writes_progress_and_a_cancelled_round_stops(world):
    """Progress {step, total, loss, eta} reaches the store while the round runs; when the round is cancelled the
    next progress report raises RoundCancelled: training stops, the worker ends the round cancelled with its pairs
    released, and nothing is registered. ETA after step s of 100 steps taking 0.01 s each: 0.01 · (100 − s)."""
    home, _, store, cfg = world
    store.enqueue_round("grpo", {})
    seen: list[dict] = []

    def run(job, st, on_progress):
        st.claim_pairs(job.round_id, 8)
        for step in range(1, 101):
            time.sleep(0.05)
            on_progress({"step": step, "total": 100, "loss": 1.0 / step, "elapsed_s": 0.01 * step})
            progress = st.get_round(job.round_id).progress or {}
            if progress.get("step") and not seen:
                seen.append(progress)
                st.cancel_round(job.round_id)
        raise AssertionError("the round was not stopped")

    done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=0.3), run)
    assert done.status == "cancelled" and store.count_pairs("status") == {"queued": 8}
    step = seen[0]["step"]
    assert seen[0]["total"] == 100 and seen[0]["loss"] == 1.0 / step
    assert seen[0]["eta"] == round(0.01 * step / step * (100 - step), 1)


def test_a_round_whose_worker_died_is_retried_once_by_default_and_then_fails(world):
    """Default config (train.max_attempts = 2) and a round queued from the studio. A worker claims it with its 8 pairs
    and dies: once its lease is past, the reaper queues the round again ("queued to retry (attempt 2/2)") with the
    pairs released. The next claim is attempt 2, which the studio's round table and progress label show as
    "retrying (attempt 2/2)". That worker dies too: the round ends failed, its pairs queued again."""
    from app.common.services import Services
    from app.tabs.training.handlers import launch_round, training_view

    home, url, store, cfg = world
    svc = Services(cfg, home, data_path=DEMO, db_url=url)
    try:
        _, rid = launch_round(svc, "dpo", 8, 1, 1e-3, "k3")
        assert store.get_round(rid).max_attempts == 2
        for attempt in (1, 2):
            claimed = store.claim_round(f"dies-{attempt}", 30)
            assert (claimed.id, claimed.attempts) == (rid, attempt) and len(store.claim_pairs(rid, 8)) == 8
            if attempt == 2:
                assert claimed.status_label == "retrying (attempt 2/2)"
                view = training_view(svc)
                assert "retrying (attempt 2/2)" in view.rounds and "retrying (attempt 2/2)" in view.progress
            report = store.expire_leases(now=utcnow() + timedelta(seconds=60))
            assert store.count_pairs("status") == {"queued": 8}
            if attempt == 1:
                assert report.requeued == (rid,) and not report.failed
                assert store.get_round(rid).status_label == "queued to retry (attempt 2/2)"
        assert report.failed == (rid,) and not report.requeued
        failed = store.get_round(rid)
        assert failed.status_label == "failed" and failed.error.startswith("attempt 2: the lease of worker 'dies-2'")
    finally:
        svc.close()


# -- slow: real worker processes --------------------------------------------------------------------------------

@pytest.mark.slow
def test_train_wait_follows_a_real_worker_and_adapters_cli(world, tiny, capsys):
    """`evorag train --wait --json` returns when the worker process finished the round; the progress bar went to
    stderr. The adapter is listed, activates; a corrupted copy is refused and the active adapter stays. An idle
    worker exits with 0 on SIGTERM."""
    home, url, store, _ = world
    worker = Worker(home, url, tiny)
    try:
        code = cli_main(["train", "--objective", "dpo", "--pairs", "8", "--epochs", "1", "--wait", "--json",
                         "--poll", "0.3", *cli_args(home, url, tiny)])
        out, err = capsys.readouterr()
        assert code == 0, worker.tail()
        result = json.loads(out)
        assert result["status"] == "succeeded" and result["adapter"] == "r1-dpo"
        assert result["metrics"]["steps"] == 8 and result["progress"]["step"] >= 1
        assert "round 1 dpo [" in err and "succeeded" in err
        assert store.count_pairs("status") == {"consumed": 8}

        assert cli_main(["adapters", "list", "--json", *cli_args(home, url, tiny)]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [(a["name"], a["round"], a["objective"], a["active"]) for a in listed] == [("r1-dpo", 1, "dpo", False)]
        assert set(listed[0]) == {"name", "round", "objective", "role", "path", "active", "created", "metrics", "heldout"}
        assert listed[0]["role"] == "policy"  # a round on every source: the policy's adapter
        assert listed[0]["heldout"]["report"] is None and listed[0]["heldout"]["score"] is None  # not evaluated
        assert cli_main(["adapters", "activate", "r1-dpo", *cli_args(home, url, tiny)]) == 0
        assert store.active_adapter().name == "r1-dpo"

        good = Path(listed[0]["path"])
        bad = home / "adapters" / "corrupt"
        bad.mkdir()
        for f in good.iterdir():
            (bad / f.name).write_bytes(f.read_bytes())
        weights = bad / "adapter_model.safetensors"
        data = bytearray(weights.read_bytes())
        data[-8:] = b"\x00" * 8
        weights.write_bytes(bytes(data))
        store.register_adapter("corrupt", str(bad), base_model=str(tiny), objective="dpo")
        assert cli_main(["adapters", "activate", "corrupt", *cli_args(home, url, tiny)]) == 2
        assert "sha256" in capsys.readouterr().err and store.active_adapter().name == "r1-dpo"
        assert cli_main(["adapters", "deactivate", *cli_args(home, url, tiny)]) == 0
        assert store.active_adapter() is None

        worker.proc.send_signal(signal.SIGTERM)
        assert worker.proc.wait(30) == 0, worker.tail()
    finally:
        worker.stop()


@pytest.mark.slow
def test_sigkill_mid_round_then_the_lease_expires_and_the_round_is_retried(world, tiny):
    """`evorag train` with the default config (train.max_attempts = 2): the worker process is killed mid-round with
    its 8 pairs claimed. Until the lease runs out nothing changes; then the next worker (the same code, in this
    process) reaps the round back into the queue, its pairs released, claims it again ("retrying (attempt 2/2)")
    and finishes it: all 8 pairs consumed once."""
    from training.rounds import run_round

    home, url, store, cfg = world
    assert cli_main(["train", "--objective", "dpo", "--pairs", "8", "--epochs", "6", *cli_args(home, url, tiny)]) == 0
    rid = store.list_rounds()[0].id
    worker = Worker(home, url, tiny, hold=True)
    try:
        kill_mid_round(store, rid, worker)
    finally:
        worker.stop()
    assert store.get_round(rid).status == "running" and store.count_pairs("status") == {"claimed": 8}
    time.sleep(LEASE_S + 0.5)
    labels = []

    def run(job, st, on_progress):
        labels.append(st.get_round(job.round_id).status_label)
        return run_round(job, st, on_progress)

    done = process_one(store, cfg, home, "second-worker", WorkerOptions(lease_s=30), run)
    assert done.id == rid and done.status == "succeeded" and done.attempts == 2, done.error
    assert labels == ["retrying (attempt 2/2)"]
    assert store.count_pairs("status") == {"consumed": 8}
    assert sorted(done.metrics["pair_ids"]) == sorted(p.id for p in store.list_pairs(status="consumed"))
    assert [a.name for a in store.list_adapters()] == [f"r{rid}-dpo"]
    assert not list((home / "adapters").glob(".*"))  # no temporary folder left by the killed attempt


@pytest.mark.slow
def test_sigkill_mid_round_without_retry_fails_the_round_and_releases_its_pairs(world, tiny):
    """max_attempts 1: after the lease expires the round is failed with a readable note, its 8 pairs are queued
    again (none lost, none consumed), no adapter is registered, and a new round can claim the pairs."""
    home, url, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8, "epochs": 6})
    worker = Worker(home, url, tiny, hold=True)
    try:
        kill_mid_round(store, rid, worker)
    finally:
        worker.stop()
    time.sleep(LEASE_S + 0.5)
    assert process_one(store, cfg, home, "reaper", WorkerOptions(lease_s=30)) is None  # nothing left to run
    failed = store.get_round(rid)
    assert failed.status == "failed" and "lease" in failed.error and "expired" in failed.error
    assert store.count_pairs("status") == {"queued": 8} and store.list_adapters() == []
    again = store.enqueue_round("dpo", {"pairs": 8})
    store.claim_round("w", 30)
    assert len(store.claim_pairs(again, 8)) == 8


@pytest.mark.slow
def test_sigterm_mid_round_fails_the_round_and_releases_its_pairs_at_once(world, tiny):
    """SIGTERM (what the studio sends on close, and what the kernel sends when the studio dies: PR_SET_PDEATHSIG)
    while the round trains, and at once SIGINT (Ctrl-C reaching both processes of a terminal): before the worker
    exits the round is failed ("the worker was stopped") and its 8 claimed pairs are queued again, in one
    transaction - no lease to wait for."""
    home, url, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8, "epochs": 6})
    worker = Worker(home, url, tiny, hold=True)
    try:
        wait_for(lambda: (store.get_round(rid).progress or {}).get("step", 0) >= 1, 240, "training progress", worker)
        assert store.count_pairs("status") == {"claimed": 8}
        worker.proc.send_signal(signal.SIGTERM)
        worker.proc.send_signal(signal.SIGINT)
        assert worker.proc.wait(60) == 0, worker.tail()
    finally:
        worker.stop()
    stopped = store.get_round(rid)
    assert stopped.status == "failed" and "the worker was stopped" in stopped.error, worker.tail()
    assert store.count_pairs("status") == {"queued": 8} and stopped.lease_expires_at is None



def test_only_the_first_stop_signal_interrupts_the_worker():
    """The worker's SIGTERM/SIGINT handler raises KeyboardInterrupt once (the round is failed on the way out); a
    second signal - the studio's SIGTERM and then the kernel's when the studio exits - returns, so it cannot break
    into the transaction that fails the round."""
    from training.worker import _StopOnce

    handler = _StopOnce()
    with pytest.raises(KeyboardInterrupt):
        handler(signal.SIGTERM, None)
    assert handler(signal.SIGTERM, None) is None and handler(signal.SIGINT, None) is None


def test_a_database_error_while_failing_a_round_is_retried_on_fresh_connections(world, monkeypatch):
    """finish_round raises an OperationalError once (a connection the interrupt left mid-transaction): the worker
    disposes of the pool and tries again, so the round is failed and its 8 pairs released."""
    from sqlalchemy.exc import OperationalError

    from training.worker import _fail

    _, _, store, _ = world
    rid = store.enqueue_round("dpo", {"pairs": 8})
    store.claim_round("w", 30)
    assert len(store.claim_pairs(rid, 8)) == 8
    real, calls = store.finish_round, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("BEGIN IMMEDIATE", {}, Exception("cannot start a transaction within a transaction"))
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "finish_round", flaky)
    done = _fail(store, rid, "w", "interrupted")
    assert done.status == "failed" and len(calls) == 2 and store.count_pairs("status") == {"queued": 8}

PARENT = """
import sys, time
from pathlib import Path
from app.common.services import WorkerProcess
argv, log = sys.argv[1:-1], Path(sys.argv[-1])
WorkerProcess(argv, dict(__import__("os").environ), log).start()
print("started", flush=True)
time.sleep(3600)
"""


@pytest.mark.slow
def test_the_studio_killed_mid_round_fails_the_round_and_releases_its_pairs(world, tiny):
    """The process that started the worker as the studio does (app.common.services.WorkerProcess: PR_SET_PDEATHSIG) is
    SIGKILLed mid-round: the kernel sends the worker SIGTERM, and the worker fails the round ("the worker was
    stopped") with its 8 pairs queued again before it exits - no lease to wait for."""
    import psutil

    home, url, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8, "epochs": 6})
    log = home / "worker.log"
    argv = [sys.executable, "-m", "evorag_core.cli.main", "worker", *cli_args(home, url, tiny),
            "--lease", "600", "--poll", "0.3"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO), **HOLD)
    parent = subprocess.Popen([sys.executable, "-c", PARENT, *argv, str(log)], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "started"
        child = psutil.Process(parent.pid).children()[0]
        tail = lambda: log.read_text(errors="replace")[-3000:] if log.exists() else ""
        wait_for(lambda: (store.get_round(rid).progress or {}).get("step", 0) >= 1 or not child.is_running(), 240,
                 "training progress")
        assert store.count_pairs("status") == {"claimed": 8}, tail()
        parent.kill()
        parent.wait(10)
        child.wait(60)  # not our child: psutil cannot read its exit code
    finally:
        parent.kill()
    stopped = store.get_round(rid)
    assert stopped.status == "failed" and "the worker was stopped" in stopped.error, tail()
    assert store.count_pairs("status") == {"queued": 8}
