"""Offline training of the DynaKrag controller from executed transitions (paper Eq. 1).

For each training question and each of `train_rollouts` rollouts, starting from s_0: every valid action of the
current state is executed (stop_answer needs no execution) and labelled
    v(s, a) = SR(s') - SR(s)   for retrieve_more, gap_query, rewrite_query, bridge_entity_expand
    v(s, a) = 1[SR(s) = 1]     for sufficiency_check
    v(s, a) = SR(s)            for stop_answer
where SR is the support recall of the state's documents against the question's gold passages. The rollout then
continues along one executed non-stop action drawn uniformly (seeded), until only stop_answer is valid. Each
visited state also gives a continuation example, the gain of continuing to the end of the rollout,
    g(s) = U(s_final) - U(s),
with U set by `continuation_target`: "answer" (default) = token F1 of the generator's direct answer from the
state's documents against the gold answers - the paper trains the continuation model "to estimate the answer
utility of continuing" - or "support" = SR(s). The answer is the one `EvidenceLM.answer` gives without
compression (compression is outside Eq. 1's target too), so U costs one LM call per distinct evidence set.
Gold passages and answers are used for these targets only; the features come from `features` and never see them.
LM judgments, gaps and answers are memoised per (question, evidence) within a question (both rollouts share s_1).
"""
from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from evorag_core.config import CONTINUATION_TARGETS, REPO_ROOT, Config, DynaKragConfig
from evorag_core.errors import ConfigError
from evorag_core.types import Dataset, Passage, Question
from evorag_core.methods.dynakrag.controller import ValueModels, make_forest, model_folder, save_models
from evorag_core.methods.dynakrag.features import action_features, state_features
from evorag_core.methods.dynakrag.lm import EvidenceLM, Usage
from evorag_core.methods.base import score
from evorag_core.methods.dynakrag.method import make_context_factory
from evorag_core.methods.dynakrag.ops import OpContext, execute, final_context
from evorag_core.methods.dynakrag.state import ACQUISITION, SCORED, EvidenceState, initial_state
from evorag_core.methods.dynakrag.validity import valid_actions

if TYPE_CHECKING:
    from evorag_core.lm.base import PolicyBackend
    from evorag_core.runtime import Runtime

__all__ = ["Transition", "Prefix", "state_support_recall", "target", "check_continuation_target",
           "continuation_utility", "explore_question", "collect", "fit_models", "fit_dynakrag", "save_dynakrag",
           "train_dynakrag", "train_command"]


@dataclass(frozen=True)
class Transition:
    question_id: str
    rollout: int
    step: int
    action: str
    features: tuple[float, ...]
    target: float
    sr_before: float
    sr_after: float


@dataclass(frozen=True)
class Prefix:
    question_id: str
    features: tuple[float, ...]
    target: float  # U(final) - U(s), U per `continuation_target`


def state_support_recall(state: EvidenceState, gold: frozenset[str]) -> float:
    """SR(s): share of the gold passages among the state's documents (gold must be non-empty)."""
    return len(gold & set(state.pids)) / len(gold)


def target(action: str, sr_before: float, sr_after: float) -> float:
    """Eq. 1 of the paper."""
    if action in ACQUISITION:
        return sr_after - sr_before
    if action == "sufficiency_check":
        return float(sr_before >= 1.0)
    if action == "stop_answer":
        return sr_before
    raise ValueError(f"no training target for {action!r}")


class _MemoLM:
    """EvidenceLM with judge / missing_info / direct answers memoised by (job, question, evidence pids); a memo hit
    costs no call. `answer_calls` counts the answers actually generated."""

    def __init__(self, lm: EvidenceLM):
        self.lm, self.cfg = lm, lm.cfg
        self._memo: dict[tuple, tuple] = {}
        self.answer_calls = 0

    def _call(self, job: str, question: str, passages: Sequence[Passage], run: Callable[[], tuple]) -> tuple:
        """`run()` returns (*values, usage); a memo hit returns the same values with an empty Usage."""
        key = (job, question, tuple(p.pid for p in passages))
        if key not in self._memo:
            *values, usage = run()
            self._memo[key] = tuple(values)
            return (*values, usage)
        return (*self._memo[key], Usage())

    def judge(self, question: str, passages: Sequence[Passage]) -> tuple[bool, float, Usage]:
        return self._call("judge", question, passages, lambda: self.lm.judge(question, passages))

    def missing_info(self, question: str, passages: Sequence[Passage]) -> tuple[str, Usage]:
        return self._call("missing", question, passages, lambda: self.lm.missing_info(question, passages))

    def answer(self, question: str, passages: Sequence[Passage], snippets: Sequence[str] | None) -> tuple[str, Usage]:
        if snippets:
            return self.lm.answer(question, passages, snippets)

        def run() -> tuple[str, Usage]:
            self.answer_calls += 1
            return self.lm.answer(question, passages, None)

        return self._call("answer", question, passages, run)


