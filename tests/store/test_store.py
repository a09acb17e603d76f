"""The store on real databases: SQLite files in tmp_path, and a throwaway PostgreSQL server when one starts.

Every test taking `url` runs once per backend; the PostgreSQL variants are marked `postgres` and skipped with
the reason when no server can be started (tests/pg_fixture.py).
"""
from __future__ import annotations

import multiprocessing
import queue as queue_module
import shutil
import sqlite3
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import insert, inspect, text
from sqlalchemy.exc import IntegrityError

from evorag_core.errors import StoreError
from evorag_core.store import (
    MIGRATIONS_DIR,
    Finish,
    NewPair,
    Outcome,
    Sibling,
    Step,
    Store,
    TraceFilter,
    current_revisions,
    head_revisions,
    open_store,
)
from evorag_core.store.base import utcnow
from evorag_core.store import engine as engine_module
from evorag_core.store.engine import make_engine, safe_url
from evorag_core.store.migrate import upgrade
from evorag_core.store.schema import metadata, pairs
from evorag_core.types import Dataset, Passage, Question

TABLES = {"datasets", "questions", "episodes", "steps", "siblings", "judgments", "rounds", "round_logs", "pairs",
          "adapters", "users",
          "annotation_items", "annotation_labels", "annotation_leases"}
# Fresh processes (no inherited connections); the fork server imports the store once instead of each child.
PROCS = multiprocessing.get_context("forkserver")
PROCS.set_forkserver_preload(["evorag_core.store", "tests.store.test_store"])


def _run_threads(target: Callable[..., Any], args: list[tuple[Any, ...]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(*a: Any) -> None:
        try:
            target(*a)
        except BaseException as exc:  # collected and reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=a) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return errors


def _run_processes(target: Callable[..., Any], args: list[tuple[Any, ...]], limit_s: float = 300) -> list[Any]:
    """Run `target(*a, barrier, queue)` in spawned processes; returns what each put on the queue."""
    barrier, queue = PROCS.Barrier(len(args)), PROCS.Queue()
    procs = [PROCS.Process(target=target, args=(*a, barrier, queue)) for a in args]
    for p in procs:
        p.start()
    results: list[Any] = []
    deadline = time.monotonic() + limit_s
    while len(results) < len(procs) and time.monotonic() < deadline:
        try:
            results.append(queue.get(timeout=1))
        except queue_module.Empty:
            if not any(p.is_alive() for p in procs):
                break  # a child died without reporting
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert len(results) == len(procs)
    return results


# --- schema and migrations -------------------------------------------------------------------------------------


def test_migration_creates_the_schema_of_the_models(url: str) -> None:
    """A fresh database ends at head 0008 and the hand-written migrations match schema.py exactly."""
    with open_store(url) as s, s.engine.connect() as conn:
        assert head_revisions() == ("0008",)
        assert current_revisions(conn) == ("0008",)
        assert TABLES <= set(inspect(conn).get_table_names())
        assert compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata) == []


def test_sqlite_connection_settings(tmp_path: Path) -> None:
    """WAL, 30 s busy timeout and foreign keys are on for every pooled connection."""
    with open_store(f"sqlite:///{tmp_path / 'a' / 'evorag.db'}") as s, s.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        with pytest.raises(IntegrityError):  # round 999 does not exist
            conn.execute(insert(pairs).values(prompt="p", chosen="a", rejected="b", source="human", status="claimed",
                                              round_id=999, created_at=utcnow(), updated_at=utcnow(), metadata={}))


def test_reopening_is_idempotent(url: str) -> None:
    with open_store(url) as s:
        pair_id = s.add_pair("p", "a", "b")
    for _ in range(2):
        with open_store(url) as s, s.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == ["0008"]
            assert s.get_pair(pair_id).prompt == "p"
            assert s.count_pairs() == {(): 1}


def test_database_with_unknown_newer_revision_is_refused(url: str) -> None:
    with open_store(url) as s, s.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_future'"))
    with pytest.raises(StoreError, match=r"revision 0099_future.*does not know.*newer evorag"):
        open_store(url)


_MIGRATION_0099 = '''
"""Add pairs.note (a test-only revision)."""
import sqlalchemy as sa
from alembic import op

revision = "0099"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        batch.drop_column("note")
'''


def test_older_database_is_upgraded_and_then_refused_by_older_code(url: str, tmp_path: Path) -> None:
    """A DB at head with data is upgraded by code that ships a newer 0099; the older code then refuses it."""
    newer = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, newer, ignore=shutil.ignore_patterns("__pycache__"))
    (newer / "versions" / "0099_pair_note.py").write_text(_MIGRATION_0099)
    with open_store(url) as s:
        pair_id = s.add_pair("kept across the upgrade", "a", "b", source="human", annotator="ann")
    with open_store(url, script_location=newer) as s, s.engine.connect() as conn:
        assert current_revisions(conn) == ("0099",)
        assert "note" in {c["name"] for c in inspect(conn).get_columns("pairs")}
        assert conn.execute(text("SELECT prompt, annotator FROM pairs WHERE id = :i"), {"i": pair_id}).one() == (
            "kept across the upgrade", "ann")
    with pytest.raises(StoreError, match="0099"):
        open_store(url)


