"""The shared run-time context of a command or the studio: config, home folder, data set, corpora, retrievers.

Built once per process; corpora, indexes and the embedder are created lazily and cached here.
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np

from .config import Config
from .corpus import build_corpus
from .env import RagEnv
from .judge import GoldCoverageJudge, SufficiencyJudge
from .types import Corpus, Dataset, Question

__all__ = ["Runtime"]


class Runtime:
    def __init__(self, cfg: Config, home: Path, dataset: Dataset):
        self.cfg = cfg
        self.home = Path(home)
        self.dataset = dataset

    @cached_property
    def retrieval(self):
        from .retrieval import RetrievalService  # heavy imports (faiss, torch) only when retrieval is used

        return RetrievalService(self.cfg.retrieval, self.home)

    @cached_property
    def pooled_corpus(self) -> Corpus:
        return build_corpus(self.dataset, "pooled")

    def corpus_for(self, question: Question) -> Corpus:
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
        )
