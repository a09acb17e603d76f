"""A training round's log lines in the store (migration 0005), so that the studio and `evorag rounds log` read them
wherever the worker runs: another process, or another machine sharing the PostgreSQL database.

The worker's handler (training/round_log.py) sends the round's INFO+ records in batches; `add_round_logs` numbers
them (`seq` from 1 per round, continuing across its attempts) and keeps every round's log bounded:

- a message longer than MAX_MESSAGE_CHARS keeps its beginning and its end (a traceback's last lines) around a
  marker saying how many characters were left out;
- a round keeps at most MAX_LINES lines: its first HEAD_LINES (the claim, loading) and its newest ones. Lines in
  between are deleted as new ones arrive, which leaves one gap in `seq` (readers show it as "… N lines left out").
"""
from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, func, select

from evorag_core.store.base import StoreBase, utcnow
from evorag_core.store.records import NewLogLine, RoundLogLine
from evorag_core.store.schema import round_logs, rounds

__all__ = ["RoundLogOps", "MAX_LINES", "HEAD_LINES", "MAX_MESSAGE_CHARS", "clip_message"]

MAX_LINES = 2000  # lines kept per round: the first HEAD_LINES and the newest MAX_LINES - HEAD_LINES
HEAD_LINES = 200
MAX_MESSAGE_CHARS = 4000  # per line; longer messages keep their first quarter and their end


def clip_message(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`message` if it fits in `limit` characters, else its beginning and its end (where a traceback says what
    failed) around a line saying how much was left out."""
    if len(message) <= limit:
        return message
    head = limit // 4
    marker = f"\n… {len(message) - limit} characters left out …\n"
    tail = max(limit - head - len(marker), 0)
    return message[:head] + marker + message[len(message) - tail:]


def _where(round_id: int):
    return round_logs.c.round_id == round_id


def _trim(conn: Connection, round_id: int) -> None:
    """Delete the lines between the round's first HEAD_LINES and its newest MAX_LINES - HEAD_LINES."""
    n = conn.scalar(select(func.count()).select_from(round_logs).where(_where(round_id))) or 0
    if n <= MAX_LINES:
        return
    seq = round_logs.c.seq
    head_end = conn.scalar(select(seq).where(_where(round_id)).order_by(seq).offset(HEAD_LINES - 1).limit(1))
    tail_start = conn.scalar(
        select(seq).where(_where(round_id)).order_by(seq.desc()).offset(MAX_LINES - HEAD_LINES - 1).limit(1))
    conn.execute(delete(round_logs).where(_where(round_id), seq > head_end, seq < tail_start))


class RoundLogOps(StoreBase):
    def add_round_logs(self, round_id: int, lines: Sequence[NewLogLine]) -> int:
        """Append `lines` to round `round_id`'s log (numbered after its last line, messages clipped, the log
        trimmed to MAX_LINES); returns the seq of the last line. KeyError for an unknown round. Lines may be added
        whatever the round's status (a worker's last lines arrive after it finished the round)."""
        now = utcnow()
        with self._write() as conn:
            # lock the round: one writer at a time numbers its lines (SQLite's BEGIN IMMEDIATE does it already)
            if conn.scalar(select(rounds.c.id).where(rounds.c.id == round_id).with_for_update()) is None:
                raise KeyError(f"no round {round_id}")
            last = conn.scalar(select(func.max(round_logs.c.seq)).where(_where(round_id))) or 0
            if not lines:
                return int(last)
            conn.execute(round_logs.insert(), [
                {"round_id": round_id, "seq": last + i, "created_at": line.created_at or now,
                 "level": (str(line.level).upper()[:10] or "INFO"), "message": clip_message(str(line.message))}
                for i, line in enumerate(lines, start=1)
            ])
            if last + len(lines) > MAX_LINES:
                _trim(conn, round_id)
            return int(last + len(lines))

    def round_log(self, round_id: int, *, after_seq: int = 0, last: int | None = None) -> list[RoundLogLine]:
        """Round `round_id`'s stored lines with seq > `after_seq`, oldest first; with `last`, only the newest `last`
        of them. An unknown round has no lines."""
        query = select(round_logs).where(_where(round_id), round_logs.c.seq > after_seq)
        if last is not None:
            query = query.order_by(round_logs.c.seq.desc()).limit(max(int(last), 0))
        else:
            query = query.order_by(round_logs.c.seq)
        with self._read() as conn:
            found = [RoundLogLine(**row) for row in conn.execute(query).mappings()]
        return found[::-1] if last is not None else found

    def round_log_last_seq(self, round_id: int) -> int:
        """The seq of round `round_id`'s newest line (0 while it has none): a cheap "anything new?" check."""
        with self._read() as conn:
            return int(conn.scalar(select(func.max(round_logs.c.seq)).where(_where(round_id))) or 0)
