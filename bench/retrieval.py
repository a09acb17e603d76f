"""Retrieval benchmark: index build/load, per-query latency and recall of bm25, dense and rrf.

    python -m bench.retrieval [--out bench/results/retrieval.json] [--threads 1] [--quick]

Sections (each printed as a table; everything lands in one JSON file):
1. Pooled corpora of hotpotqa_dev300 and musique_dev146 with the default [retrieval] config, in a
   fresh home folder: index build seconds (embedding passages/s), persisted-index load seconds, warm
   per-query latency (median/p95) and queries/s at top-5, support/full recall@5 and MRR, and the
   latency of embedding one query.
2. Embedder options on the pooled HotpotQA corpus: fp32/bf16 x max_seq_length 256/128, embedded in
   interleaved chunks (so that load from other jobs hits every option alike): passages/s, cosine to
   fp32/256, recall@5 of dense and rrf; the other max_seq_length than the configured one also on the
   whole pooled corpus. Then 1 vs 2 torch threads.
3. A synthetic 100,000-passage corpus (real sentences recombined; random unit vectors for the
   dense index, whose cost does not depend on content): BM25 build/save/load and hybrid latency.

Timings on a shared machine are noisy: the load average is recorded with every section.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from evorag_core.config import RetrievalConfig, load_config
from evorag_core.data.corpus import build_corpus
from evorag_core.data.datasets import load_dataset
from evorag_core.retrieval.embedding import Embedder
from evorag_core.retrieval import (
    BM25Retriever,
    DenseRetriever,
    HybridRetriever,
    RetrievalService,
    passage_text,
    set_cpu_threads,
)
from evorag_core.retrieval.evaluate import question_metrics
from evorag_core.types import Corpus, Dataset, Passage

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO.parent / "shared" / "benchmarks"
NAMES = ("bm25", "dense", "rrf")


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


class Clock:
    """Wall time and this process's CPU time. With one thread, CPU time is what the work costs on an
    otherwise idle core; wall time includes waiting for the CPU when other jobs share the machine."""

    def __enter__(self) -> "Clock":
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall0, time.process_time() - self.cpu0


def latency(walls: list[float], cpus: list[float]) -> dict:
    return {"median_ms": 1000 * statistics.median(walls), "p95_ms": 1000 * pct(walls, 95),
            "queries_per_s": len(walls) / sum(walls),
            "cpu_median_ms": 1000 * statistics.median(cpus), "cpu_p95_ms": 1000 * pct(cpus, 95)}


def time_queries(retriever, queries: list[str], k: int, embedder: Embedder) -> dict:
    """Warm per-query latency: 5 unmeasured queries first; the embedder's string cache cleared."""
    for q in queries[-5:]:
        retriever.search(q, k)
    embedder.clear_cache()
    walls, cpus, results = [], [], []
    for q in queries:
        with Clock() as c:
            results.append(retriever.search(q, k))
        walls.append(c.wall)
        cpus.append(c.cpu)
    return {"results": results, **latency(walls, cpus)}


def recall(results, questions, corpus: Corpus) -> dict:
    rows = np.array([question_metrics(hits, corpus.gold_for(q)) for hits, q in zip(results, questions)])
    return dict(zip(("support_recall@5", "full_recall@5", "mrr@5"), map(float, rows.mean(axis=0))))


def query_embedding_latency(embedder: Embedder, queries: list[str]) -> dict:
    embedder.clear_cache()
    walls, cpus = [], []
    for q in queries:
        with Clock() as c:
            embedder.encode([q])
        walls.append(c.wall)
        cpus.append(c.cpu)
    embedder.clear_cache()
    return latency(walls, cpus)


# --- 1. real pooled corpora --------------------------------------------------------------------

