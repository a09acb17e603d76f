"""A round's log lines in the store (migration 0005, evorag_core/store/round_logs.py) on real SQLite and, when a
server starts, PostgreSQL: numbering across batches and attempts, incremental and tail reads, clipped messages, the
per-round bound (first lines and newest lines kept, one gap), and an 0004 database upgraded with its rounds kept."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import inspect, text

from evorag_core.store import NewLogLine, current_revisions, open_store
from evorag_core.store.base import utcnow
from evorag_core.store.engine import make_engine
from evorag_core.store.migrate import upgrade
from evorag_core.store.round_logs import HEAD_LINES, MAX_LINES, MAX_MESSAGE_CHARS, clip_message


def test_lines_are_numbered_per_round_and_read_incrementally(store) -> None:
    """Two rounds' lines interleave; each round numbers its own from 1, batch after batch; `after_seq` reads only
    what is new, `last` the newest lines (oldest first), and the timestamps and levels come back as written."""
    a, b = store.enqueue_round("dpo"), store.enqueue_round("grpo")
    at = datetime(2026, 11, 26, 23, 0, 1, tzinfo=timezone.utc)
    assert store.round_log_last_seq(a) == 0 and store.round_log(a) == []
    assert store.add_round_logs(a, [NewLogLine("INFO", "round 1 claimed", at), NewLogLine("info", "phase load")]) == 2
    assert store.add_round_logs(b, [NewLogLine("WARNING", "b's only line")]) == 1
    assert store.add_round_logs(a, [NewLogLine("ERROR", "round 1 failed:\nTraceback ...\nValueError: x")]) == 3
    assert store.add_round_logs(a, []) == 3
    lines = store.round_log(a)
    assert [(x.round_id, x.seq, x.level) for x in lines] == [(a, 1, "INFO"), (a, 2, "INFO"), (a, 3, "ERROR")]
    assert lines[0].created_at == at and lines[0].message == "round 1 claimed"
    assert lines[2].message.endswith("ValueError: x")
    assert [x.seq for x in store.round_log(a, after_seq=1)] == [2, 3]
    assert [x.seq for x in store.round_log(a, last=2)] == [2, 3]
    assert store.round_log(a, after_seq=3) == [] and store.round_log_last_seq(a) == 3
    assert [(x.seq, x.message) for x in store.round_log(b)] == [(1, "b's only line")]
    assert store.round_log(999) == []
    with pytest.raises(KeyError, match="no round 999"):
        store.add_round_logs(999, [NewLogLine("INFO", "nobody's")])


def test_long_messages_keep_their_beginning_and_their_end() -> None:
    """A traceback longer than the limit keeps its first lines and its last ones (what failed)."""
    tb = "Traceback (most recent call last):\n" + "".join(f'  File "x.py", line {i}\n' for i in range(2000)) + \
        "RuntimeError: the real reason"
    clipped = clip_message(tb)
    assert len(clipped) <= MAX_MESSAGE_CHARS and clipped.startswith("Traceback")
    assert clipped.endswith("RuntimeError: the real reason") and "characters left out" in clipped
    assert clip_message("short") == "short"


def test_a_round_keeps_its_first_lines_and_its_newest(store) -> None:
    """MAX_LINES + 500 lines in batches: the first HEAD_LINES and the newest MAX_LINES - HEAD_LINES stay, numbered as
    written, so the lines left out show as one gap in seq; a stored message is clipped to MAX_MESSAGE_CHARS."""
    rid = store.enqueue_round("dpo")
    total = MAX_LINES + 500
    for start in range(1, total + 1, 250):
        store.add_round_logs(rid, [NewLogLine("INFO", f"line {i}") for i in range(start, min(start + 250, total + 1))])
    store.add_round_logs(rid, [NewLogLine("ERROR", "x" * (MAX_MESSAGE_CHARS * 3))])
    seqs = [x.seq for x in store.round_log(rid)]
    assert len(seqs) == MAX_LINES and store.round_log_last_seq(rid) == total + 1
    assert seqs[:HEAD_LINES] == list(range(1, HEAD_LINES + 1))
    assert seqs[HEAD_LINES:] == list(range(total + 1 - (MAX_LINES - HEAD_LINES) + 1, total + 2))
    last = store.round_log(rid, last=1)[0]
    assert len(last.message) <= MAX_MESSAGE_CHARS and last.level == "ERROR"
    assert store.round_log(rid, last=1)[0].seq == total + 1


def test_a_retried_round_continues_its_log(store) -> None:
    """Attempt 2 of a reaped round appends after attempt 1's lines (one log per round, not per attempt)."""
    rid = store.enqueue_round("dpo", max_attempts=2)
    store.claim_round("w1", 60)
    store.add_round_logs(rid, [NewLogLine("INFO", "attempt 1 claimed")])
    assert store.expire_leases(now=utcnow() + timedelta(seconds=120)).requeued == (rid,)
    store.claim_round("w2", 60)
    store.add_round_logs(rid, [NewLogLine("INFO", "attempt 2 claimed")])
    assert [(x.seq, x.message) for x in store.round_log(rid)] == [(1, "attempt 1 claimed"), (2, "attempt 2 claimed")]


def test_a_0004_database_gains_the_round_logs_table(url: str) -> None:
    """0005 adds round_logs to a database at 0004 whose rounds are kept (with no lines); lines can then be added."""
    engine = make_engine(url)
    try:
        assert upgrade(engine, revision="0004") == ("0004",)
        with engine.begin() as conn:
            assert "round_logs" not in inspect(conn).get_table_names()
            conn.execute(text("INSERT INTO rounds (objective, config, status, created_at, attempts, max_attempts) "
                              "VALUES ('dpo', '{}', 'succeeded', '2026-01-01 00:00:00', 1, 1)"))
    finally:
        engine.dispose()
    with open_store(url) as s, s.engine.connect() as conn:
        assert current_revisions(conn) == ("0008",)
        (old,) = s.list_rounds()
        assert s.round_log(old.id) == []
        assert s.add_round_logs(old.id, [NewLogLine("INFO", "added after the upgrade")]) == 1
        assert s.round_log(old.id)[0].message == "added after the upgrade"
