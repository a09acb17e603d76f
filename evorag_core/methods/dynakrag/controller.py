"""Controllers that pick the next operation among the valid ones.

- `LearnedController`: a random-forest action-value model v(s, a) (300 trees, min leaf 8, seed 13), selection
  argmax_a v(s, a) - lambda c(s, a); ties go to the earlier action in `SCORED` order. An optional continuation
  model u(s) (a random forest on state features, trained to predict the gain of continuing: answer F1 or support
  recall, per `continuation_target`; see `training`) removes stop_answer from the candidates when
  u(s) > `continuation_threshold` and something else is valid.
- `UniformController`: the uniform-valid ablation: a seeded uniform choice among the valid actions (no
  continuation). The draw depends only on (seed, question, step), not on the order questions are run in.
`save_models` / `load_models` write and read `value.joblib`, `continuation.joblib` and `controller.json`
(settings, feature names, training metrics); a model saved with other feature columns is refused.
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

import numpy as np

from evorag_core.config import DynaKragConfig
from evorag_core.errors import ModelLoadError
from evorag_core.methods.dynakrag.features import FEATURE_NAMES, STATE_FEATURES, action_matrix, state_features
from evorag_core.methods.dynakrag.ops import estimated_cost
from evorag_core.methods.dynakrag.state import EvidenceState

__all__ = ["Decision", "Controller", "ValueModels", "LearnedController", "UniformController", "make_forest",
           "save_models", "load_models", "model_folder", "MODEL_FILES"]

MODEL_FILES = ("value.joblib", "continuation.joblib", "controller.json")


@dataclass(frozen=True)
class Decision:
    action: str
    scores: Mapping[str, float]  # per scored valid action: v(s,a) - lambda c(s,a) (uniform: 1/|A(s)|)
    continuation: float | None = None  # u(s) when the continuation model was consulted
    stop_suppressed: bool = False


class Controller(Protocol):
    name: str

    def choose(self, state: EvidenceState, valid: tuple[str, ...]) -> Decision: ...


def make_forest(cfg: DynaKragConfig):
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_estimators=cfg.n_estimators, min_samples_leaf=cfg.min_samples_leaf,
                                 random_state=cfg.seed, n_jobs=1)


@dataclass
class ValueModels:
    value: Any  # fitted regressor over FEATURE_NAMES
    continuation: Any | None = None  # fitted regressor over STATE_FEATURES
    metrics: dict = field(default_factory=dict)


class LearnedController:
    name = "learned"

    def __init__(self, models: ValueModels, cfg: DynaKragConfig):
        self.models, self.cfg = models, cfg

    def choose(self, state: EvidenceState, valid: tuple[str, ...]) -> Decision:
        candidates = tuple(a for a in valid if a != "compress_answer_evidence")
        if not candidates:
            raise ValueError("no valid action to choose from")
        u, suppressed = None, False
        if self.cfg.continuation and self.models.continuation is not None and "stop_answer" in candidates \
                and len(candidates) > 1:
            u = float(self.models.continuation.predict(np.asarray([state_features(state, self.cfg)]))[0])
            if u > self.cfg.continuation_threshold:
                candidates, suppressed = tuple(a for a in candidates if a != "stop_answer"), True
        values = self.models.value.predict(action_matrix(state, candidates, self.cfg))
        scores = {a: float(v) - self.cfg.cost_weight * estimated_cost(state, a, self.cfg)
                  for a, v in zip(candidates, values)}
        best = max(candidates, key=lambda a: scores[a])  # first maximum in SCORED order
        return Decision(best, scores, u, suppressed)


def _draw_seed(seed: int, question: str, step: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\x00{question}\x00{step}".encode()).digest()[:8], "big")


class UniformController:
    name = "uniform"

    def __init__(self, seed: int = 13):
        self.seed = seed

    def choose(self, state: EvidenceState, valid: tuple[str, ...]) -> Decision:
        candidates = tuple(a for a in valid if a != "compress_answer_evidence")
        if not candidates:
            raise ValueError("no valid action to choose from")
        rng = random.Random(_draw_seed(self.seed, state.question, len(state.history)))
        return Decision(rng.choice(candidates), {a: 1.0 / len(candidates) for a in candidates})


def model_folder(cfg: DynaKragConfig, home: Path) -> Path:
    """Where the trained controller lives: `cfg.model_dir`, relative to the home folder unless absolute."""
    folder = Path(cfg.model_dir).expanduser()
    return folder if folder.is_absolute() else Path(home) / folder


def save_models(models: ValueModels, cfg: DynaKragConfig, out_dir: Path) -> Path:
    import joblib
    import sklearn

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    joblib.dump(models.value, out / "value.joblib")
    cont = out / "continuation.joblib"
    if models.continuation is not None:
        joblib.dump(models.continuation, cont)
    elif cont.exists():
        cont.unlink()
    meta = {"config": asdict(cfg), "feature_names": list(FEATURE_NAMES), "state_features": list(STATE_FEATURES),
            "has_continuation": models.continuation is not None, "metrics": models.metrics,
            "sklearn": sklearn.__version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (out / "controller.json").write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
    return out


def load_models(model_dir: Path) -> ValueModels:
    """Read a folder written by `save_models`; `ModelLoadError` when it is missing or its columns differ."""
    import joblib

    folder = Path(model_dir)
    meta_path = folder / "controller.json"
    if not meta_path.is_file() or not (folder / "value.joblib").is_file():
        raise ModelLoadError(f"no trained DynaKrag controller in {folder} (expected value.joblib and controller.json); "
                             "train one with train_dynakrag / `evorag train --objective dynakrag`, "
                             "or use `--set dynakrag.controller=uniform`")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{meta_path}: invalid JSON: {exc}") from None
    if tuple(meta.get("feature_names", ())) != FEATURE_NAMES:
        raise ModelLoadError(f"{folder}: the controller was trained on other features than this code computes; retrain it")
    value = joblib.load(folder / "value.joblib")
    cont = joblib.load(folder / "continuation.joblib") if meta.get("has_continuation") else None
    return ValueModels(value, cont, dict(meta.get("metrics", {})))
