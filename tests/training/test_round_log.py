"""A round's log lines reach the store (training/round_log.py, store/round_logs.py) and `evorag rounds log ID`.

Fast: the worker loop (`process_one`) on a real SQLite store with stand-in round functions that log, report phases and
steps, and fail or get cancelled; the handler's guarantees (other threads' records stay out, a failing store write
never breaks the round and the lines arrive later, a bounded queue); the CLI command. Slow: real DPO rounds of the
tiny random Llama (tests/training/test_worker.py's fixtures): one in this process, cancelled mid-training, and one in a
real `evorag worker` process followed live with `evorag rounds log ID --follow`.
"""
from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from evorag_core.cli.main import main as cli_main
from evorag_core.errors import TrainingError
from evorag_core.store import NewLogLine
from training.round_log import RoundLogHandler, capture_round_log
from training.worker import WorkerOptions, process_one
from tests.training.test_round_cancel import run_and_cancel_at_step
from tests.training.test_worker import Worker, cli_args, tiny, wait_for, world  # noqa: F401  (fixtures)

train_log = logging.getLogger("evorag.train")


def messages(store, rid: int) -> list[str]:
    return [line.message for line in store.round_log(rid)]


def test_a_failed_rounds_lines_are_stored_from_claim_to_traceback(world, monkeypatch):
    """The stand-in logs, reports two phases and 3 steps, warns, and raises: the round's log holds, in order, the
    claim, each phase once, the first and the last step line with the loss (not step 2: step lines are throttled),
    the objective's own lines, the warning (as WARNING), and the failure's traceback as one ERROR line ending with the
    exception."""
    monkeypatch.setattr("training.worker.STEP_LOG_EVERY_S", 3600.0)
    home, _, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8})

    def run(job, st, on_progress):
        on_progress({"phase": "load"})
        on_progress({"phase": "load"})  # repeated: logged once
        train_log.info("dpo phase load")
        on_progress({"phase": "prepare"})
        for step in (1, 2, 3):
            on_progress({"step": step, "total": 3, "loss": 0.7 - step / 10, "elapsed_s": 0.5 * step})
        train_log.warning("the learning rate looks high")
        train_log.debug("not stored: below INFO")
        raise TrainingError("nothing to train on")

    done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=5), run)
    assert done.status == "failed"
    lines = store.round_log(rid)
    text = [x.message for x in lines]
    assert text[0] == f"round {rid} (dpo, attempt 1/1) claimed by w"
    assert text[1:4] == [f"round {rid} phase load", "dpo phase load", f"round {rid} phase prepare"]
    assert text[4] == f"round {rid} step 1/3: loss 0.6 (0.5 s/step)"
    assert text[5] == f"round {rid} step 3/3: loss 0.4 (0.5 s/step)"
    assert (lines[6].level, text[6]) == ("WARNING", "the learning rate looks high")
    assert lines[7].level == "ERROR" and text[7].startswith(f"round {rid} failed:\nTraceback")
    assert text[7].rstrip().endswith("TrainingError: nothing to train on")
    assert len(lines) == 8 and [x.seq for x in lines] == list(range(1, 9))


def test_an_evaluations_step_lines_name_the_side_it_is_answering(world, monkeypatch):
    """An evaluation job reports questions as steps, with no loss: its step lines say which side they belong to."""
    monkeypatch.setattr("training.worker.STEP_LOG_EVERY_S", 3600.0)
    home, _, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8})

    def run(job, st, on_progress):
        for step in (1, 2):
            on_progress({"phase": "evaluate base", "step": step, "total": 2, "elapsed_s": 1.5 * step})
        raise TrainingError("stop here")

    process_one(store, cfg, home, "w", WorkerOptions(lease_s=5), run)
    text = messages(store, rid)
    assert f"round {rid} step 1/2: evaluate base (1.5 s/step)" in text
    assert f"round {rid} step 2/2: evaluate base (1.5 s/step)" in text


