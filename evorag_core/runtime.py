"""The shared run-time context of a command or the studio: config, home folder, data set, corpora, retrievers.

Built once per process; corpora, indexes and the embedder are created lazily and cached here.
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from evorag_core.config import Config
from evorag_core.data.corpus import build_corpus, pool_passages
from evorag_core.env.env import RagEnv
from evorag_core.env.scheduler import WeightTable
from evorag_core.env.judges import GoldCoverageJudge, SufficiencyJudge
from evorag_core.types import Corpus, Dataset, Question

__all__ = ["Runtime"]


class Runtime:
    def __init__(self, cfg: Config, home: Path, dataset: Dataset, corpus: Corpus | None = None):
        """`corpus`: a fixed passage collection used instead of the data file's own (in every corpus mode), e.g.
        Bamboogle's questions, which ship no passages, over the passages of the other benchmarks."""
        self.cfg = cfg
        self.home = Path(home)
        self.dataset = dataset
        self.fixed_corpus = corpus

    @cached_property
    def retrieval(self):
        from evorag_core.retrieval import RetrievalService  # heavy imports (faiss, torch) only when retrieval is used

        return RetrievalService(self.cfg.retrieval, self.home)

    @cached_property
    def pooled_corpus(self) -> Corpus:
        """The data file's passages pooled, with those of `env.corpus_from`'s files when it names any."""
        files = self.cfg.env.corpus_files
        if not files:
            return build_corpus(self.dataset, "pooled")
        from evorag_core.data.datasets import load_dataset

        others = [load_dataset(f) for f in files]
        return pool_passages(p for d in (self.dataset, *others) for q in d.questions for p in q.passages)

    def corpus_for(self, question: Question) -> Corpus:
        if self.fixed_corpus is not None:
            return self.fixed_corpus
        if self.cfg.env.corpus == "pooled":
            return self.pooled_corpus
        return build_corpus(self.dataset, self.cfg.env.corpus, question)

    def retriever_for(self, question: Question):
        return self.retrieval.retriever_for(self.corpus_for(question))

    def embed(self, texts) -> np.ndarray:
        return self.retrieval.embedder.encode(list(texts))

    def make_env(self, question: Question, judge: SufficiencyJudge | None = None) -> RagEnv:
        corpus = self.corpus_for(question)
        return RagEnv(
            corpus,
            self.retrieval.retriever_for(corpus),
            self.embed,
            judge or GoldCoverageJudge(),
            self.cfg.env,
            self.cfg.reward,
            WeightTable.from_config(self.cfg.weights),
        )