_BROKEN_0099 = _MIGRATION_0099.replace(
    'batch.add_column(sa.Column("note", sa.Text(), nullable=True))',
    'batch.add_column(sa.Column("note", sa.Text(), nullable=True))\n'
    '    op.create_table("half_done", sa.Column("id", sa.Integer(), primary_key=True))\n'
    '    op.execute("SELECT * FROM no_such_table")',
)


def test_a_failing_migration_leaves_the_database_as_it_was(url: str, tmp_path: Path) -> None:
    """The upgrade runs in one transaction (transactional DDL on SQLite too): nothing of 0099 remains."""
    broken = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, broken, ignore=shutil.ignore_patterns("__pycache__"))
    (broken / "versions" / "0099_broken.py").write_text(_BROKEN_0099)
    with open_store(url):
        pass
    with pytest.raises(StoreError, match="no_such_table"):
        open_store(url, script_location=broken)
    with open_store(url) as s, s.engine.connect() as conn:
        assert current_revisions(conn) == ("0008",)
        assert "half_done" not in inspect(conn).get_table_names()
        assert "note" not in {c["name"] for c in inspect(conn).get_columns("pairs")}


def test_default_url_is_a_sqlite_file_in_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVORAG_DB_URL", raising=False)
    monkeypatch.setenv("EVORAG_HOME", str(tmp_path / "home"))
    with open_store() as s:
        assert s.dialect == "sqlite"
    assert (tmp_path / "home" / "evorag.db").is_file()


def test_bare_postgresql_url_uses_psycopg() -> None:
    engine = make_engine("postgresql://u:secret@db.example/evorag")
    assert engine.dialect.driver == "psycopg" and "secret" not in safe_url(engine)


def test_upgrade_from_an_existing_empty_database(tmp_path: Path) -> None:
    """An empty SQLite file (revision: none) is brought to head."""
    path = tmp_path / "empty.db"
    path.touch()
    with open_store(f"sqlite:///{path}") as s, s.engine.connect() as conn:
        assert current_revisions(conn) == ("0008",)


def test_a_0001_database_with_a_running_round_gains_the_cancel_request_column(url: str) -> None:
    """0002 adds rounds.cancel_requested_at (NULL for existing rows); the old running round can then be cancelled."""
    engine = make_engine(url)
    try:
        assert upgrade(engine, revision="0001") == ("0001",)
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO rounds (objective, config, status, created_at, attempts, max_attempts) "
                              "VALUES ('dpo', '{}', 'running', '2026-01-01 00:00:00', 1, 1)"))
    finally:
        engine.dispose()
    with open_store(url) as s:
        (old,) = s.list_rounds()
        assert old.cancel_requested_at is None and old.status_label == "running"
        assert s.cancel_round(old.id).status_label == "cancelling"


def test_a_0002_database_with_steps_gains_the_step_actor_columns(url: str) -> None:
    """0004 adds steps.actor (existing steps: 'policy') and steps.annotator (NULL); a human step then round-trips
    with who took it, and an unknown actor is refused before anything is written."""
    engine = make_engine(url)
    try:
        assert upgrade(engine, revision="0002") == ("0002",)
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO episodes (question_id, dataset, question, policy, stage, schedule, config, "
                              "status, created_at) VALUES ('q1', 'demo', '?', 'oracle', 'discovery', 'time-dynamic', "
                              "'{}', 'running', '2026-01-01 00:00:00')"))
            conn.execute(text("INSERT INTO steps (episode_id, t, action, argument, passages, signals, weights, reward) "
                              "VALUES (1, 1, 'SEARCH', 'x', '[]', '{}', '{}', 0.5)"))
    finally:
        engine.dispose()
    with open_store(url) as s:
        (old,) = s.get_episode(1).steps
        assert (old.actor, old.annotator) == ("policy", None)
        human = Step(2, "SEARCH", "Sable River", (), {"ret": 1.0}, {"beta": 2.0}, 1.98, actor="human", annotator="ann")
        s.add_step(1, human)
        assert s.get_episode(1).steps[1] == human
        with pytest.raises(ValueError, match="step actor"):
            s.add_step(1, Step(3, "REFUSE", actor="robot"))
        assert len(s.get_episode(1).steps) == 2