def bench_dataset(path: Path, cfg: RetrievalConfig, embedder: Embedder, limit: int | None) -> tuple[dict, dict]:
    """(report, {corpus, questions, dense}) — the latter for the embedder-options section."""
    dataset = load_dataset(path)
    if limit:
        dataset = Dataset(dataset.name, dataset.path, dataset.questions[:limit])
    corpus = build_corpus(dataset, "pooled")
    questions = [q for q in dataset.questions if q.gold_pids]
    queries = [q.question for q in questions]
    out: dict = {"passages": len(corpus), "questions": len(questions), "load_avg_start": load_avg()}
    with tempfile.TemporaryDirectory() as home:
        embedder.clear_cache()
        with Clock() as build:
            built = RetrievalService(cfg, Path(home), embedder).open(corpus, persist=True)
        with Clock() as load:
            loaded = RetrievalService(cfg, Path(home), embedder).open(corpus, persist=True)
        if built.loaded or not loaded.loaded:
            raise RuntimeError("expected a build, then a load")
        out["build_s"] = built.seconds
        out["load_s"] = loaded.seconds
        out["build_total"] = {"wall_s": build.wall, "cpu_s": build.cpu}  # incl. hashing, writing, verifying
        out["load_total"] = {"wall_s": load.wall, "cpu_s": load.cpu}
        out["embedding_passages_per_s"] = len(corpus) / built.seconds["dense"]
        out["embedding_passages_per_cpu_s"] = len(corpus) / build.cpu
        out["load_speedup"] = build.wall / load.wall
        out["index_bytes"] = sum(p.stat().st_size for p in built.folder.rglob("*") if p.is_file())
        for name in NAMES:
            timing = time_queries(loaded.retrievers[name], queries, 5, embedder)
            out[name] = {**recall(timing.pop("results"), questions, corpus), **timing}
    out["query_embedding_ms"] = query_embedding_latency(embedder, queries[:100])
    out["load_avg_end"] = load_avg()
    return out, {"corpus": corpus, "questions": questions, "dense": loaded.retrievers["dense"]}


# --- 2. embedder options -----------------------------------------------------------------------

OPTIONS = [("float32", 256), ("float32", 128), ("bfloat16", 256), ("bfloat16", 128)]


def embed_interleaved(embedders: dict, texts: list[str], chunk: int = 32) -> tuple[dict, dict, dict]:
    """Each option embeds the same chunks in turn, so load from other jobs hits every option alike."""
    parts: dict = {opt: [] for opt in embedders}
    wall, cpu = dict.fromkeys(embedders, 0.0), dict.fromkeys(embedders, 0.0)
    for start in range(0, len(texts), chunk):
        for opt, emb in embedders.items():
            with Clock() as c:
                parts[opt].append(emb.encode(texts[start:start + chunk]))
            wall[opt] += c.wall
            cpu[opt] += c.cpu
    return {opt: np.concatenate(parts[opt]) for opt in embedders}, wall, cpu


def option_recall(corpus: Corpus, questions, emb, vectors, bm25, cfg: RetrievalConfig) -> dict:
    dense = DenseRetriever(corpus, emb, vectors)
    rrf = HybridRetriever(bm25, dense, cfg.rrf_k, cfg.fusion_depth)
    queries = [q.question for q in questions]
    return {"dense": recall(dense.search_batch(queries, 5), questions, corpus),
            "rrf": recall(rrf.search_batch(queries, 5), questions, corpus)}


def bench_options(path: Path, cfg: RetrievalConfig, subset_questions: int, full: dict | None) -> dict:
    """All four options on the pooled corpus of the first `subset_questions` questions (speed,
    cosine, recall); the other max_seq_length also on the whole pooled corpus, against the configured
    embedder's vectors in `full` (from section 1)."""
    dataset = load_dataset(path)
    embedders = {opt: Embedder(cfg.dense_model, dtype=opt[0], max_seq_length=opt[1], cache_size=0)
                 for opt in OPTIONS}
    sub = Dataset(dataset.name, dataset.path, dataset.questions[:subset_questions])
    corpus = build_corpus(sub, "pooled")
    questions = [q for q in sub.questions if q.gold_pids]
    load_start = load_avg()
    vectors, wall, cpu = embed_interleaved(embedders, [passage_text(p) for p in corpus.passages])
    bm25 = BM25Retriever(corpus, cfg.bm25_backend, None, cfg.bm25_method)
    ref = vectors[("float32", 256)]
    rows = {}
    for opt, emb in embedders.items():
        cos = np.sum(ref * vectors[opt], axis=1)
        rows[f"{opt[0]}/{opt[1]}"] = {
            "passages_per_s": len(corpus) / wall[opt], "passages_per_cpu_s": len(corpus) / cpu[opt],
            "cosine_to_fp32_256_min": float(cos.min()), "cosine_to_fp32_256_mean": float(cos.mean()),
            **option_recall(corpus, questions, emb, vectors[opt], bm25, cfg),
            "query_embedding_ms": query_embedding_latency(emb, [q.question for q in questions][:60]),
        }
    out = {"passages": len(corpus), "questions": len(questions), "load_avg_start": load_start, "options": rows}
    if full is not None:  # the other max_seq_length on the whole pooled corpus, against the configured one
        corpus, questions, ref_dense = full["corpus"], full["questions"], full["dense"]
        other = 128 if cfg.max_seq_length != 128 else 256
        emb = embedders.get((cfg.dtype, other)) or Embedder(cfg.dense_model, dtype=cfg.dtype, max_seq_length=other)
        with Clock() as c:
            vecs = emb.encode([passage_text(p) for p in corpus.passages], batch_size=cfg.batch_size)
        bm25 = BM25Retriever(corpus, cfg.bm25_backend, None, cfg.bm25_method)
        cos = np.sum(ref_dense.vectors * vecs, axis=1)
        mine, theirs = f"{cfg.dtype}/{cfg.max_seq_length}", f"{cfg.dtype}/{other}"
        out["full_corpus"] = {
            "passages": len(corpus), "questions": len(questions), "configured": mine, "other": theirs,
            mine: option_recall(corpus, questions, ref_dense.embedder, ref_dense.vectors, bm25, cfg),
            theirs: {"passages_per_s": len(corpus) / c.wall, "passages_per_cpu_s": len(corpus) / c.cpu,
                     "cosine_to_configured_min": float(cos.min()), "cosine_to_configured_mean": float(cos.mean()),
                     **option_recall(corpus, questions, emb, vecs, bm25, cfg)},
        }
    out["load_avg_end"] = load_avg()
    return out