def test_a_cancelled_rounds_lines_end_with_the_cancel(world):
    """Cancelled after step 3 of 100: the log says the cancel was requested and where the round stopped."""
    home, _, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8})

    def run(job, st, on_progress):
        st.claim_pairs(job.round_id, 8)
        for step in range(1, 101):
            on_progress({"step": step, "total": 100, "loss": 1.0, "elapsed_s": 0.1 * step})
            if step == 3:
                st.cancel_round(job.round_id)
        raise AssertionError("not stopped")

    assert process_one(store, cfg, home, "w", WorkerOptions(lease_s=60), run).status == "cancelled"
    text = messages(store, rid)
    assert text[-2] == f"round {rid}: cancel requested: stopping"
    assert text[-1] == (f"round {rid} cancelled at step 4/100 (phase train): its pairs are queued again, "
                        "no adapter registered")


def test_other_threads_records_stay_out_and_the_heartbeats_come_in(world):
    """Records of a thread not working on the round (another round's worker, a web request) are not stored; the
    watched thread's are."""
    _, _, store, _ = world
    rid = store.enqueue_round("dpo")
    go = threading.Event()

    def heartbeat_like():
        go.wait(10)
        train_log.warning("the heartbeat's")

    with capture_round_log(store, rid) as handler:
        train_log.info("mine")
        other = threading.Thread(target=lambda: train_log.warning("someone else's"))
        other.start()
        other.join()
        watched = threading.Thread(target=heartbeat_like)
        watched.start()
        handler.watch_thread(watched.ident)
        go.set()
        watched.join()
    assert messages(store, rid) == ["mine", "the heartbeat's"]


class FlakyStore:
    """The store, but `add_round_logs` fails the first `failures` times (a locked or unreachable database)."""

    def __init__(self, store, failures: int):
        self.store, self.failures, self.calls = store, failures, 0

    def add_round_logs(self, round_id, lines):
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError("database is locked")
        return self.store.add_round_logs(round_id, lines)


def test_a_failing_store_write_delays_the_lines_but_never_raises(world):
    """Two failed writes: logging goes on without an error, and the lines arrive, in order, with a later write."""
    _, _, store, _ = world
    rid = store.enqueue_round("dpo")
    flaky = FlakyStore(store, failures=2)
    handler = RoundLogHandler(flaky, rid, flush_every_s=0.05).start()
    logger = logging.getLogger("evorag.test-round-log")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        for i in range(5):
            logger.info("line %d", i)
        wait_for(lambda: store.round_log_last_seq(rid) == 5, 20, "the lines after two failed writes")
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert flaky.calls >= 3 and messages(store, rid) == [f"line {i}" for i in range(5)]


def test_lines_beyond_the_queue_bound_are_counted_and_reported(world):
    """The store is down while 10 lines come for a queue of 4: 4 are kept, the other 6 reported as dropped."""
    _, _, store, _ = world
    rid = store.enqueue_round("dpo")
    flaky = FlakyStore(store, failures=10**6)
    handler = RoundLogHandler(flaky, rid, flush_every_s=3600, max_pending=4)
    for i in range(10):
        handler.handle(logging.LogRecord("evorag.train", logging.INFO, __file__, 1, "line %d", (i,), None))
    flaky.failures = 0
    handler.flush()
    assert messages(store, rid)[:4] == [f"line {i}" for i in range(4)]
    assert messages(store, rid)[4].startswith("… 6 log line(s) of this round were dropped")
    handler.flush()
    handler.close()
    assert store.round_log_last_seq(rid) == 5  # written once