def test_a_0007_database_gains_adapter_roles_from_its_rounds_sources(url: str) -> None:
    """0008 adds adapters.role: an adapter of a round on answer pairs (config source "answer") becomes a reader, every
    other one (a round on all pairs, one without a round) stays a policy adapter; an unknown role is refused."""
    engine = make_engine(url)
    try:
        assert upgrade(engine, revision="0007") == ("0007",)
        with engine.begin() as conn:
            for config in ('{"objective": "dpo", "source": "answer"}', '{"objective": "dpo"}'):
                conn.execute(text("INSERT INTO rounds (objective, config, status, created_at, attempts, max_attempts) "
                                  "VALUES ('dpo', :c, 'succeeded', '2026-01-01 00:00:00', 1, 1)"), {"c": config})
            for name, round_id in (("reads", 1), ("decides", 2), ("imported", None)):
                conn.execute(text("INSERT INTO adapters (name, path, base_model, round_id, metrics, active, created_at) "
                                  "VALUES (:n, '/a', 'm', :r, '{}', false, '2026-01-01 00:00:00')"),
                             {"n": name, "r": round_id})
    finally:
        engine.dispose()
    with open_store(url) as s:
        assert {a.name: a.role for a in s.list_adapters()} == {"reads": "reader", "decides": "policy",
                                                                "imported": "policy"}
        assert s.register_adapter("new", "/b", base_model="m", role="reader").role == "reader"
        with pytest.raises(ValueError, match="role"):
            s.register_adapter("odd", "/c", base_model="m", role="judge")
        assert [a.name for a in s.list_adapters()] == ["reads", "decides", "imported", "new"]


# --- concurrent writers ---------------------------------------------------------------------------------------

WRITERS, PER_WRITER = 8, 200  # half one pair per transaction, half in batches of 100


def _write_pairs(s: Store, writer: int) -> None:
    """Half one pair per transaction, half in batches of 100."""
    half = PER_WRITER // 2
    for i in range(half):
        s.add_pair(f"state {writer}/{i}", "good", "bad", source="human", annotator=f"w{writer}",
                   metadata={"writer": writer, "i": i})
    for start in range(half, PER_WRITER, 100):
        s.add_pairs([NewPair(f"state {writer}/{i}", "good", "bad", metadata={"writer": writer, "i": i})
                     for i in range(start, start + 100)])