def check_continuation_target(cfg: DynaKragConfig) -> str:
    if cfg.continuation_target not in CONTINUATION_TARGETS:
        raise ConfigError(f"dynakrag.continuation_target must be one of {', '.join(CONTINUATION_TARGETS)}, "
                          f"got {cfg.continuation_target!r}")
    return cfg.continuation_target


def continuation_utility(question: Question, ctx: OpContext, gold: frozenset[str]) -> Callable[[EvidenceState], float]:
    """U(s) of the continuation target (module docstring); gold answers and passages are read here only."""
    kind = check_continuation_target(ctx.cfg)
    if kind == "support":
        return lambda state: state_support_recall(state, gold)
    if ctx.lm is None:
        raise ConfigError("dynakrag.continuation_target = 'answer' needs the generator to answer (OpContext.lm)")

    def answer_f1(state: EvidenceState) -> float:
        text, _ = ctx.lm.answer(question.question, final_context(state, ctx.cfg), None)
        return score(question, text)[1]

    return answer_f1


def _rng(seed: int, qid: str, rollout: int) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(f"{seed}\x00{qid}\x00{rollout}".encode()).digest()[:8], "big"))


def explore_question(qid: str, question: str, gold: frozenset[str], ctx: OpContext, rollout: int,
                     utility: Callable[[EvidenceState], float] | None = None
                     ) -> tuple[list[Transition], list[Prefix], EvidenceState]:
    """One exploration rollout (see the module docstring); returns its transitions, prefixes and final state.
    `utility`: U(s) for the continuation targets (default SR(s); see `continuation_utility`)."""
    cfg, rng = ctx.cfg, _rng(ctx.cfg.seed, qid, rollout)
    utility = utility or (lambda s: state_support_recall(s, gold))
    state, transitions, visited = initial_state(question), [], []
    while True:
        valid = [a for a in valid_actions(state, cfg) if a in SCORED]
        base, sr = state_features(state, cfg), state_support_recall(state, gold)
        visited.append((base, utility(state)))
        successors: list[EvidenceState] = []
        for action in valid:
            nxt = state if action == "stop_answer" else execute(state, action, ctx)
            sr_after = state_support_recall(nxt, gold)
            transitions.append(Transition(qid, rollout, state.steps, action,
                                          tuple(action_features(state, action, cfg, base)),
                                          target(action, sr, sr_after), sr, sr_after))
            if action != "stop_answer":
                successors.append(nxt)
        if not successors:
            break
        state = rng.choice(successors)
    final = visited[-1][1]  # the loop ends on the final state, already visited
    prefixes = [Prefix(qid, tuple(f), final - u) for f, u in visited]
    return transitions, prefixes, state


def collect(questions: Sequence[Question], context_for: Callable[[Question], OpContext],
            gold_for: Callable[[Question], frozenset[str]], cfg: DynaKragConfig,
            on_progress: Callable[[int, int], None] | None = None,
            on_question: Callable[[dict[str, float]], None] | None = None
            ) -> tuple[list[Transition], list[Prefix], dict]:
    """Explore every question (`train_rollouts` rollouts each). After each question `on_progress(i, n)` and
    `on_question({question, questions, transitions, lm_calls, skipped, final_support})`: the running totals, and
    the mean support recall of that question's rollouts at their end (absent for a question without gold passages,
    which is skipped)."""
    transitions: list[Transition] = []
    prefixes: list[Prefix] = []
    lm_calls = answer_calls = skipped = 0
    for i, q in enumerate(questions, start=1):
        gold = gold_for(q)
        if not gold:
            skipped += 1
            _report(on_progress, on_question, i, len(questions), transitions, [], lm_calls, skipped)
            continue
        ctx = context_for(q)
        memo = _MemoLM(ctx.lm) if ctx.lm is not None else None
        ctx = replace(ctx, lm=memo) if memo is not None else ctx
        utility = continuation_utility(q, ctx, gold)
        finals = []
        for r in range(cfg.train_rollouts):
            t, p, final = explore_question(q.id, q.question, gold, ctx, r, utility)
            transitions += t
            prefixes += p
            lm_calls += final.lm_calls
            finals.append(state_support_recall(final, gold))
        answer_calls += memo.answer_calls if memo is not None else 0
        _report(on_progress, on_question, i, len(questions), transitions, finals, lm_calls, skipped)
    return transitions, prefixes, {"questions_without_gold": skipped, "lm_calls": lm_calls,
                                   "continuation_answer_calls": answer_calls}


