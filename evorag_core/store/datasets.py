"""Datasets and their questions (gold answers and passages included, so a run can be reviewed later)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from evorag_core.types import Dataset, Passage, Question
from evorag_core.store.base import StoreBase, utcnow
from evorag_core.store.records import DatasetInfo
from evorag_core.store.schema import datasets, questions

__all__ = ["DatasetOps"]


def _question_row(dataset_id: int, q: Question) -> dict[str, Any]:
    return {
        "dataset_id": dataset_id,
        "qid": q.id,
        "question": q.question,
        "answers": list(q.answers),
        "type": q.type,
        "hops": q.hops,
        "passages": [{"pid": p.pid, "title": p.title, "text": p.text} for p in q.passages],
        "gold_pids": sorted(q.gold_pids),
    }


class DatasetOps(StoreBase):
    def add_dataset(self, dataset: Dataset) -> int:
        """Register `dataset` (by name) and insert the questions not stored yet; returns the dataset id."""
        with self._write() as conn:
            dataset_id = conn.scalar(select(datasets.c.id).where(datasets.c.name == dataset.name))
            if dataset_id is None:
                dataset_id = conn.execute(
                    datasets.insert().values(
                        name=dataset.name, path=dataset.path, n_questions=0, created_at=utcnow()
                    )
                ).inserted_primary_key[0]
            known = set(conn.scalars(select(questions.c.qid).where(questions.c.dataset_id == dataset_id)))
            new = [_question_row(dataset_id, q) for q in dataset.questions if q.id not in known]
            if new:
                conn.execute(questions.insert(), new)
            count = conn.scalar(select(func.count()).where(questions.c.dataset_id == dataset_id))
            conn.execute(datasets.update().where(datasets.c.id == dataset_id).values(n_questions=count))
            return int(dataset_id)

    def list_datasets(self) -> list[DatasetInfo]:
        with self._read() as conn:
            rows = conn.execute(select(datasets).order_by(datasets.c.name)).mappings().all()
        return [DatasetInfo(**row) for row in rows]

    def get_question(self, dataset: str, qid: str) -> Question:
        """The stored question `qid` of the dataset named `dataset`; KeyError if there is none."""
        query = (
            select(questions, datasets.c.name)
            .join(datasets, datasets.c.id == questions.c.dataset_id)
            .where(datasets.c.name == dataset, questions.c.qid == qid)
        )
        with self._read() as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            raise KeyError(f"no question {qid!r} in dataset {dataset!r}")
        return Question(
            id=row["qid"],
            dataset=row["name"],
            question=row["question"],
            answers=tuple(row["answers"]),
            type=row["type"],
            hops=row["hops"],
            passages=tuple(Passage(**p) for p in row["passages"]),
            gold_pids=frozenset(row["gold_pids"]),
        )