def _process_writer(url: str, writer: int, barrier: Any, queue: Any) -> None:
    try:
        with open_store(url) as s:
            barrier.wait(timeout=120)
            _write_pairs(s, writer)
        queue.put(("ok", writer))
    except BaseException as exc:  # reported to the parent, which fails the test
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def _assert_all_pairs_written(s: Store) -> None:
    got = sorted((p.metadata["writer"], p.metadata["i"]) for p in s.list_pairs(limit=None))
    assert got == [(w, i) for w in range(WRITERS) for i in range(PER_WRITER)]
    assert s.count_pairs("status") == {"queued": WRITERS * PER_WRITER}
    assert s.count_pairs("source") == {"human": WRITERS * PER_WRITER // 2, "rollout": WRITERS * PER_WRITER // 2}


@pytest.mark.slow
def test_eight_writer_threads_lose_nothing(store: Store) -> None:
    """8 threads x 200 pairs on one Store -> exactly the 1,600 pairs, no exception."""
    assert _run_threads(_write_pairs, [(store, w) for w in range(WRITERS)]) == []
    _assert_all_pairs_written(store)


@pytest.mark.slow
def test_eight_writer_processes_lose_nothing(url: str) -> None:
    """8 processes, each opening (and migrating) the store itself, x 200 pairs -> exactly 1,600 pairs."""
    with open_store(url):
        pass
    results = _run_processes(_process_writer, [(url, w) for w in range(WRITERS)])
    assert sorted(results) == [("ok", w) for w in range(WRITERS)]
    with open_store(url) as s:
        _assert_all_pairs_written(s)


def test_opening_waits_for_another_connection_holding_a_fresh_database(tmp_path: Path, monkeypatch) -> None:
    """Another connection holds a write lock on a fresh database (as a second process migrating it does) when the store
    opens: switching the file to WAL waits for the lock instead of failing at once with "database is locked" (rollout
    workers started together on a fresh --db failed so). The lock is released once the opener is seen waiting."""
    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE other (a)")
    waiting = threading.Event()
    clock = SimpleNamespace(monotonic=time.monotonic, sleep=lambda s: (waiting.set(), time.sleep(s)))
    monkeypatch.setattr(engine_module, "time", clock)  # the engine's retry loop, seen from here
    outcome: list[Any] = []

    def opener() -> None:
        try:
            with open_store(f"sqlite:///{path}") as s, s.engine.connect() as conn:
                outcome.append((current_revisions(conn), conn.exec_driver_sql("PRAGMA journal_mode").scalar()))
        except BaseException as exc:  # reported below
            outcome.append(exc)

    thread = threading.Thread(target=opener)
    thread.start()
    while not waiting.is_set() and thread.is_alive():
        waiting.wait(0.05)
    holder.execute("COMMIT")
    holder.close()
    thread.join(timeout=120)
    assert outcome == [(head_revisions(), "wal")]


# --- claim / release under competing workers --------------------------------------------------------------------

N_QUEUE, BATCH = 600, 7


def _drain(s: Store, round_id: int) -> list[int]:
    """Claim small batches until the queue is empty; every third batch is released, the others consumed.
    Returns the ids this worker consumed."""
    consumed: list[int] = []
    for k in range(10_000):
        batch = s.claim_pairs(round_id, BATCH)
        if not batch:
            return consumed
        assert all(p.status == "claimed" and p.round_id == round_id for p in batch)
        if k % 3 == 2:
            assert s.release_pairs(round_id) == len(batch)
        else:
            assert s.consume_pairs(round_id) == len(batch)
            consumed.extend(p.id for p in batch)
        time.sleep(0.002)  # "work" outside any transaction, so that SQLite's write lock changes hands
    raise AssertionError("the queue never emptied")


def _process_drainer(url: str, round_id: int, barrier: Any, queue: Any) -> None:
    try:
        with open_store(url) as s:
            barrier.wait(timeout=120)
            queue.put(("ok", round_id, _drain(s, round_id)))
    except BaseException as exc:  # reported to the parent, which fails the test
        queue.put(("error", round_id, f"{type(exc).__name__}: {exc}"))


def _seed_queue(s: Store) -> tuple[list[int], list[int]]:
    ids = s.add_pairs([NewPair(f"state {i}", "good", "bad") for i in range(N_QUEUE)])
    return ids, [s.enqueue_round("dpo", {"worker": k}) for k in range(2)]


def _assert_disjoint_and_complete(s: Store, ids: list[int], consumed: dict[int, list[int]]) -> None:
    a, b = consumed.values()
    assert a and b, "one worker drained the whole queue: the workers did not compete"
    assert len(a) == len(set(a)) and len(b) == len(set(b))
    assert not set(a) & set(b), "a pair was handed to both workers"
    assert sorted(a + b) == sorted(ids)
    assert s.count_pairs("status") == {"consumed": N_QUEUE}
    for round_id, mine in consumed.items():
        assert sorted(p.id for p in s.list_pairs(round_id=round_id, limit=None)) == sorted(mine)


def test_two_worker_threads_never_share_a_pair(store: Store) -> None:
    ids, round_ids = _seed_queue(store)
    consumed: dict[int, list[int]] = {}
    errors = _run_threads(lambda r: consumed.__setitem__(r, _drain(store, r)), [(r,) for r in round_ids])
    assert errors == []
    _assert_disjoint_and_complete(store, ids, consumed)


@pytest.mark.slow
def test_two_worker_processes_never_share_a_pair(url: str) -> None:
    with open_store(url) as s:
        ids, round_ids = _seed_queue(s)
        results = _run_processes(_process_drainer, [(url, r) for r in round_ids])
        assert [r[0] for r in results] == ["ok", "ok"], results
        _assert_disjoint_and_complete(s, ids, {r[1]: r[2] for r in results})


# --- rounds and leases ----------------------------------------------------------------------------------------


def test_round_lifecycle_and_progress(store: Store) -> None:
    round_id = store.enqueue_round("grpo", {"lr": 5e-6})
    assert store.claim_round("w1", lease_s=30, objective="dpo") is None
    r = store.claim_round("w1", lease_s=30)
    assert (r.id, r.status, r.lease_owner, r.attempts) == (round_id, "running", "w1", 1)
    assert store.claim_round("w2", lease_s=30) is None
    assert store.heartbeat(round_id, "w1", {"step": 3, "total": 10, "loss": 0.7, "eta": 12.5})
    assert not store.heartbeat(round_id, "w2", {"step": 1})
    assert store.get_round(round_id).progress == {"step": 3, "total": 10, "loss": 0.7, "eta": 12.5}
    store.add_pairs([NewPair("s", "a", "b")] * 4)
    assert len(store.claim_pairs(round_id, 3)) == 3
    with pytest.raises(StoreError, match="leased to 'w1'"):
        store.finish_round(round_id, metrics={"loss": 0.5}, worker_id="w2")
    done = store.finish_round(round_id, metrics={"loss": 0.5}, worker_id="w1")
    assert (done.status, done.metrics, done.error) == ("succeeded", {"loss": 0.5}, None)
    assert store.count_pairs("status") == {"consumed": 3, "queued": 1}
    assert not store.heartbeat(round_id, "w1")
    with pytest.raises(StoreError, match="succeeded, not running"):
        store.finish_round(round_id, error="late")
    with pytest.raises(StoreError, match="only a queued or running round can claim"):
        store.claim_pairs(round_id, 1)


def test_competing_workers_claim_each_round_once(store: Store) -> None:
    """4 threads claim from 30 queued rounds until none is left: 30 distinct claims in all."""
    round_ids = [store.enqueue_round("dpo", {"k": k}) for k in range(30)]
    claimed: list[tuple[str, int]] = []

    def work(worker: str) -> None:
        while (r := store.claim_round(worker, lease_s=60)) is not None:
            assert r.lease_owner == worker and r.attempts == 1
            claimed.append((worker, r.id))
            time.sleep(0.002)

    assert _run_threads(work, [(f"w{k}",) for k in range(4)]) == []
    assert sorted(r for _, r in claimed) == round_ids
    assert {r.id: r.lease_owner for r in store.list_rounds(status="running")} == {r: w for w, r in claimed}


def test_unreachable_server_is_a_store_error() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StoreError, match="cannot open or migrate the database"):
        open_store("postgresql://nobody@127.0.0.1:1/evorag")