def _report(on_progress: Callable[[int, int], None] | None, on_question: Callable[[dict[str, float]], None] | None,
            i: int, n: int, transitions: Sequence[Transition], finals: Sequence[float], lm_calls: int,
            skipped: int) -> None:
    if on_progress is not None:
        on_progress(i, n)
    if on_question is not None:
        stats = {"question": float(i), "questions": float(n), "transitions": float(len(transitions)),
                 "lm_calls": float(lm_calls), "skipped": float(skipped)}
        on_question({**stats, "final_support": sum(finals) / len(finals)} if finals else stats)


def _xy(rows) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray([r.features for r in rows], dtype=np.float64), np.asarray([r.target for r in rows])


def _regression(model, rows) -> dict[str, float]:
    if not rows:
        return {}
    x, y = _xy(rows)
    pred = model.predict(x)
    ss = float(np.sum((y - y.mean()) ** 2))
    return {"n": len(rows), "mae": float(np.mean(np.abs(pred - y))),
            "r2": 1.0 - float(np.sum((pred - y) ** 2)) / ss if ss > 0 else 0.0}


def _selection(model, rows: Sequence[Transition]) -> dict[str, float]:
    """Per held-out state: does argmax v-hat pick an action whose target is maximal? And the mean target of the
    picked action versus the mean over valid actions (what a uniform choice gets in expectation)."""
    states: dict[tuple, list[Transition]] = {}
    for r in rows:
        states.setdefault((r.question_id, r.rollout, r.step), []).append(r)
    hits, picked, uniform = [], [], []
    for group in states.values():
        preds = model.predict(np.asarray([g.features for g in group]))
        chosen = group[int(np.argmax(preds))]
        best = max(g.target for g in group)
        hits.append(float(chosen.target >= best - 1e-12))
        picked.append(chosen.target)
        uniform.append(float(np.mean([g.target for g in group])))
    if not hits:
        return {}
    return {"states": len(hits), "best_action_rate": float(np.mean(hits)),
            "picked_target": float(np.mean(picked)), "uniform_target": float(np.mean(uniform))}


def fit_models(transitions: Sequence[Transition], prefixes: Sequence[Prefix], cfg: DynaKragConfig,
               holdout: float = 0.2) -> ValueModels:
    """Held-out metrics on a question-level split, then the saved models refit on everything."""
    if not transitions:
        raise ValueError("no transitions to train on (do the questions have gold passages?)")
    qids = sorted({t.question_id for t in transitions})
    random.Random(cfg.seed).shuffle(qids)
    held = set(qids[: int(round(holdout * len(qids)))]) if len(qids) >= 5 else set()
    metrics: dict[str, Any] = {"transitions": len(transitions), "prefixes": len(prefixes), "questions": len(qids),
                               "holdout_questions": len(held)}
    metrics["per_action"] = {a: {"n": sum(1 for t in transitions if t.action == a),
                                 "mean_target": float(np.mean([t.target for t in transitions if t.action == a] or [0]))}
                             for a in SCORED}
    gains = np.asarray([p.target for p in prefixes] or [0.0])
    metrics["continuation_targets"] = {"target": cfg.continuation_target, "mean": float(gains.mean()),
                                       "above_threshold": float(np.mean(gains > cfg.continuation_threshold)),
                                       "below_zero": float(np.mean(gains < 0))}
    if held:
        train = [t for t in transitions if t.question_id not in held]
        test = [t for t in transitions if t.question_id in held]
        probe = make_forest(cfg).fit(*_xy(train))
        metrics["holdout_value"] = {**_regression(probe, test), **_selection(probe, test)}
        ptrain = [p for p in prefixes if p.question_id not in held]
        ptest = [p for p in prefixes if p.question_id in held]
        if ptrain and ptest:
            metrics["holdout_continuation"] = _regression(make_forest(cfg).fit(*_xy(ptrain)), ptest)
    value = make_forest(cfg).fit(*_xy(transitions))
    metrics["train_value"] = _regression(value, transitions)
    continuation = make_forest(cfg).fit(*_xy(prefixes)) if prefixes else None
    return ValueModels(value, continuation, metrics)