def bench_threads(path: Path, cfg: RetrievalConfig, n_passages: int = 256, chunk: int = 32) -> dict:
    """Leaves 2 threads set; the caller restores its own count."""
    dataset = load_dataset(path)
    texts = [passage_text(p) for p in build_corpus(dataset, "pooled").passages][:n_passages]
    queries = [q.question for q in dataset.questions][:60]
    emb = Embedder(cfg.dense_model, dtype=cfg.dtype, max_seq_length=cfg.max_seq_length, cache_size=0)
    wall, cpu, qwall, qcpu = {1: 0.0, 2: 0.0}, {1: 0.0, 2: 0.0}, {1: [], 2: []}, {1: [], 2: []}
    load_start = load_avg()
    for start in range(0, len(texts), chunk):
        for n in (1, 2):
            set_cpu_threads(n)
            with Clock() as c:
                emb.encode(texts[start:start + chunk])
            wall[n] += c.wall
            cpu[n] += c.cpu
    for q in queries:
        for n in (1, 2):
            set_cpu_threads(n)
            with Clock() as c:
                emb.encode([q])
            qwall[n].append(c.wall)
            qcpu[n].append(c.cpu)
    return {"passages": len(texts), "load_avg_start": load_start, "load_avg_end": load_avg(),
            **{f"threads={n}": {"passages_per_s": len(texts) / wall[n], "passages_per_cpu_s": len(texts) / cpu[n],
                                "query": latency(qwall[n], qcpu[n])} for n in (1, 2)}}


# --- 3. synthetic 100K -------------------------------------------------------------------------

class RandomVectors:
    """Stands in for the embedder where only the index size matters (no model call for passages)."""

    def __init__(self, real: Embedder):
        self.real, self.dim, self.model_id = real, real.dim, "random"

    def encode(self, texts, batch_size=None):
        return self.real.encode(texts, batch_size)  # queries go through the real model


def synthetic_corpus(n: int, seed: int = 13) -> Corpus:
    """n passages: a real title plus 3-5 sentences drawn from all the benchmark samples' passages."""
    sentences, titles = [], []
    for name in ("hotpotqa_dev300", "2wiki_dev182", "musique_dev146"):
        for q in load_dataset(BENCHMARKS / f"{name}.jsonl").questions:
            for p in q.passages:
                titles.append(p.title)
                sentences.extend(s.strip() + "." for s in p.text.split(". ") if len(s) > 20)
    rng = random.Random(seed)
    return Corpus(tuple(Passage(f"synthetic:{i}", f"{rng.choice(titles)} ({i})",
                                " ".join(rng.sample(sentences, rng.randint(3, 5)))) for i in range(n)))


