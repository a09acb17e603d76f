"""Cancelling a training round (issue #24 item 5): a queued round never starts; a running one stops within one
training step, ends `cancelled`, registers no adapter, and every pair it claimed is queued again exactly once.

The fast tests drive the worker loop (`process_one`) with a stand-in round function on a real SQLite store; the
slow one runs a real DPO round of the tiny 2-layer random Llama (tests/training/test_worker.py's fixtures) and cancels it
from another thread while it trains.
"""
from __future__ import annotations

import json
import threading
import time

import pytest

from evorag_core.errors import StoreError
from training.job import RoundCancelled
from training.worker import Heartbeat, WorkerOptions, process_one
from tests.training.test_worker import tiny, world  # noqa: F401  (fixtures: the tiny model; a store with 8 queued pairs)


def _pair_ids_by_status(store) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in store.list_pairs(limit=None):
        out.setdefault(p.status, []).append(p.id)
    return out


def run_and_cancel_at_step(store, cfg, home, rid: int, step: int) -> tuple:
    """Run round `rid` in a worker while another thread cancels it once `step` steps are reported (or the round has
    ended without reaching them: the caller's assertions then fail). Returns (the finished round, every step
    reported, [the last step reported when the cancel was written])."""
    from training.rounds import run_round

    steps: list[int] = []
    at_cancel: list[int] = []
    reached, finished = threading.Event(), threading.Event()

    def spy(job, st, on_progress):
        def report(entry):
            if "step" in entry:
                steps.append(int(entry["step"]))
                if len(steps) >= step:
                    reached.set()
            on_progress(entry)
        try:
            return run_round(job, st, report)
        finally:
            finished.set()

    def canceller():
        while not (reached.wait(0.05) or finished.is_set()):
            pass
        store.cancel_round(rid)
        at_cancel.append(steps[-1] if steps else 0)

    thread = threading.Thread(target=canceller)
    thread.start()
    done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=60), spy)
    finished.set()
    thread.join()
    return done, steps, at_cancel


def test_a_cancelled_queued_round_never_starts(world):
    """Round 1 is cancelled while queued: the worker finds nothing to claim and round 2 runs instead."""
    home, _, store, cfg = world
    first, second = store.enqueue_round("dpo", {"pairs": 4}), store.enqueue_round("dpo", {"pairs": 4})
    assert store.cancel_round(first).status == "cancelled"
    ran: list[int] = []

    def run(job, st, on_progress):
        ran.append(job.round_id)
        raise RuntimeError("stand-in round")

    done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=5), run)
    assert ran == [second] and done.id == second
    assert store.get_round(first).status == "cancelled" and store.get_round(first).started_at is None
    assert process_one(store, cfg, home, "w", WorkerOptions(lease_s=5), run) is None and ran == [second]


def test_the_worker_stops_at_the_first_report_after_the_cancel(world):
    """The stand-in claims all 8 pairs and reports steps 1..100; the cancel comes after step 3 is reported, so
    step 4's report raises RoundCancelled. The round ends cancelled at step 4 (progress in the store says so),
    the 8 pairs are queued again, and the heartbeat's lease (60 s) played no part: the check is per report."""
    home, _, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8})
    reported: list[int] = []

    def run(job, st, on_progress):
        assert len(st.claim_pairs(job.round_id, 8)) == 8
        for step in range(1, 101):
            reported.append(step)
            on_progress({"step": step, "total": 100, "loss": 1.0, "elapsed_s": 0.1 * step})
            if step == 3:
                st.cancel_round(job.round_id)
                assert st.get_round(job.round_id).status_label == "cancelling"
                assert st.count_pairs("status") == {"claimed": 8}  # held until the worker stops
        raise AssertionError("not stopped")

    done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=60), run)
    assert done.id == rid and done.status == "cancelled" and reported[-1] == 4
    assert done.progress["step"] == 4 and done.progress["phase"] == "train"
    assert store.count_pairs("status") == {"queued": 8} and store.list_adapters() == []


def test_a_cancel_during_a_phase_stops_before_the_next_phase(world):
    """Phase reports ({phase}) check for a cancel too: cancelled while "loading", the round never trains."""
    home, _, store, cfg = world
    rid = store.enqueue_round("dpo", {})
    phases: list[str] = []

    def run(job, st, on_progress):
        for name in ("load", "prepare", "train"):
            phases.append(name)
            on_progress({"phase": name})
            st.cancel_round(job.round_id)
        raise AssertionError("not stopped")

    assert process_one(store, cfg, home, "w", WorkerOptions(lease_s=60), run).status == "cancelled"
    assert phases == ["load", "prepare"] and store.get_round(rid).progress["phase"] == "prepare"


def test_heartbeat_report_raises_only_once_a_cancel_is_requested(world):
    _, _, store, _ = world
    rid = store.enqueue_round("dpo", {})
    store.claim_round("w", 60)
    beat = Heartbeat(store, rid, "w", 60)
    beat.report({"step": 1, "total": 2, "loss": 0.5, "elapsed_s": 1.0})
    store.cancel_round(rid)
    with pytest.raises(RoundCancelled):
        beat.report({"step": 2, "total": 2, "loss": 0.4, "elapsed_s": 2.0})
    store.confirm_cancel(rid, worker_id="w")
    with pytest.raises(StoreError):
        store.cancel_round(rid)