def fit_dynakrag(dataset: Dataset, runtime: Runtime, cfg: DynaKragConfig, *,
                 backend: PolicyBackend | None = None, holdout: float = 0.2,
                 on_progress: Callable[[int, int], None] | None = None,
                 on_question: Callable[[dict[str, float]], None] | None = None
                 ) -> tuple[ValueModels, list[Transition]]:
    """Explore `dataset.questions` (the training split) with `runtime`'s corpus and retrievers and fit the
    action-value and continuation forests; returns the models (with their training metrics) and the transitions.
    `backend`: the generator (default: the backend `runtime.cfg.policy` names). Nothing is written."""
    start = time.perf_counter()
    check_continuation_target(cfg)  # before the generator loads
    if backend is None:
        from evorag_core.lm.backends import policy_backend

        backend = policy_backend(runtime.cfg.policy, runtime.home)
    context_for = make_context_factory(runtime, cfg, EvidenceLM(backend, cfg, runtime.cfg.answer))
    transitions, prefixes, info = collect(dataset.questions, context_for, lambda q: runtime.corpus_for(q).gold_for(q),
                                          cfg, on_progress, on_question)
    models = fit_models(transitions, prefixes, cfg, holdout)
    models.metrics.update(info, seconds=time.perf_counter() - start, dataset=dataset.name)
    return models, transitions


def save_dynakrag(models: ValueModels, transitions: Sequence[Transition], cfg: DynaKragConfig, out_dir: Path) -> Path:
    """Write the controller folder (joblib + controller.json, transitions.jsonl) to `out_dir`; returns it."""
    out = save_models(models, cfg, Path(out_dir))
    with (out / "transitions.jsonl").open("w", encoding="utf-8") as fh:
        for t in transitions:
            fh.write(json.dumps(asdict(t)) + "\n")
    return out


def train_dynakrag(dataset: Dataset, runtime: Runtime, cfg: DynaKragConfig, out_dir: Path, *,
                   backend: PolicyBackend | None = None,
                   holdout: float = 0.2, on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """`fit_dynakrag` then `save_dynakrag` to `out_dir`; returns the training metrics."""
    models, transitions = fit_dynakrag(dataset, runtime, cfg, backend=backend, holdout=holdout,
                                       on_progress=on_progress)
    save_dynakrag(models, transitions, cfg, out_dir)
    return models.metrics


def train_command(data: Path | None, cfg: Config, home: Path, *, as_json: bool = False) -> int:
    """`evorag train --objective dynakrag [--data FILE]`: explore every question of the file (default: the demo set),
    fit and save the controller in `home/<dynakrag.model_dir>`, print the metrics. Runs in this process (the
    forests take seconds; the LM calls of the sufficiency checks dominate)."""
    import sys

    from evorag_core.data.datasets import load_dataset
    from evorag_core.runtime import Runtime

    dataset = load_dataset(data or REPO_ROOT / "data" / "demo" / "demo.jsonl")
    out = model_folder(cfg.dynakrag, home)

    def progress(i: int, n: int) -> None:
        sys.stderr.write(f"\rdynakrag: explored {i}/{n} questions")
        sys.stderr.write("\n" if i == n else "")
        sys.stderr.flush()

    metrics = train_dynakrag(dataset, Runtime(cfg, home, dataset), cfg.dynakrag, out, on_progress=progress)
    if as_json:
        print(json.dumps({"objective": "dynakrag", "model_dir": str(out), "metrics": metrics}, default=str))
    else:
        held = metrics.get("holdout_value", {})
        print(f"dynakrag controller saved to {out}: {metrics['transitions']} transitions from {metrics['questions']} "
              f"questions; held-out R2 {held.get('r2', float('nan')):.3f}, "
              f"best-action rate {held.get('best_action_rate', float('nan')):.3f}")
    return 0