def test_failed_and_cancelled_rounds_release_their_pairs(store: Store) -> None:
    """A running round asked to cancel keeps its pairs claimed ("cancelling") until its worker confirms the
    cancel between two steps; then they are queued again. A queued round is cancelled at once and never claimed."""
    store.add_pairs([NewPair("s", "a", "b")] * 5)
    failing, cancelled, never = store.enqueue_round("dpo"), store.enqueue_round("dpo"), store.enqueue_round("dpo")
    store.claim_round("w", lease_s=30)
    store.claim_round("w2", lease_s=30)
    store.claim_pairs(failing, 2)
    store.claim_pairs(cancelled, 2)
    assert store.finish_round(failing, error="CUDA out of memory").status == "failed"
    assert not store.cancel_requested(cancelled)
    asked = store.cancel_round(cancelled)
    assert (asked.status, asked.status_label) == ("running", "cancelling") and store.cancel_requested(cancelled)
    assert store.count_pairs("status") == {"queued": 3, "claimed": 2}
    assert store.cancel_round(cancelled).cancel_requested_at == asked.cancel_requested_at  # asking twice: no change
    with pytest.raises(StoreError, match="leased to 'w2'"):
        store.confirm_cancel(cancelled, worker_id="w")
    assert store.confirm_cancel(cancelled, worker_id="w2").status == "cancelled"
    assert store.count_pairs("status") == {"queued": 5}
    assert store.cancel_round(never).status == "cancelled"
    assert store.claim_round("w3", lease_s=30) is None
    assert [r.status for r in store.list_rounds()] == ["cancelled", "cancelled", "failed"]
    for done in (failing, cancelled, never):
        with pytest.raises(StoreError, match="only a queued or running round"):
            store.cancel_round(done)
    with pytest.raises(StoreError, match="not a running round asked to cancel"):
        store.confirm_cancel(never)


def test_a_cancel_requested_round_whose_worker_died_is_reaped_as_cancelled(store: Store) -> None:
    """max_attempts 3 would retry a dead worker's round; one asked to cancel is cancelled instead, pairs released."""
    store.add_pairs([NewPair("s", "a", "b")] * 3)
    rid = store.enqueue_round("dpo", max_attempts=3)
    store.claim_round("w", lease_s=1)
    store.claim_pairs(rid, 3)
    store.cancel_round(rid)
    report = store.expire_leases(now=utcnow() + timedelta(seconds=10))
    assert (report.cancelled, report.requeued, report.failed, report.released_pairs) == ((rid,), (), (), 3)
    assert store.get_round(rid).status == "cancelled" and store.count_pairs("status") == {"queued": 3}


def test_lease_expiry_releases_pairs_and_none_is_consumed_twice(store: Store) -> None:
    """Worker w1 claims 10 of 25 pairs and goes silent; after the reaper, w2 drains all 25; w1's late calls
    change nothing. Each pair ends consumed exactly once, by round 2."""
    ids = store.add_pairs([NewPair(f"s{i}", "a", "b") for i in range(25)])
    first, second = store.enqueue_round("dpo"), store.enqueue_round("dpo")
    t0 = utcnow()
    assert store.claim_round("w1", lease_s=30, now=t0).id == first
    assert len(store.claim_pairs(first, 10)) == 10
    assert store.expire_leases(now=t0 + timedelta(seconds=29)).failed == ()  # not yet expired
    report = store.expire_leases(now=t0 + timedelta(seconds=31))
    assert (report.failed, report.requeued, report.released_pairs) == ((first,), (), 10)
    failed = store.get_round(first)
    assert failed.status == "failed" and "lease of worker 'w1' expired" in failed.error
    assert store.claim_round("w2", lease_s=30).id == second
    assert len(store.claim_pairs(second, 100)) == 25
    assert not store.heartbeat(first, "w1")
    assert store.consume_pairs(first) == 0
    with pytest.raises(StoreError, match="failed, not running"):
        store.finish_round(first, metrics={}, worker_id="w1")
    store.finish_round(second, metrics={"pairs": 25}, worker_id="w2")
    consumed = store.list_pairs(status="consumed", limit=None)
    assert sorted(p.id for p in consumed) == sorted(ids)
    assert {p.round_id for p in consumed} == {second}


