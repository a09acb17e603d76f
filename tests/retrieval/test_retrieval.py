"""Retrieval: RRF by hand, deterministic ranking, BM25 backends agreeing on real data, persisted
indexes (load, rebuild on change, rebuild when corrupt), the embedding cache, recall on a real slice."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from evorag_core.config import RetrievalConfig
from evorag_core.data.corpus import build_corpus
from evorag_core.data.datasets import load_dataset
from evorag_core.errors import RetrievalError
from evorag_core.retrieval import (
    BM25Retriever,
    DenseRetriever,
    Hit,
    HybridRetriever,
    RetrievalService,
    Retriever,
    Tokenizer,
    build_retrievers,
    open_index,
    rrf_fuse,
)
from evorag_core.retrieval.base import top_k
from evorag_core.retrieval.evaluate import evaluate_retrieval, question_metrics
from evorag_core.retrieval.store import IndexFolder
from evorag_core.types import Corpus, Dataset, Passage


@pytest.fixture(autouse=True)
def own_cache(monkeypatch):
    """These tests read and damage the cache folders of their own homes: not the run's shared one (tests/conftest.py)."""
    monkeypatch.delenv("EVORAG_CACHE_DIR", raising=False)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch/FAISS thread: on the shared 2-core machine two threads doubled CPU time and wall time."""
    import faiss
    import torch

    from evorag_core.retrieval import set_cpu_threads

    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    set_cpu_threads(1)
    yield
    torch.set_num_threads(before[0])
    faiss.omp_set_num_threads(before[1])


class CountingEmbedder:
    """The real embedder, counting the texts it is asked to embed."""

    def __init__(self, inner):
        self.inner, self.dim, self.model_id, self.texts = inner, inner.dim, inner.model_id, 0

    def encode(self, texts, batch_size=None):
        self.texts += len(texts)
        return self.inner.encode(texts, batch_size)


@pytest.fixture(scope="module")
def embedder():
    """One real embedder; its string LRU spares re-running the model when tests rebuild the same index."""
    from evorag_core.retrieval.embedding import Embedder

    return Embedder()


@pytest.fixture(scope="module")
def hotpot(benchmarks) -> Dataset:
    return load_dataset(benchmarks / "hotpotqa_dev300.jsonl")


@pytest.fixture(scope="module")
def hotpot_pooled(hotpot) -> Corpus:
    return build_corpus(hotpot, "pooled")


@pytest.fixture(scope="module")
def tiny(hotpot) -> Corpus:
    """The 20 passages of the first two HotpotQA questions."""
    return Corpus(hotpot.questions[0].passages + hotpot.questions[1].passages)


@pytest.fixture(scope="module")
def micro(tiny) -> Corpus:
    """6 of them, cut to 200 characters: persistence tests rebuild (re-embed) often."""
    return Corpus(tuple(dataclasses.replace(p, text=p.text[:200]) for p in tiny.passages[3:9]))


# --- fusion and ranking, by hand ----------------------------------------------------------------

def hits(*pids: str) -> list[Hit]:
    return [Hit(pid, 1.0, rank) for rank, pid in enumerate(pids, start=1)]


def test_rrf_hand_computed():
    """BM25 = [a, b, c], dense = [c, a, d], k = 60:
    a = 1/61 + 1/62 = 0.0325225, c = 1/63 + 1/61 = 0.0322664, b = 1/62 = 0.0161290, d = 1/63 = 0.0158730."""
    fused = rrf_fuse([hits("a", "b", "c"), hits("c", "a", "d")], rrf_k=60)
    assert [h.pid for h in fused] == ["a", "c", "b", "d"]
    assert [h.rank for h in fused] == [1, 2, 3, 4]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert fused[1].score == pytest.approx(1 / 63 + 1 / 61)
    assert fused[3].score == pytest.approx(1 / 63)
    assert [h.pid for h in rrf_fuse([hits("a", "b", "c"), hits("c", "a", "d")], 60, limit=2)] == ["a", "c"]


def test_rrf_ties_are_deterministic():
    """x: ranks (1, 2), y: (2, 1) -> equal scores 1/61 + 1/62, bit-identical; equal best rank 1;
    x has the better rank in the first (BM25) list, so x first. u, v: only in one list each at rank 3
    -> tie on score and best rank; u (list 0) before v (list 1)."""
    fused = rrf_fuse([hits("x", "y", "u"), hits("y", "x", "v")], rrf_k=60)
    assert [h.pid for h in fused] == ["x", "y", "u", "v"]
    assert fused[0].score == fused[1].score
    assert [h.pid for h in rrf_fuse([hits("y", "x", "u"), hits("x", "y", "v")], 60)] == ["y", "x", "u", "v"]


def test_top_k_breaks_ties_by_corpus_position():
    """scores [1, 2, 2, 0, 2] -> the three 2s in corpus order (1, 2, 4), then 0; positive_only drops 3."""
    pids = ["p0", "p1", "p2", "p3", "p4"]
    scores = np.array([1.0, 2.0, 2.0, 0.0, 2.0])
    assert [h.pid for h in top_k(scores, 2, pids)] == ["p1", "p2"]
    assert [h.pid for h in top_k(scores, 5, pids)] == ["p1", "p2", "p4", "p0", "p3"]
    assert [h.pid for h in top_k(scores, 5, pids, positive_only=True)] == ["p1", "p2", "p4", "p0"]
    assert [h.rank for h in top_k(scores, 9, pids)] == [1, 2, 3, 4, 5]


def test_tokenizer():
    """lowercase, split on non-alphanumerics, drop en_plus stopwords, Snowball stem."""
    assert Tokenizer()("Which magazine was started first, Arthur's Magazine?") == \
        ["magazin", "start", "first", "arthur", "magazin"]
    assert Tokenizer(stopwords="en", stem=False)("Zürich's 2 Towers") == ["zürich", "s", "2", "towers"]


# --- BM25 --------------------------------------------------------------------------------------

def titles(corpus: Corpus, found: list[Hit]) -> list[str]:
    by_pid = {p.pid: p.title for p in corpus.passages}
    return [by_pid[h.pid] for h in found]


def test_bm25_finds_the_lexical_match(tiny):
    r = BM25Retriever(tiny)
    assert isinstance(r, Retriever)
    top = r.search("Ordos Mongolian subdivision", 3)
    assert titles(tiny, top)[0] == "Ordos City"
    assert [h.rank for h in top] == [1, 2, 3] and top[0].score >= top[1].score >= top[2].score
    assert r.search("the of and", 5) == []  # only stopwords: no match, no arbitrary passages
    assert titles(tiny, r.search("Tromeo", 5)) == ["Tromeo and Juliet", "James Gunn"]  # only 2 contain it
    batch = r.search_batch(["Ordos Mongolian subdivision", "Tromeo"], 2)
    assert batch == [top[:2], r.search("Tromeo", 2)]
    with pytest.raises(RetrievalError, match="k must be"):
        r.search("x", 0)
    with pytest.raises(RetrievalError, match="backend"):
        BM25Retriever(tiny, backend="elastic")
    with pytest.raises(RetrievalError, match="empty corpus"):
        BM25Retriever(Corpus(()))


@pytest.mark.parametrize("method", ["robertson", "lucene"])
def test_bm25_backends_agree_on_real_queries(hotpot, hotpot_pooled, method):
    """bm25s and rank-bm25 on the pooled HotpotQA corpus (2,965 passages), 50 questions, top-5 sets.
    lucene: same formula on both. robertson: bm25s clamps idf at 0 where rank-bm25 uses 0.25 x mean idf
    (terms in > half of the passages; none survive the stopwords here). Measured: 50/50 identical
    for both; asserted >= 48/50 to leave room for float ties at rank 5."""
    a = BM25Retriever(hotpot_pooled, "bm25s", method=method)
    b = BM25Retriever(hotpot_pooled, "rank-bm25", method=method)
    questions = [q.question for q in hotpot.questions[:50]]
    same = sum({h.pid for h in x} == {h.pid for h in y}
               for x, y in zip(a.search_batch(questions, 5), b.search_batch(questions, 5)))
    assert same >= 48


# --- dense, hybrid, recall ---------------------------------------------------------------------

def test_dense_and_hybrid_on_tiny_corpus(tiny, embedder):
    """Question 2's gold passages: "Spaceware Sky Vision II" (rank 1 in both lists, fused 2/61) and
    "Ordos City" (bm25 rank 2, dense below 3): fusion brings both into its top 5."""
    dense = DenseRetriever(tiny, embedder)
    q = "Spaceware Sky Division II is manufactured by this subsidiary, which is one of twelve subdivisions of " \
        "Inner Mongolia, China?"
    top = dense.search(q, 3)
    assert titles(tiny, top)[0] == "Spaceware Sky Vision II" and "Ordos City" not in titles(tiny, top)
    assert -1.0 <= top[-1].score <= top[0].score <= 1.0 + 1e-6
    assert len(dense.search(q, 100)) == len(tiny)
    hybrid = HybridRetriever(BM25Retriever(tiny), dense, rrf_k=60, depth=10)
    fused = hybrid.search(q, 5)
    assert len(fused) == 5 and fused[0].score == pytest.approx(2 / 61)
    assert titles(tiny, fused)[0] == "Spaceware Sky Vision II" and "Ordos City" in titles(tiny, fused)
    bm25 = BM25Retriever(tiny)
    assert fused == rrf_fuse([bm25.search(q, 10), dense.search(q, 10)], 60, limit=5)
    assert hybrid.search_batch([q, q], 5) == [fused, fused]
    with pytest.raises(RetrievalError, match="shape"):
        DenseRetriever(tiny, embedder, vectors=np.zeros((3, embedder.dim), dtype=np.float32))


@pytest.mark.slow
def test_recall_on_a_real_slice(hotpot, embedder, tmp_path):
    """First 10 HotpotQA questions pooled (100 passages), question as query, k = 5. Measured:
    support recall bm25 0.85, dense 0.90, rrf 0.95; asserted with margin. index_load_s appears on reuse."""
    sliced = Dataset(hotpot.name, hotpot.path, hotpot.questions[:10])
    service = RetrievalService(RetrievalConfig(), tmp_path, embedder)
    report = evaluate_retrieval(sliced, "pooled", 5, RetrievalConfig(), tmp_path, service)
    assert set(report) == {"bm25", "dense", "rrf"}
    assert report["bm25"]["support_recall"] >= 0.7
    assert report["dense"]["support_recall"] >= 0.75
    assert report["rrf"]["support_recall"] >= 0.8
    for row in report.values():
        assert row["questions"] == 10 and 0 <= row["full_recall"] <= row["support_recall"] <= 1
        assert row["mrr"] > 0.5 and row["queries_per_s"] > 0 and row["index_build_s"] > 0
        assert "index_load_s" not in row
    fresh = RetrievalService(RetrievalConfig(), tmp_path, embedder)
    again = evaluate_retrieval(sliced, "pooled", 5, RetrievalConfig(), tmp_path, fresh)
    assert again["rrf"]["support_recall"] == report["rrf"]["support_recall"]
    assert again["dense"]["index_load_s"] < report["dense"]["index_build_s"]
    per_q = evaluate_retrieval(sliced, "per-question", 5, RetrievalConfig(), tmp_path, service)
    assert per_q["rrf"]["passages"] == 10 and per_q["rrf"]["support_recall"] >= 0.8


def test_question_metrics_by_hand():
    """gold {a, b}; ranked [x, b, y] -> support 1/2, full 0, reciprocal rank 1/2."""
    assert question_metrics(hits("x", "b", "y"), frozenset({"a", "b"})) == (0.5, 0.0, 0.5)
    assert question_metrics(hits("b", "a"), frozenset({"a", "b"})) == (1.0, 1.0, 1.0)
    assert question_metrics(hits("x"), frozenset({"a"})) == (0.0, 0.0, 0.0)


# --- persistence -------------------------------------------------------------------------------

def test_index_persists_loads_and_rebuilds(micro, embedder, tmp_path):
    cfg = RetrievalConfig()
    counting = CountingEmbedder(embedder)
    first = open_index(micro, cfg, tmp_path, counting)
    assert not first.loaded and counting.texts == len(micro)
    assert (first.folder / "manifest.json").is_file() and first.folder.parent == tmp_path / "indexes"
    q = "Who wrote Tromeo and Juliet?"

    second = open_index(micro, cfg, tmp_path, counting)
    assert second.loaded and second.folder == first.folder and counting.texts == len(micro)  # nothing re-embedded
    for name in ("bm25", "dense", "rrf"):
        assert second.retrievers[name].search(q, 5) == first.retrievers[name].search(q, 5)

    edited = Corpus(micro.passages[:-1] + (dataclasses.replace(micro.passages[-1], text="Changed text."),))
    third = open_index(edited, cfg, tmp_path, counting)
    assert not third.loaded and third.folder != first.folder
    other_settings = open_index(micro, dataclasses.replace(cfg, bm25_method="atire"), tmp_path, counting)
    assert not other_settings.loaded and other_settings.folder not in (first.folder, third.folder)

    assert set(build_retrievers(micro, cfg, tmp_path, counting)) == {"bm25", "dense", "rrf"}


def test_homes_share_indexes_and_embeddings_through_the_cache_folder(micro, embedder, tmp_path, monkeypatch):
    """EVORAG_CACHE_DIR: a second home opens the index the first built (nothing embedded again) and neither home
    holds an index or an embedding folder of its own."""
    monkeypatch.setenv("EVORAG_CACHE_DIR", str(tmp_path / "cache"))
    counting = CountingEmbedder(embedder)
    first = open_index(micro, RetrievalConfig(), tmp_path / "a", counting)
    second = open_index(micro, RetrievalConfig(), tmp_path / "b", counting)
    assert not first.loaded and second.loaded and counting.texts == len(micro)
    assert first.folder == second.folder and first.folder.parent == tmp_path / "cache" / "indexes"
    service = RetrievalService(RetrievalConfig(), tmp_path / "c", counting)
    assert service.cache.vectors(["A passage no home has embedded."]).shape[0] == 1
    assert service.cache.folder.parent == tmp_path / "cache" / "embeddings"
    assert not any((tmp_path / h).exists() for h in ("a", "b", "c"))


@pytest.mark.parametrize("damage", ["truncate-vectors", "drop-manifest", "edit-bm25", "partial-tmp"])
def test_corrupt_index_is_rebuilt(micro, embedder, tmp_path, damage):
    cfg = RetrievalConfig()
    built = open_index(micro, cfg, tmp_path, embedder)
    folder = built.folder
    if damage == "truncate-vectors":
        vec = folder / "dense" / "embeddings.npy"
        vec.write_bytes(vec.read_bytes()[:200])
    elif damage == "drop-manifest":  # e.g. a copy interrupted before its last file
        (folder / "manifest.json").unlink()
    elif damage == "edit-bm25":
        victim = next(p for p in sorted((folder / "bm25").iterdir()) if p.suffix == ".json")
        victim.write_text(victim.read_text() + " ")
    else:  # a crashed writer's temp folder beside a good index is ignored
        (tmp_path / "indexes" / f".tmp-{folder.name}-dead").mkdir()
    again = open_index(micro, cfg, tmp_path, embedder)
    assert again.loaded is (damage == "partial-tmp")
    assert IndexFolder(tmp_path / "indexes", folder.name).verify()["passages"] == len(micro)
    q = "Romeo and Juliet anime"
    assert again.retrievers["rrf"].search(q, 5) == built.retrievers["rrf"].search(q, 5)


def test_manifest_records_every_file(micro, embedder, tmp_path):
    info = open_index(micro, RetrievalConfig(bm25_backend="rank-bm25"), tmp_path, embedder)
    manifest = json.loads((info.folder / "manifest.json").read_text())
    assert {"bm25/tokens.json", "dense/embeddings.npy"} <= set(manifest["files"])
    assert manifest["passages"] == len(micro) and "rank-bm25" in manifest["bm25"]
    loaded = open_index(micro, RetrievalConfig(bm25_backend="rank-bm25"), tmp_path, embedder)
    assert loaded.loaded and loaded.retrievers["bm25"].backend == "rank-bm25"


# --- the service: per-question corpora from cached vectors -------------------------------------

def test_service_reuses_embeddings_for_per_question_corpora(hotpot, embedder, tmp_path):
    """Pool of 3 questions (30 passages) embedded once; every per-question corpus is then served from
    the embedding cache (0 new texts), also in a new service reading the cache from disk."""
    sliced = Dataset(hotpot.name, hotpot.path, hotpot.questions[:3])
    pooled = build_corpus(sliced, "pooled")
    counting = CountingEmbedder(embedder)
    service = RetrievalService(RetrievalConfig(), tmp_path, counting)
    service.open(pooled, persist=True)
    assert counting.texts == len(pooled) == service.cache.encoded
    for q in sliced.questions:
        r = service.retriever_for(build_corpus(sliced, "per-question", q))
        assert len(r.search(q.question, 5)) == 5
    assert counting.texts == len(pooled) + 3 and service.cache.encoded == len(pooled)  # + the 3 queries
    per_q = build_corpus(sliced, "per-question", sliced.questions[0])
    assert service.retrievers(per_q) is service.retrievers(per_q)  # memoised

    fresh_counting = CountingEmbedder(embedder)
    fresh = RetrievalService(RetrievalConfig(), tmp_path, fresh_counting)
    fresh.retriever_for(per_q, "dense").search("x", 1)
    assert fresh_counting.texts == 1  # only the query; the passages came from the disk cache
    new_passage = Corpus((Passage("new:0", "Nowhere", "A passage never seen before."),))
    fresh.retriever_for(new_passage, "bm25")
    assert fresh.cache.encoded == 1
    with pytest.raises(RetrievalError, match="unknown retriever"):
        fresh.retriever_for(per_q, "splade")


def test_corrupt_cache_shard_is_dropped(micro, embedder, tmp_path):
    service = RetrievalService(RetrievalConfig(), tmp_path, embedder)
    service.retriever_for(micro)
    shards = list((tmp_path / "embeddings").rglob("*.npz"))
    assert len(shards) == 1
    shards[0].write_bytes(b"not a zip file")
    counting = CountingEmbedder(embedder)
    fresh = RetrievalService(RetrievalConfig(), tmp_path, counting)
    fresh.retriever_for(micro)
    assert fresh.cache.encoded == len(micro) and not shards[0].exists()


class HashEmbedder:
    """Deterministic 8-d unit vectors from a text hash: for cache bookkeeping tests, no model."""

    dim, model_id = 8, "hash-8"

    def __init__(self):
        self.texts = 0

    def encode(self, texts, batch_size=None):
        import hashlib

        self.texts += len(texts)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:32], dtype=np.uint8)[:8] for t in texts]
        vecs = np.array(rows, dtype=np.float32).reshape(len(texts), 8) + 1.0
        return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def test_cache_shards_merge_and_vectors_round_trip(tmp_path, monkeypatch):
    """5 writes -> 5 shards; with the merge threshold at 3, the next cache merges them into 1 and
    returns the same vectors without embedding anything."""
    from evorag_core.retrieval import embcache

    emb = HashEmbedder()
    cache = embcache.EmbeddingCache(emb, tmp_path)
    texts = [f"passage {i}" for i in range(10)]
    for i in range(5):
        cache.vectors(texts[2 * i: 2 * i + 2])
    first = cache.vectors(texts)
    assert emb.texts == 10 and len(list(cache.folder.glob("*.npz"))) == 5
    monkeypatch.setattr(embcache, "_MERGE_AT", 3)
    again = embcache.EmbeddingCache(emb, tmp_path)
    np.testing.assert_array_equal(again.vectors(texts[::-1]), first[::-1])
    assert emb.texts == 10 and len(again) == 10 and len(list(again.folder.glob("*.npz"))) == 1
    other_model = embcache.EmbeddingCache(type("E", (HashEmbedder,), {"model_id": "other"})(), tmp_path)
    assert len(other_model) == 0  # a different model_id never sees these vectors


def test_cli_logging_keeps_faiss_loader_quiet():
    """The CLI's logging set-up, then the first `import faiss` (as any retrieval command does): faiss's loader reports
    at INFO each build it tries (`Loading faiss with AVX512 support.`, `Could not load library ... swigfaiss_avx512_spr`);
    none of it reaches stderr. Warnings and errors of the loader still would."""
    import subprocess
    import sys

    code = ("from evorag_core.cli.main import configure_logging; configure_logging(False); "
            "import faiss; faiss.IndexFlatIP(4)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "faiss" not in done.stderr.lower(), done.stderr