def test_the_test_hold_point_keeps_a_first_attempt_at_its_first_step_until_cancelled(world, monkeypatch):
    """With $EVORAG_TEST_HOLD naming `round:step` (evorag_core.test_hooks), a first attempt's first step report
    waits - another thread finds the round running at step 1 - until a cancel is requested, then raises
    RoundCancelled; a later attempt does not hold."""
    from evorag_core import test_hooks

    _, _, store, _ = world
    monkeypatch.setenv(test_hooks.ENV, "round:step")
    monkeypatch.setattr(test_hooks, "_held", set())
    rid = store.enqueue_round("dpo", {})
    store.claim_round("w", 60)
    beat = Heartbeat(store, rid, "w", 60, first_attempt=True).start()
    outcome: list[BaseException] = []

    def train():
        try:
            beat.report({"step": 1, "total": 2, "loss": 0.5, "elapsed_s": 1.0})
        except RoundCancelled as exc:
            outcome.append(exc)

    thread = threading.Thread(target=train)
    thread.start()
    deadline = time.monotonic() + 120
    while (store.get_round(rid).progress or {}).get("step") != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.get_round(rid).progress["step"] == 1 and thread.is_alive() and not outcome  # held mid-round
    store.cancel_round(rid)
    thread.join(120)
    beat.stop()
    assert not thread.is_alive() and isinstance(outcome[0], RoundCancelled)

    monkeypatch.setattr(test_hooks, "_held", set())
    later = Heartbeat(store, rid, "w", 60, first_attempt=False)
    with pytest.raises(RoundCancelled):  # no hold: the pending cancel is read at once
        later.report({"step": 1, "total": 2, "loss": 0.5, "elapsed_s": 1.0})


@pytest.mark.slow
def test_cancelling_a_real_dpo_round_stops_it_within_one_step(world):
    """A real DPO round (tiny Llama, 8 pairs, batch 1, 40 epochs -> 320 steps) in the worker loop; another thread
    waits until 2 steps are reported, cancels, and then reads the last step reported (`at_cancel`). The step in
    flight when the cancel was written is the last: the final step is at most at_cancel + 1, far below 320. The
    round is cancelled, no adapter is registered, and each of the 8 pairs is queued exactly once (none consumed)."""
    home, _, store, cfg = world
    rid = store.enqueue_round("dpo", {"pairs": 8, "epochs": 40})
    done, steps, at_cancel = run_and_cancel_at_step(store, cfg, home, rid, 2)
    assert at_cancel[0] >= 2, "training never reached step 2"
    assert done.id == rid and done.status == "cancelled", done.error
    assert at_cancel[0] <= steps[-1] <= at_cancel[0] + 1 < 320
    assert done.progress["step"] == steps[-1] and done.progress["phase"] == "train"
    assert store.list_adapters() == []
    by_status = _pair_ids_by_status(store)
    assert list(by_status) == ["queued"] and sorted(by_status["queued"]) == sorted(set(by_status["queued"]))
    assert len(by_status["queued"]) == 8 and all(p.round_id is None for p in store.list_pairs(limit=None))


def test_cli_rounds_cancel_and_list(world, capsys):
    """`evorag rounds cancel ID`: a queued round -> cancelled; a running one -> "cancel requested" (cancelling);
    a finished one or an unknown id -> exit 2 with a message. `evorag rounds list --json` shows both."""
    from evorag_core.cli.main import main as cli_main

    home, url, store, _ = world
    queued, running = store.enqueue_round("dpo", {}), store.enqueue_round("grpo", {})
    store.claim_round("w", 60, objective="grpo")
    args = ["--home", str(home), "--db", url]
    assert cli_main(["rounds", "cancel", str(queued), *args]) == 0
    assert cli_main(["rounds", "cancel", str(running), *args]) == 0
    out = capsys.readouterr().out
    assert f"round {queued} cancelled" in out and f"round {running}: cancel requested" in out
    assert cli_main(["rounds", "cancel", str(queued), *args]) == 2
    assert cli_main(["rounds", "cancel", "999", *args]) == 2
    capsys.readouterr()
    assert cli_main(["rounds", "list", "--json", *args]) == 0
    listed = {r["round_id"]: r["status_label"] for r in json.loads(capsys.readouterr().out)}
    assert listed == {queued: "cancelled", running: "cancelling"}


def test_a_failed_cancel_check_does_not_fail_the_round(world, monkeypatch):
    """The per-step read of the cancel request hits the database; when that read fails once (locked, network), the
    step goes on and the next report reads it again."""
    _, _, store, _ = world
    rid = store.enqueue_round("dpo", {})
    store.claim_round("w", 60)
    beat = Heartbeat(store, rid, "w", 60)
    calls: list[int] = []

    def flaky(round_id):
        calls.append(round_id)
        if len(calls) == 1:
            raise StoreError("database is locked")
        return True

    monkeypatch.setattr(store, "cancel_requested", flaky)
    beat.report({"step": 1, "total": 2, "loss": 0.5, "elapsed_s": 1.0})
    with pytest.raises(RoundCancelled):
        beat.report({"step": 2, "total": 2, "loss": 0.4, "elapsed_s": 2.0})
    assert calls == [rid, rid]