def test_expired_round_is_retried_while_attempts_remain(store: Store) -> None:
    round_id = store.enqueue_round("ppo", max_attempts=2)
    t0 = utcnow()
    store.claim_round("w1", lease_s=10, now=t0)
    assert store.heartbeat(round_id, "w1", now=t0 + timedelta(seconds=8))  # lease now ends at t0 + 18 s
    assert store.expire_leases(now=t0 + timedelta(seconds=15)).requeued == ()
    assert store.expire_leases(now=t0 + timedelta(seconds=20)).requeued == (round_id,)
    again = store.claim_round("w2", lease_s=10, now=t0 + timedelta(seconds=21))
    assert (again.id, again.attempts, again.lease_owner) == (round_id, 2, "w2")
    assert store.expire_leases(now=t0 + timedelta(seconds=60)).failed == (round_id,)



def test_a_dead_workers_rounds_are_reaped_at_once_by_owner_prefix(store: Store) -> None:
    """Worker "vm:41:ab" (host vm, pid 41) holds round 1 with 6 pairs claimed (lease 600 s), "vm:411:cd" holds round
    2. The studio saw pid 41 exit with -9: reap_worker("vm:41:") queues round 1 again (attempt 1 of 2) with its 6
    pairs released and a note naming the exit, long before its lease; round 2 (pid 411, same prefix digits) and
    a "%"-prefix (a LIKE wildcard, escaped) touch nothing."""
    store.add_pairs([NewPair(f"s{i}", "a", "b") for i in range(6)])
    first, second = store.enqueue_round("dpo", max_attempts=2), store.enqueue_round("dpo")
    store.claim_round("vm:41:ab", lease_s=600)
    assert len(store.claim_pairs(first, 6)) == 6
    store.claim_round("vm:411:cd", lease_s=600)
    assert store.reap_worker("%", "exited").requeued == ()
    report = store.reap_worker("vm:41:", "exited with code -9")
    assert (report.requeued, report.failed, report.released_pairs) == ((first,), (), 6)
    again = store.get_round(first)
    assert again.status == "queued" and again.error == "attempt 1: worker 'vm:41:ab' exited with code -9"
    assert store.count_pairs("status") == {"queued": 6} and store.get_round(second).status == "running"
    with pytest.raises(ValueError):
        store.reap_worker("", "exited")

# --- adapters, users, pairs, episodes, datasets ------------------------------------------------------------------


def test_exactly_one_active_adapter(store: Store) -> None:
    for k in range(4):
        store.register_adapter(f"a{k}", f"/adapters/a{k}", base_model="smollm2-135m", objective="dpo")
    assert store.active_adapter() is None
    store.mark_adapter_active("a1")
    assert not store.register_adapter("a9", "/adapters/a9", base_model="smollm2-135m").active  # registered inactive
    assert store.mark_adapter_active("a9").active
    assert [a.name for a in store.list_adapters() if a.active] == ["a9"]
    errors = _run_threads(lambda name: [store.mark_adapter_active(name) for _ in range(20)],
                          [(f"a{k}",) for k in range(4)])
    assert errors == []
    assert len([a for a in store.list_adapters() if a.active]) == 1
    with pytest.raises(KeyError):
        store.mark_adapter_active("missing")
    with pytest.raises(StoreError, match="'a1'"):
        store.register_adapter("a1", "/elsewhere", base_model="x")
    assert store.deactivate_adapters() == 1
    assert store.active_adapter() is None


def test_users_verify_with_argon2_hashes(store: Store) -> None:
    user = store.add_user("ada", "correct horse", role="admin")
    assert store.verify_user("ada", "correct horse") == user
    assert store.verify_user("ada", "wrong") is None
    assert store.verify_user("nobody", "correct horse") is None
    with store.engine.connect() as conn:
        stored = conn.execute(text("SELECT password_hash FROM users")).scalar_one()
    assert stored.startswith("$argon2id$") and "correct horse" not in stored
    with pytest.raises(StoreError, match="already exists"):
        store.add_user("ada", "x")
    with pytest.raises(ValueError, match="role"):
        store.add_user("bob", "x", role="root")


