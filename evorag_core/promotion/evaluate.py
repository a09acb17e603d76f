"""One side of a promotion comparison: an adapter (or the base model) evaluated greedily on the `[promotion]` slice.

An adapter runs in its role (`adapters.role`: the policy's, or the reader's only). Results go to
`<home>/promotion/<key>.jsonl`, where the key hashes what decides them: the adapter's weights and role (the
registry's sha256; the base model's id for the base), the data file's bytes, the slice, and every setting an
episode reads (env, retrieval, policy, answer, reward, weights, judge; a setting naming a file, such as the ranker's
weights, by the file's bytes). So the live adapter, evaluated when it was a
candidate, is not evaluated again, and a killed evaluation resumes where it stopped (`evaluate(..., resume=True)`).
Each question is also stored as an episode (`EvalRecorder`, run `promotion-<key>`), so a report links to traces;
`<key>.episodes.json` keeps their ids for the next report that reuses the results.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from evorag_core.adapters.role import POLICY, applied
from evorag_core.checksum import sha256_file
from evorag_core.config import REPO_ROOT, Config
from evorag_core.errors import ConfigError

if TYPE_CHECKING:
    from evorag_core.methods.base import QuestionResult
    from evorag_core.store import Adapter, Store
    from evorag_core.types import Dataset

__all__ = ["Side", "SideResults", "promotion_data", "slice_questions", "evaluate_side", "SETTING_SECTIONS"]

log = logging.getLogger(__name__)

SETTING_SECTIONS = ("env", "retrieval", "policy", "answer", "reward", "weights", "judge")
OnResult = Callable[["QuestionResult", list["QuestionResult"]], None]


@dataclass(frozen=True)
class Side:
    """What is evaluated: a registered adapter (its row) or the base model (adapter None)."""

    adapter: Adapter | None
    base_model_id: str

    @property
    def label(self) -> str:
        return self.adapter.name if self.adapter is not None else "base"

    @property
    def weights_key(self) -> str:
        """What the side's weights are: the base model, or an adapter's checksum in its role (a reader adapter's
        answers differ from the same weights as the policy's, so the role is part of the cache key)."""
        if self.adapter is None:
            return f"base:{self.base_model_id}"
        weights = self.adapter.checksum or self.adapter.path
        return f"adapter:{weights}" if self.adapter.role == POLICY else f"{self.adapter.role}:{weights}"

    def applied(self, cfg: Config) -> tuple[Config, str | None]:
        """The config and the policy's adapter folder that run this side (`adapters.role.applied`)."""
        if self.adapter is None:
            return cfg, None
        return applied(cfg, self.adapter.path, self.adapter.role)


@dataclass(frozen=True)
class SideResults:
    side: str  # the label: adapter name or "base"
    results: tuple[QuestionResult, ...]
    episodes: dict[str, int]  # question id -> stored episode (the trace); missing where it was not stored
    seconds: float
    cached: int  # how many results came from an earlier evaluation


def promotion_data(cfg: Config) -> Path:
    """The dev data file of `[promotion] data` (relative: to the repository); ConfigError if it is not a file."""
    path = Path(cfg.promotion.data).expanduser()
    path = path if path.is_absolute() else REPO_ROOT / path
    if not path.is_file():
        raise ConfigError(f"promotion.data: no data file at {path}; name the held-out dev file the gate evaluates on")
    return path


def slice_questions(cfg: Config, dataset: Dataset) -> list:
    start, stop = cfg.promotion.question_slice
    questions = list(dataset.questions[start:stop])
    if not questions:
        raise ConfigError(f"promotion.questions {cfg.promotion.questions!r} selects no question of "
                          f"{dataset.path} ({len(dataset.questions)} questions)")
    return questions


def _content(value: Any) -> Any:
    """A setting that names a file (a ranker's weights) or an adapter folder stands for its contents: a file refit
    at the same path is another setting, the same file at another path is not."""
    if not isinstance(value, str) or not value:
        return value
    path = Path(value).expanduser()
    if path.is_file():
        return f"file:{sha256_file(path)}"
    if path.is_dir():
        from evorag_core.adapters.files import META_FILE, read_adapter_meta

        if (path / META_FILE).is_file():
            return f"adapter:{read_adapter_meta(path).get('sha256')}"
    return value


def _key(cfg: Config, side: Side, data: Path) -> str:
    setting = {name: {k: _content(v) for k, v in asdict(getattr(cfg, name)).items()} for name in SETTING_SECTIONS}
    setting["policy"] = {k: v for k, v in setting["policy"].items() if k not in ("threads", "seed")}
    if not cfg.answer.ranker_path:  # the packaged ranker: its bytes, which a new version may change
        from importlib import resources

        from evorag_core.reader.ranker import DEFAULT_RANKER

        packaged = resources.files("evorag_core.reader").joinpath(DEFAULT_RANKER).read_bytes()
        setting["answer"]["ranker_path"] = f"packaged:{hashlib.sha256(packaged).hexdigest()}"
    raw = json.dumps({"weights": side.weights_key, "data": sha256_file(data), "questions": cfg.promotion.questions,
                      "method": cfg.promotion.method, "setting": setting}, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


def _method(cfg: Config, home: Path, runtime: Any, side: Side) -> Any:
    from evorag_core.adapters.registry import verify_registered
    from evorag_core.methods.registry import MethodOptions, build_method

    if side.adapter is None:
        return build_method(cfg.promotion.method, runtime, MethodOptions())
    verify_registered(side.adapter, side.base_model_id)  # the registry's checksum, before any weight is read
    return build_method(cfg.promotion.method, runtime, MethodOptions(adapter=side.applied(cfg)[1]))


def evaluate_side(store: Store, cfg: Config, home: Path, side: Side, *, on_result: OnResult | None = None,
                  workers: int | None = None) -> SideResults:
    """Greedy results of `side` on the slice (resumed from its cache file); `on_result(result, results so far)`
    after each question (raise there to stop: the finished ones stay cached). `workers` > 1: a process pool."""
    import time

    from evorag_core.data.datasets import load_dataset
    from evorag_core.evaluation.runner import evaluate, load_results
    from evorag_core.evaluation.traces import EvalRecorder

    data = promotion_data(cfg)
    dataset = load_dataset(data)
    questions = slice_questions(cfg, dataset)
    key = _key(cfg, side, data)
    out = Path(home) / "promotion" / f"{key}.jsonl"
    ids_path = out.with_suffix(".episodes.json")
    episodes: dict[str, int] = json.loads(ids_path.read_text()) if ids_path.is_file() else {}
    cached = len({r.question_id for r in load_results(out)} & {q.id for q in questions}) if out.is_file() else 0
    recorder = EvalRecorder(store, method=cfg.promotion.method, label=side.label, run=f"promotion-{key}",
                            data_path=str(data), stage=cfg.reward.stage, schedule=cfg.reward.schedule,
                            adapter=side.adapter.name if side.adapter is not None else None)

    def each(result: QuestionResult, results: list[QuestionResult]) -> None:
        recorder(result)
        if result.question_id in recorder.episode_ids:
            episodes[result.question_id] = recorder.episode_ids[result.question_id]
            ids_path.write_text(json.dumps(episodes))
        if on_result is not None:
            on_result(result, results)

    workers = workers or cfg.promotion.workers
    started = time.perf_counter()
    if cached == len(questions):
        results = [r for r in load_results(out) if r.question_id in {q.id for q in questions}]
    elif workers > 1:
        from evorag_core.evaluation.pool import EvalPool, EvalSpec
        from evorag_core.methods.registry import MethodOptions

        run_cfg, folder = side.applied(cfg)
        if side.adapter is not None:
            from evorag_core.adapters.registry import verify_registered

            verify_registered(side.adapter, side.base_model_id)
        spec = EvalSpec(run_cfg, str(home), str(data), method=cfg.promotion.method,
                        options=MethodOptions(adapter=folder))  # env.corpus_from: the Runtime pools it
        with EvalPool(spec, workers) as pool:
            _, results = evaluate(_Named(side.label), questions, out_path=out, resume=True, on_result=each,
                                  run=pool.runner(None))
    else:
        from evorag_core.runtime import Runtime

        method = _method(cfg, home, Runtime(side.applied(cfg)[0], Path(home), dataset), side)
        _, results = evaluate(method, questions, out_path=out, resume=True, on_result=each)
    log.info("promotion: %s evaluated on %d questions of %s (%d from an earlier evaluation)", side.label,
             len(results), data.name, cached)
    return SideResults(side.label, tuple(results), episodes, time.perf_counter() - started, cached)


class _Named:
    """`evaluate`'s method when a pool runs the questions: only its name and label are read."""

    def __init__(self, label: str):
        self.name, self.label = "promotion", label

    def run_question(self, question: Any) -> Any:  # pragma: no cover - the pool's runner runs every question
        raise RuntimeError("the pool runs the questions")
