"""Pieces the training benchmarks share (bench/learning.py, bench/curriculum.py): slices of a data file, greedy
evaluation of one trained adapter (or the base model) on a question set into a resumable JSON-lines file, child
processes run a few at a time, and each policy's summary against the base with the paired bootstrap
(`evorag_core.evaluation.runner.compare_results`, as `evorag compare` computes it)."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["FixedAdapter", "SUMMARY_KEYS", "parse_slice", "write_slice", "evaluate_adapter", "run_processes",
           "summarize_against"]

SUMMARY_KEYS = ("n", "em", "f1", "avg_steps", "support_recall", "refusal_rate", "fallback_rate", "seconds")


def parse_slice(text: str) -> tuple[int, int]:
    """`START:STOP` (START may be empty: 0)."""
    start, _, stop = text.partition(":")
    return int(start or 0), int(stop)


def write_slice(data: Path, path: Path, lo: int, hi: int, *more: tuple[int, int]) -> Path:
    """Questions [lo, hi) of `data` (then those of each further (lo, hi) slice, in order) written to `path`."""
    from evorag_core.data.datasets import load_dataset, write_jsonl
    from evorag_core.types import Dataset

    dataset = load_dataset(data)
    questions = [q for a, b in ((lo, hi), *more) for q in dataset.questions[a:b]]
    write_jsonl(Dataset(dataset.name, str(path), questions), path)
    return path


class FixedAdapter:
    """Greedy LMPolicy on one adapter (None: the base model) as an episode policy."""

    name = "agent"

    def __init__(self, lm: Any, adapter: str | None):
        self.lm, self.adapter = lm, adapter
        self.label = adapter or "base"

    def begin(self, question: Any) -> None:
        self.lm.backend.activate(self.adapter)

    def act(self, view: Any):
        d = self.lm.act(view)
        return d.action, {"completion": d.completion, "logprob": d.logprob, **({"fallback": d.fallback} if d.fallback else {})}


def evaluate_adapter(cfg: Any, home: Path, questions_file: Path, corpus_source: Any, name: str,
                     adapter_path: str | None, out_path: Path) -> None:
    """Greedy episodes of one policy (the base model, or `adapter_path` loaded as `name`) on the questions of
    `questions_file`, retrieving from `corpus_source`'s corpus (a Dataset); results appended to `out_path`
    (resumable: questions already there are skipped)."""
    from evorag_core.data.datasets import load_dataset
    from evorag_core.evaluation.runner import evaluate
    from evorag_core.methods.base import EpisodeMethod
    from evorag_core.policy.agent import LMPolicy
    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.runtime import Runtime

    dataset = load_dataset(questions_file)
    runtime = Runtime(cfg, home, corpus_source if corpus_source is not None else dataset)
    backend = TransformersBackend(cfg.policy, home)
    adapter = None
    if adapter_path:
        backend.load_adapter(name, adapter_path)
        adapter = name
    method = EpisodeMethod(FixedAdapter(LMPolicy(backend, cfg.policy, cfg.answer), adapter), runtime.make_env)
    evaluate(method, dataset.questions, out_path=out_path, resume=True,
             on_result=lambda r, rs: print(f"{len(rs)}/{len(dataset.questions)} {r.question_id} em={r.em} "
                                           f"steps={r.steps}", flush=True))


def run_processes(jobs: Sequence[tuple[Any, Path]], workers: int, poll_s: float = 2.0) -> None:
    """Start each job (a callable taking its log path and returning a Popen) with at most `workers` running at once;
    fails (SystemExit naming the log) when one exits non-zero."""
    queue = list(jobs)
    running: list[tuple[subprocess.Popen, Path]] = []
    while queue or running:
        while queue and len(running) < max(workers, 1):
            start, log = queue.pop(0)
            running.append((start(log), log))
        time.sleep(poll_s)
        for item in [r for r in running if r[0].poll() is not None]:
            running.remove(item)
            if item[0].returncode != 0:
                raise SystemExit(f"a bench process failed (exit {item[0].returncode}); see {item[1]}")


def summarize_against(results: Mapping[str, list], pairs: Sequence[tuple[str, str]], resamples: int = 10_000,
                      seed: int = 0) -> dict[str, Any]:
    """Each policy's summary (SUMMARY_KEYS), and for each (a, b) in `pairs` the paired bootstrap of a against b on
    their common questions, stored under results[a]["vs_" + b]."""
    from evorag_core.evaluation.runner import compare_results, summarize

    out: dict[str, Any] = {}
    for name, rs in results.items():
        s = summarize(rs)
        out[name] = {k: s[k] for k in SUMMARY_KEYS}
    for a, b in pairs:
        out[a][f"vs_{b}"] = compare_results(results[a], results[b], resamples=resamples, seed=seed)
    return out