def bench_synthetic(n: int, cfg: RetrievalConfig, embedder: Embedder) -> dict:
    out: dict = {"passages": n, "load_avg_start": load_avg()}
    corpus = synthetic_corpus(n)
    with Clock() as c:
        bm25 = BM25Retriever(corpus, cfg.bm25_backend, None, cfg.bm25_method)
    out["bm25_build"] = {"wall_s": c.wall, "cpu_s": c.cpu}
    vectors = np.random.default_rng(0).standard_normal((n, embedder.dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory() as tmp:
        with Clock() as c:
            bm25.save(Path(tmp) / "bm25")
            np.save(Path(tmp) / "embeddings.npy", vectors)
        out["save"] = {"wall_s": c.wall, "cpu_s": c.cpu}
        with Clock() as c:
            bm25 = BM25Retriever.load(Path(tmp) / "bm25", corpus, cfg.bm25_backend, bm25.tokenizer, cfg.bm25_method)
            dense = DenseRetriever(corpus, RandomVectors(embedder), np.load(Path(tmp) / "embeddings.npy"))
        out["load"] = {"wall_s": c.wall, "cpu_s": c.cpu}
    rrf = HybridRetriever(bm25, dense, cfg.rrf_k, cfg.fusion_depth)
    queries = [q.question for q in load_dataset(BENCHMARKS / "hotpotqa_dev300.jsonl").questions][:200]
    for name, r in (("bm25", bm25), ("dense", dense), ("rrf", rrf)):
        timing = time_queries(r, queries, 5, embedder)
        timing.pop("results")
        out[name] = timing
    out["load_avg_end"] = load_avg()
    return out


# --- report ------------------------------------------------------------------------------------

def span(r: dict) -> str:
    return f"load avg {r['load_avg_start']} -> {r['load_avg_end']}"


def print_dataset(name: str, r: dict) -> None:
    print(f"\n{name}: {r['passages']} passages, {r['questions']} questions ({span(r)})")
    print(f"  build {r['build_total']['wall_s']:.1f} s wall / {r['build_total']['cpu_s']:.1f} s CPU "
          f"(bm25 {r['build_s']['bm25']:.2f} s; embedding {r['embedding_passages_per_s']:.1f} passages/s wall, "
          f"{r['embedding_passages_per_cpu_s']:.1f} per CPU-s); load {r['load_total']['wall_s']:.3f} s "
          f"({r['load_speedup']:.0f}x faster)")
    q = r["query_embedding_ms"]
    print(f"  one query through MiniLM: median {q['median_ms']:.1f} ms wall, {q['cpu_median_ms']:.1f} ms CPU")
    print(f"  {'retriever':<9}{'support@5':>10}{'full@5':>8}{'mrr@5':>7}{'median ms':>11}{'p95 ms':>8}{'q/s':>8}"
          f"{'CPU med ms':>12}{'CPU p95':>9}")
    for n in NAMES:
        x = r[n]
        print(f"  {n:<9}{x['support_recall@5']:>10.3f}{x['full_recall@5']:>8.3f}{x['mrr@5']:>7.3f}"
              f"{x['median_ms']:>11.1f}{x['p95_ms']:>8.1f}{x['queries_per_s']:>8.1f}"
              f"{x['cpu_median_ms']:>12.1f}{x['cpu_p95_ms']:>9.1f}")


def print_options(r: dict) -> None:
    print(f"\nembedder options, pooled corpus of the first {r['questions']} questions ({r['passages']} passages; "
          f"{span(r)})")
    print(f"  {'option':<15}{'pass/s':>8}{'pass/CPU-s':>11}{'cos min':>9}{'cos mean':>9}{'dense@5':>9}{'rrf@5':>7}"
          f"{'query ms':>10}{'CPU ms':>8}")
    for name, x in r["options"].items():
        q = x["query_embedding_ms"]
        print(f"  {name:<15}{x['passages_per_s']:>8.1f}{x['passages_per_cpu_s']:>11.1f}"
              f"{x['cosine_to_fp32_256_min']:>9.4f}{x['cosine_to_fp32_256_mean']:>9.4f}"
              f"{x['dense']['support_recall@5']:>9.3f}{x['rrf']['support_recall@5']:>7.3f}"
              f"{q['median_ms']:>10.1f}{q['cpu_median_ms']:>8.1f}")
    if "full_corpus" in r:
        f = r["full_corpus"]
        print(f"  whole pooled corpus ({f['passages']} passages, {f['questions']} questions):")
        for name in (f["configured"], f["other"]):
            x = f[name]
            print(f"    {name}: dense support@5 {x['dense']['support_recall@5']:.3f} full@5 "
                  f"{x['dense']['full_recall@5']:.3f}; rrf support@5 {x['rrf']['support_recall@5']:.3f} full@5 "
                  f"{x['rrf']['full_recall@5']:.3f}")
        x = f[f["other"]]
        print(f"    {f['other']}: {x['passages_per_s']:.1f} passages/s, {x['passages_per_cpu_s']:.1f} per CPU-s "
              f"(sorted batches of the configured size), cosine to {f['configured']} min "
              f"{x['cosine_to_configured_min']:.3f} mean {x['cosine_to_configured_mean']:.4f}")


def print_threads(r: dict) -> None:
    print(f"\ntorch threads, {r['passages']} passages ({span(r)})")
    for n in (1, 2):
        x = r[f"threads={n}"]
        q = x["query"]
        print(f"  threads={n}: {x['passages_per_s']:.1f} passages/s ({x['passages_per_cpu_s']:.1f} per CPU-s); "
              f"one query median {q['median_ms']:.1f} ms, p95 {q['p95_ms']:.1f} ms")


def print_synthetic(r: dict) -> None:
    print(f"\nsynthetic {r['passages']} passages ({span(r)}): bm25 build {r['bm25_build']['wall_s']:.1f} s, "
          f"save {r['save']['wall_s']:.1f} s, load {r['load']['wall_s']:.2f} s")
    for n in NAMES:
        x = r[n]
        print(f"  {n:<6} median {x['median_ms']:.1f} ms  p95 {x['p95_ms']:.1f} ms  {x['queries_per_s']:.1f} q/s  "
              f"(CPU median {x['cpu_median_ms']:.1f} ms, p95 {x['cpu_p95_ms']:.1f} ms)")


def targets(report: dict) -> dict:
    """Latency targets, on wall time and on CPU time (what the same run costs on an idle core)."""
    checks = {}
    for name, r in report["datasets"].items():
        checks[f"{name}: load >= 10x faster than build"] = r["load_speedup"] >= 10
        checks[f"{name}: rrf median <= 25 ms (wall)"] = r["rrf"]["median_ms"] <= 25
        checks[f"{name}: rrf median <= 25 ms (CPU)"] = r["rrf"]["cpu_median_ms"] <= 25
    if "synthetic" in report:
        checks["synthetic: rrf median <= 60 ms (wall)"] = report["synthetic"]["rrf"]["median_ms"] <= 60
        checks["synthetic: rrf median <= 60 ms (CPU)"] = report["synthetic"]["rrf"]["cpu_median_ms"] <= 60
    return checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "retrieval.json")
    ap.add_argument("--config", type=Path, default=None, help="TOML config (default configs/default.toml)")
    ap.add_argument("--threads", type=int, default=1, help="torch/FAISS threads (default 1)")
    ap.add_argument("--quick", action="store_true", help="30 questions per data set, 10,000 synthetic passages")
    ap.add_argument("--skip", nargs="*", default=[], choices=["datasets", "options", "threads", "synthetic"])
    ap.add_argument("--option-questions", type=int, default=50, help="questions in the options subset")
    ap.add_argument("--synthetic-size", type=int, default=100_000)
    args = ap.parse_args(argv)

    import faiss
    import torch

    set_cpu_threads(args.threads)
    cfg = load_config(args.config).retrieval
    limit = 30 if args.quick else None
    embedder = Embedder(cfg.dense_model, dtype=cfg.dtype, max_seq_length=cfg.max_seq_length,
                        batch_size=cfg.batch_size)
    report: dict = {
        "machine": {"cpus": os.cpu_count(), "threads": args.threads, "platform": platform.platform(),
                    "python": platform.python_version(), "torch": torch.__version__, "faiss": faiss.__version__},
        "config": dataclasses.asdict(cfg), "model_id": embedder.model_id, "datasets": {},
    }
    full = None
    if "datasets" not in args.skip:
        for name in ("hotpotqa_dev300", "musique_dev146"):
            report["datasets"][name], extras = bench_dataset(BENCHMARKS / f"{name}.jsonl", cfg, embedder, limit)
            full = full or extras
            print_dataset(name, report["datasets"][name])
    if "options" not in args.skip:
        questions = 10 if args.quick else args.option_questions
        report["embedding_options"] = bench_options(BENCHMARKS / "hotpotqa_dev300.jsonl", cfg, questions, full)
        print_options(report["embedding_options"])
    if "threads" not in args.skip:
        report["threads"] = bench_threads(BENCHMARKS / "hotpotqa_dev300.jsonl", cfg, 64 if args.quick else 256)
        print_threads(report["threads"])
        set_cpu_threads(args.threads)
    if "synthetic" not in args.skip:
        size = 10_000 if args.quick else args.synthetic_size
        report["synthetic"] = bench_synthetic(size, cfg, embedder)
        print_synthetic(report["synthetic"])
    report["targets"] = targets(report)
    print("\ntargets:", "; ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in report["targets"].items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