def test_pair_listing_counting_editing_and_discarding(store: Store) -> None:
    h1 = store.add_pair("s1", "a", "b", source="human", annotator="ann", margin=1.0, stage="discovery")
    h2 = store.add_pair("s2", "a", "b", source="human", annotator="bob", stage="refinement")
    r1, r2 = store.add_pairs([NewPair("s3", "a", "b", margin=0.4, stage="discovery", metadata={"episode": 7}),
                              NewPair("s4", "a", "b", stage="discovery")])
    assert [p.id for p in store.list_pairs(source="human")] == [h1, h2]
    assert [p.id for p in store.list_pairs(stage="discovery", source="rollout")] == [r1, r2]
    assert [p.id for p in store.list_pairs(annotator="bob")] == [h2]
    assert store.get_pair(r1).metadata == {"episode": 7}
    assert store.count_pairs("source") == {"human": 2, "rollout": 2}
    assert store.count_pairs(("source", "stage")) == {
        ("human", "discovery"): 1, ("human", "refinement"): 1, ("rollout", "discovery"): 2}
    assert store.count_pairs("annotator", source="human") == {"ann": 1, "bob": 1}
    edited = store.update_pair(h1, chosen="better", margin=None)
    assert (edited.chosen, edited.margin, edited.rejected) == ("better", None, "b")
    assert store.discard_pair(h2).status == "discarded"
    assert store.count_pairs("status") == {"queued": 3, "discarded": 1}
    round_id = store.enqueue_round("dpo")
    assert [p.id for p in store.claim_pairs(round_id, 10, stage="discovery", source="rollout")] == [r1, r2]
    assert store.last_pair_id() == r2
    later = store.add_pairs([NewPair(f"s{i}", "a", "b", stage="discovery") for i in range(5, 8)])
    assert store.last_pair_id() == later[-1]
    # `after`: only the pairs stored after that id (a curriculum round's own rollout), oldest first, h1 left queued
    assert [p.id for p in store.claim_pairs(store.enqueue_round("dpo"), 2, after=r2)] == later[:2]
    with pytest.raises(StoreError, match="is claimed"):
        store.discard_pair(r1)
    assert store.restore_pair(h2).status == "queued"
    assert len(store.list_pairs(limit=None)) == 7  # nothing is ever deleted
    with pytest.raises(ValueError, match="source"):
        store.add_pair("s", "a", "b", source="crowd")
    with pytest.raises(KeyError):
        store.get_pair(10_000)


def test_episode_round_trip_and_overrides(store: Store) -> None:
    """Two steps stored with siblings come back in t order; the latest human override wins over the judge."""
    steps = [
        Step(1, "SEARCH", "who founded x", ("p1", "p2"), {"ret": 1.0, "step": -1.0}, {"beta": 2.0, "eta": 0.02},
             1.98, None, (Sibling("SEARCH", "x founder", -2.5, 0.4), Sibling("REFUSE", None, -4.0, -0.5))),
        Step(2, "REFUSE", None, (), {"ref": -1.0, "step": -1.0}, {"rho": 0.5, "eta": 0.02}, -0.52, "sufficient"),
    ]
    episode_id = store.add_episode(question_id="q7", dataset="hotpotqa", question="Who founded X?", policy="base",
                                   stage="discovery", schedule="time-dynamic", config={"t_max": 20},
                                   steps=steps, total_return=1.46)
    episode = store.get_episode(episode_id)
    assert episode.steps == tuple(steps)
    assert (episode.total_return, episode.status, episode.config) == (1.46, "finished", {"t_max": 20})
    assert store.effective_verdict(episode_id, 2) == "sufficient"
    store.record_judgment(episode_id, 2, judge="llm", verdict="insufficient")
    assert store.effective_verdict(episode_id, 2) == "insufficient"
    store.set_override(episode_id, 2, "sufficient", who="ann")
    store.record_judgment(episode_id, 2, judge="llm", verdict="insufficient")  # a later judge does not win
    assert store.effective_verdict(episode_id, 2) == "sufficient"
    store.set_override(episode_id, 2, "insufficient", who="bob")
    assert store.effective_verdict(episode_id, 2) == "insufficient"
    assert [(j.judge, j.is_override, j.who) for j in store.judgments(episode_id, 2)][-1] == ("human", True, "bob")
    with pytest.raises(StoreError, match="q9"):  # two steps with t=1: the whole episode is rolled back
        store.add_episode(question_id="q9", dataset="hotpotqa", question="?", policy="base", stage="discovery",
                          schedule="time-dynamic", steps=[steps[0], steps[0]])
    assert store.list_episodes(question_id="q9") == []
    running = store.add_episode(question_id="q8", dataset="hotpotqa", question="?", policy="dpo-r1",
                                stage="refinement", schedule="two-stage", status="running")
    store.add_step(running, steps[0])
    with pytest.raises(StoreError, match="t=1"):
        store.add_step(running, steps[0])
    store.finish_episode(running, total_return=1.98)
    assert [e.id for e in store.list_episodes(dataset="hotpotqa")] == [running, episode_id]
    assert store.list_episodes(policy="dpo-r1")[0].steps is None
    assert store.get_episode(running).steps == (steps[0],)


