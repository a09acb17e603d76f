"""`Store`: the service layer over the database, and `open_store(url)`, which migrates before returning it."""
from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL

from evorag_core.config import db_url
from evorag_core.store.adapters import AdapterOps
from evorag_core.store.annotations import AnnotationOps
from evorag_core.store.datasets import DatasetOps
from evorag_core.store.engine import DEFAULT_BUSY_TIMEOUT_S, make_engine
from evorag_core.store.episodes import EpisodeOps
from evorag_core.store.judgments import JudgmentOps
from evorag_core.store.migrate import MIGRATIONS_DIR, upgrade
from evorag_core.store.pairs import PairOps
from evorag_core.store.promotions import PromotionOps
from evorag_core.store.round_logs import RoundLogOps
from evorag_core.store.rounds import RoundOps
from evorag_core.store.traces import TraceOps
from evorag_core.store.users import UserOps

__all__ = ["Store", "open_store"]


class Store(DatasetOps, EpisodeOps, TraceOps, JudgmentOps, PairOps, RoundOps, RoundLogOps, AdapterOps,
            UserOps, AnnotationOps, PromotionOps):
    """Plain methods returning typed dataclasses, each in its own short transaction.

    Errors: KeyError for an unknown id or name, ValueError for a bad argument, StoreError for a request the
    current state refuses (e.g. discarding a claimed pair, finishing a round that is not running).
    Build it with `open_store`, which applies the migrations first.
    """


def open_store(
    url: str | URL | None = None,
    *,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    script_location: Path | str = MIGRATIONS_DIR,
) -> Store:
    """Open (creating or upgrading its schema) the database at `url` (default: evorag_core.config.db_url()).

    Raises StoreError if the database cannot be reached or its schema revision is unknown to this code.
    """
    engine = make_engine(url if url is not None else db_url(), busy_timeout_s=busy_timeout_s)
    try:
        upgrade(engine, script_location=script_location)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine)