def test_cli_rounds_log_prints_the_lines_and_follows_a_round_to_its_end(world, capsys):
    """`evorag rounds log ID`: the lines with time and level, a multi-line message indented, a gap as the lines left
    out; --json as JSON Lines; --follow prints lines added while it runs and exits 0 when the round succeeded (after the
    worker's last line); an unknown round is exit 2."""
    home, url, store, _ = world
    rid = store.enqueue_round("dpo")
    store.claim_round("w", 60)
    store.add_round_logs(rid, [NewLogLine("INFO", "claimed"), NewLogLine("ERROR", "failed:\nTraceback\nValueError")])
    args = ["--home", str(home), "--db", url]
    assert cli_main(["rounds", "log", str(rid), *args]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(" INFO     claimed") and out[1].endswith(" ERROR    failed:")
    assert out[2] == " " * 29 + "Traceback" and len(out) == 4
    assert cli_main(["rounds", "log", str(rid), "--json", *args]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(r["seq"], r["level"]) for r in rows] == [(1, "INFO"), (2, "ERROR")] and rows[0]["message"] == "claimed"

    def worker_side():
        time.sleep(0.5)
        store.add_round_logs(rid, [NewLogLine("INFO", "step 1/1")])
        store.finish_round(rid, metrics={}, worker_id="w")
        time.sleep(0.5)  # the worker's last line comes after the round is finished
        store.add_round_logs(rid, [NewLogLine("INFO", "succeeded: adapter r1-dpo")])

    thread = threading.Thread(target=worker_side)
    thread.start()
    code = cli_main(["rounds", "log", str(rid), "--follow", "--poll", "0.1", *args])
    thread.join()
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and out[-2].endswith("step 1/1") and out[-1].endswith("succeeded: adapter r1-dpo")
    assert cli_main(["rounds", "log", "999", *args]) == 2


def test_cli_rounds_log_shows_the_lines_left_out(world, capsys):
    from evorag_core.store.round_logs import HEAD_LINES, MAX_LINES

    home, url, store, _ = world
    rid = store.enqueue_round("dpo")
    store.add_round_logs(rid, [NewLogLine("INFO", f"line {i}") for i in range(1, MAX_LINES + 11)])
    assert cli_main(["rounds", "log", str(rid), "--home", str(home), "--db", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[HEAD_LINES - 1].endswith(f"line {HEAD_LINES}") and out[HEAD_LINES] == "… 10 lines left out …"
    assert out[-1].endswith(f"line {MAX_LINES + 10}") and len(out) == MAX_LINES + 1


# -- slow: real rounds of the tiny model ---------------------------------------------------------------------------

@pytest.mark.slow
def test_a_real_dpo_round_cancelled_mid_training_has_its_lines(world):
    """A real DPO round (8 pairs, 40 epochs) in the worker loop, cancelled after 2 steps: its log holds the claim, the
    phases (the worker's and TRL-based DPO's own `dpo phase` lines), step lines with the loss, and the cancel."""
    home, _, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8, "epochs": 40})
    done, steps, _ = run_and_cancel_at_step(store, cfg, home, rid, 2)
    assert done.status == "cancelled", done.error
    text = messages(store, rid)
    assert text[0] == f"round {rid} (dpo, attempt 1/1) claimed by w"
    for line in (f"round {rid} phase load", f"round {rid} phase prepare", "dpo phase load", "dpo phase train"):
        assert line in text
    step_lines = [t for t in text if t.startswith(f"round {rid} step ")]
    assert step_lines and step_lines[0].startswith(f"round {rid} step 1/320: loss ")
    assert text[-1].startswith(f"round {rid} cancelled at step {steps[-1]}/320 (phase train)")


@pytest.mark.slow
def test_a_worker_process_rounds_lines_followed_live_by_the_cli(world, tiny, capsys):
    """`evorag worker` in its own process runs a real DPO round; `evorag rounds log ID --follow` in this process
    prints its lines as they come, from the claim to "succeeded: adapter r1-dpo", and exits 0."""
    home, url, store, _ = world
    rid = store.enqueue_round("dpo", {"pairs": 8, "epochs": 1})
    worker = Worker(home, url, tiny)
    codes: list[int] = []
    follow = threading.Thread(target=lambda: codes.append(cli_main(
        ["rounds", "log", str(rid), "--follow", "--poll", "0.3", "--home", str(home), "--db", url])), daemon=True)
    try:
        follow.start()
        wait_for(lambda: store.get_round(rid).status in ("succeeded", "failed", "cancelled"), 300, "the round", worker)
        follow.join(30)
        out = capsys.readouterr().out
        assert codes == [0], f"{store.get_round(rid).error}\n{worker.tail()}"
    finally:
        worker.stop()
    assert f"round {rid} (dpo, attempt 1/1) claimed by " in out and f"round {rid} phase load" in out
    assert f"round {rid} step 8/8: loss " in out
    assert out.rstrip().splitlines()[-1].split(" INFO     ")[1].startswith(f"round {rid} succeeded: adapter r1-dpo at ")