def test_a_last_step_with_its_judgment_and_the_finish_is_one_write(store: Store) -> None:
    """add_step(judge=, finish=): the row, the judge's verdict on it and the episode's end together (what the live
    episode writes per step); a refused row (t taken) leaves the judgment and the finish unwritten."""
    running = store.add_episode(question_id="q1", dataset="d", question="?", policy="oracle", stage="discovery",
                                schedule="time-dynamic", status="running")
    store.add_step(running, Step(1, "SEARCH", "q", reward=0.5))
    last = Step(2, "REFUSE", signals={"ref": 1.0}, reward=0.3, judge_verdict="unanswerable")
    with pytest.raises(StoreError, match="t=1"):
        store.add_step(running, Step(1, "REFUSE", judge_verdict="unanswerable"), judge="gold", finish=Finish(0.8))
    assert store.judgments(running) == [] and store.get_episode(running).status == "running"
    store.add_step(running, last, judge="gold", finish=Finish(0.8, "finished", Outcome(None, 0.0, 0.0, True)))
    ep = store.get_episode(running)
    assert (ep.n_steps, ep.status, ep.total_return, ep.refused, ep.em) == (2, "finished", 0.8, True, 0.0)
    assert ep.finished_at is not None and ep.steps[-1] == last
    assert [(j.t, j.judge, j.verdict, j.is_override) for j in store.judgments(running)] == [
        (2, "gold", "unanswerable", False)]


def test_an_override_with_rescored_signals_updates_step_and_return_in_one_write(store: Store) -> None:
    """set_override_rescored: the human judgment, step t's new signals and reward, and the ended episode's return
    (the sum of its steps' rewards) together; a step that is not there changes nothing."""
    steps = [Step(1, "SEARCH", "q", signals={"ret": 1.0}, weights={"beta": 0.5}, reward=0.5),
             Step(2, "REFUSE", signals={"ref": -1.0}, weights={"rho": 0.3}, reward=-0.3, judge_verdict="answerable")]
    ep = store.add_episode(question_id="q1", dataset="d", question="?", policy="base", stage="discovery",
                           schedule="time-dynamic", steps=steps)
    store.finish_episode(ep, total_return=0.2)
    store.set_override_rescored(ep, 2, "unanswerable", "ann", signals={"ref": 1.0}, reward=0.3)
    stored = store.get_episode(ep)
    assert stored.steps[1].signals == {"ref": 1.0} and stored.steps[1].reward == 0.3
    assert stored.total_return == pytest.approx(0.8) and store.effective_verdict(ep, 2) == "unanswerable"
    with pytest.raises(KeyError, match="no step t=5"):
        store.set_override_rescored(ep, 5, "unanswerable", "ann", signals={}, reward=0.0)
    assert len(store.judgments(ep, 5)) == 0 and store.get_episode(ep).total_return == pytest.approx(0.8)
    running = store.add_episode(question_id="q2", dataset="d", question="?", policy="base", stage="discovery",
                                schedule="time-dynamic", steps=steps, status="running")
    store.set_override_rescored(running, 2, "unanswerable", "ann", signals={"ref": 1.0}, reward=0.3)
    assert store.get_episode(running).total_return is None  # a running episode's return comes at its end


def test_datasets_and_questions(store: Store) -> None:
    q1 = Question("a1", "tiny", "Who?", ("Ada",), "bridge", 2, (Passage("p1", "T", "text"),), frozenset({"p1"}))
    q2 = Question("a2", "tiny", "When?", ("1900", "1901"))
    first = store.add_dataset(Dataset("tiny", "/data/tiny.jsonl", (q1,)))
    assert store.add_dataset(Dataset("tiny", "/data/tiny.jsonl", (q1, q2))) == first
    assert [(d.name, d.n_questions) for d in store.list_datasets()] == [("tiny", 2)]
    assert store.get_question("tiny", "a1") == q1
    assert store.get_question("tiny", "a2") == q2


def test_a_0002_database_gains_the_trace_columns_backfilled(url: str) -> None:
    """0003: episodes stored before it get n_steps from their steps and a source from their config (a rollout's
    config holds its settings); the studio's adapter and data file are read from its config; no outcome."""
    engine = make_engine(url)
    try:
        assert upgrade(engine, revision="0002") == ("0002",)
        with engine.begin() as conn:
            for config in ('{"rollout": {"siblings": 4}}', '{"adapter": "dpo-1", "data": "/d/demo.jsonl"}'):
                conn.execute(text("INSERT INTO episodes (question_id, dataset, question, policy, stage, schedule, "
                                  "config, status, created_at) VALUES ('q', 'demo', 'Q?', 'p', 'discovery', 'x', "
                                  ":c, 'finished', '2026-01-01 00:00:00')"), {"c": config})
            conn.execute(text("INSERT INTO steps (episode_id, t, action, passages, signals, weights, reward) "
                              "VALUES (1, 1, 'SEARCH', '[]', '{}', '{}', 0.5), (1, 2, 'ANSWER', '[]', '{}', '{}', 1)"))
    finally:
        engine.dispose()
    with open_store(url) as s:
        rows = {r.id: r for r in s.search_traces().rows}
        assert (rows[1].source, rows[1].n_steps, rows[1].adapter) == ("rollout", 2, None)
        assert (rows[2].source, rows[2].n_steps, rows[2].adapter, rows[2].data_path) == (
            "studio", 0, "dpo-1", "/d/demo.jsonl")
        assert rows[1].em is None and s.search_traces(TraceFilter(source="studio")).total == 1
