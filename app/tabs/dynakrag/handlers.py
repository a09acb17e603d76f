"""DynaKrag handler: one question stepped through the evidence controller (`evorag_core.methods.dynakrag`), the
controller's next decision shown before it runs, and a controller trained from the page.

- `start` builds s_0 for a question of the data file (its gold answers and gold passages grade the result; the
  controller never sees them) or a typed one (no gold: not graded), and asks the controller what it would do first.
- `advance` runs operations one at a time, each in a worker thread under the policy model's lock (base weights),
  and yields an `Update` every `poll` seconds: the status line, and the session after every finished operation.
  A step is one controller decision and its operation (`control_step`); after stop_answer the next step is the
  terminal compression and the answer (`finish_episode`). The Stop flag is read at every tick: the operation in
  progress is interrupted before its next generated token and thrown away, so the session is the one of the last
  finished operation (a state a sequence of Steps reaches) and nothing is stored. Each operation passes the test
  hold point `dynakrag:<operation>` as it starts (`evorag_core.test_hooks`: off unless a test names it).
- The controller: the trained one in `home/<dynakrag.model_dir>` ("learned"), or the uniform-valid ablation
  ("uniform": a seeded uniform choice among the valid operations), which needs no training.
- `train_controller` queues the `dynakrag` objective's worker round through the Training tab's own launch
  (`app.common.rounds.launch_job`); `round_html` is its progress, `cancel_training` its cancel.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Iterator

from evorag_core.errors import ModelLoadError
from evorag_core.lm.base import interruptible
from evorag_core.methods.dynakrag.controller import (Controller, Decision, LearnedController, UniformController,
                                                     load_models, model_folder)
from evorag_core.methods.dynakrag.lm import EvidenceLM
from evorag_core.methods.dynakrag.method import StepTrace, control_step, finish_episode, make_context_factory
from evorag_core.methods.dynakrag.ops import OpContext
from evorag_core.methods.dynakrag.state import EvidenceState, initial_state
from evorag_core.methods.dynakrag.validity import valid_actions
from evorag_core.metrics import grade as grade_answer
from evorag_core import test_hooks

from app.common import round_progress, views
from app.common.handlers import check_typed, in_thread
from app.common.policies import BASE
from app.common.rounds import Launch, cancel_round, launch_job
from app.common.services import Services

__all__ = ["LEARNED", "UNIFORM", "CONTROLLERS", "ControllerStatus", "DynaKragSession", "Update", "controller_status",
           "start", "next_decision", "advance", "grade", "train_controller", "round_html", "cancel_training"]

LEARNED, UNIFORM = "learned", "uniform"
CONTROLLERS = (LEARNED, UNIFORM)


@dataclass(frozen=True)
class ControllerStatus:
    trained: bool
    folder: str
    text: str  # one line: what is installed (or that nothing is)


@dataclass(frozen=True)
class DynaKragSession:
    data_path: str
    question_id: str  # the picked question (its corpus, also for a typed question)
    question: str
    typed: bool
    gold_answers: tuple[str, ...]
    gold_pids: frozenset[str]
    controller: str  # LEARNED | UNIFORM
    state: EvidenceState
    steps: tuple[StepTrace, ...] = ()
    stop_reason: str | None = None  # set once stop_answer ran
    answer: str | None = None  # set once the episode is finished
    decision: Decision | None = None  # what the controller picks next (None once acquisition has ended)

    @property
    def finished(self) -> bool:
        return self.answer is not None


@dataclass(frozen=True)
class Update:
    status: str  # HTML status line
    session: DynaKragSession | None  # the session after a finished operation; None: unchanged
    stopped: bool = False


_MODELS: dict[tuple[str, float], object] = {}  # (folder, controller.json mtime) -> loaded ValueModels
_MODELS_LOCK = threading.Lock()


def controller_status(svc: Services) -> ControllerStatus:
    """Whether a trained controller is installed in `home/<dynakrag.model_dir>`, and what it was trained on."""
    folder = model_folder(svc.cfg.dynakrag, svc.home)
    meta_path = folder / "controller.json"
    if not meta_path.is_file() or not (folder / "value.joblib").is_file():
        return ControllerStatus(False, str(folder), f"No trained DynaKrag controller in {folder}.")
    try:
        metrics = json.loads(meta_path.read_text(encoding="utf-8")).get("metrics", {})
    except (OSError, json.JSONDecodeError):
        metrics = {}
    parts = [f"Trained controller in {folder}"]
    if metrics.get("round_id") is not None:
        parts.append(f"round #{metrics['round_id']}")
    if metrics.get("dataset"):
        parts.append(f"trained on {metrics['dataset']}")
    if metrics.get("transitions") is not None:
        parts.append(f"{metrics['transitions']} transitions")
    return ControllerStatus(True, str(folder), ", ".join(parts) + ".")


def _controller(svc: Services, name: str) -> Controller:
    cfg = svc.cfg.dynakrag
    if name == UNIFORM:
        return UniformController(cfg.seed)
    if name != LEARNED:
        raise ValueError(f"controller must be one of {', '.join(CONTROLLERS)}, got {name!r}")
    folder = model_folder(cfg, svc.home)
    meta = folder / "controller.json"
    if not meta.is_file():
        raise ModelLoadError(f"no trained DynaKrag controller in {folder}: train one on this data file (a worker "
                             "round) or pick the uniform-valid controller")
    key = (str(folder), meta.stat().st_mtime)
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS.clear()
            _MODELS[key] = load_models(folder)
        models = _MODELS[key]
    return LearnedController(models, cfg)


def next_decision(svc: Services, session: DynaKragSession) -> Decision | None:
    """What the controller picks at the session's state (None once acquisition has ended)."""
    state = session.state
    if state.terminated:
        return None
    return _controller(svc, session.controller).choose(state, valid_actions(state, svc.cfg.dynakrag))


def start(svc: Services, data_path: str | None, question_id: str | None, typed_question: str = "",
          controller: str = UNIFORM) -> DynaKragSession:
    """s_0 for the picked question, or for `typed_question` over the picked question's corpus."""
    typed = check_typed(" ".join((typed_question or "").split()), svc.cfg.studio.max_question_chars,
                        "typed question")
    if not question_id:
        raise ValueError("pick a question of the data file (a typed question is searched in its corpus)")
    rt = svc.runtime(data_path or None)
    question = rt.dataset.get(question_id)
    gold = frozenset() if typed else frozenset(rt.corpus_for(question).gold_for(question))
    session = DynaKragSession(str(data_path or ""), question.id, typed or question.question, bool(typed),
                              () if typed else tuple(question.answers), gold, controller,
                              initial_state(typed or question.question))
    return replace(session, decision=next_decision(svc, session))


def _context(svc: Services, session: DynaKragSession) -> OpContext:
    """The operations' context: the question's corpus and retrievers, the studio's policy model as generator."""
    rt = svc.runtime(session.data_path or None)
    backend, _ = svc.policies.backend_for(BASE)
    lm = EvidenceLM(backend, svc.cfg.dynakrag, svc.cfg.answer)
    return make_context_factory(rt, svc.cfg.dynakrag, lm)(rt.dataset.get(session.question_id))


def _one_step(svc: Services, session: DynaKragSession, stop: threading.Event) -> DynaKragSession:
    """The next operation (or the finish after stop_answer), under the model's lock, interruptible by `stop`."""
    ctx = _context(svc, session)
    t = len(session.steps) + 1
    with svc.policies.lock:
        if stop.is_set():
            return session
        test_hooks.hold(f"dynakrag:{_operation(session)}", stop)
        svc.policies.use(None)
        with interruptible(ctx.lm.backend, stop):
            if not session.state.terminated:
                state, trace, reason = control_step(session.state, ctx, _controller(svc, session.controller), t)
                new = replace(session, state=state, steps=session.steps + (trace,), stop_reason=reason)
                return replace(new, decision=next_decision(svc, new))
            state, trace, answer = finish_episode(session.state, ctx, t)
    steps = session.steps + ((trace,) if trace is not None else ())
    return replace(session, state=state, steps=steps, answer=answer, decision=None)


def _operation(session: DynaKragSession) -> str:
    """The next step's operation: the controller's pick, or "finish" (compression and answer) after stop_answer."""
    if session.state.terminated:
        return "finish"
    return session.decision.action if session.decision is not None else "next"


def _doing(session: DynaKragSession) -> str:
    if session.state.terminated:
        return "compress_answer_evidence and the answer" if session.state.docs else "the answer"
    return session.decision.action if session.decision is not None else "the next operation"


def advance(svc: Services, session: DynaKragSession | None, stop: threading.Event, *, to_end: bool,
            poll: float = 0.5) -> Iterator[Update]:
    """Run one operation (`to_end` False) or every operation until the answer; see the module docstring."""
    if session is None:
        raise ValueError("no episode yet: pick a question and press Reset (or Step)")
    if session.finished:
        raise ValueError("the episode is finished; press Reset to start it again")
    loading = svc.policies.pending_load(BASE)
    done_ops = 0
    started = time.perf_counter()
    while not session.finished:
        doing = _doing(session)
        done, box = in_thread(lambda s=session: _one_step(svc, s, stop), "dynakrag-step")
        began = time.perf_counter()
        while not done.wait(poll):
            if stop.is_set():
                break
            wait = f"{loading} " if loading else ""
            yield Update(views.message_html(f"Step {len(session.steps) + 1}: {wait}running {doing}… "
                                            f"{time.perf_counter() - began:.0f} s", "info"), None)
        if stop.is_set():
            kept = "the state after the last finished step is shown" if done_ops or session.steps else \
                "nothing was run"
            yield Update(views.message_html(f"Stopped: {doing} was interrupted and discarded; {kept}.", "warn"),
                         session, stopped=True)
            return
        if "error" in box:
            raise box["error"]
        session, loading, done_ops = box["value"], "", done_ops + 1
        if session.finished:
            note = f"Finished in {time.perf_counter() - started:.1f} s: answer {session.answer!r}."
        else:
            note = f"Step {len(session.steps)}: {session.steps[-1].action} done."
        yield Update(views.message_html(note, "ok" if session.finished else "info"), session)
        if not to_end:
            return


def grade(session: DynaKragSession) -> tuple[float, float] | None:
    """(EM, F1) of the answer against the gold answers; None before the answer or without gold (typed)."""
    if session.answer is None:
        return None
    graded = grade_answer(session.answer, False, session.gold_answers)
    return (graded.em, graded.f1) if graded is not None else None


def train_controller(svc: Services, data_path: str | None, questions: int | None) -> Launch:
    """Queue the `dynakrag` worker round on `data_path` (the Training tab's launch, with its checks and caps)."""
    return launch_job(svc, "dynakrag", {"data": data_path or str(svc.default_data),
                                           "dynakrag.questions": int(questions or 0)})


def round_html(svc: Services, round_id: int | None, now: datetime | None = None) -> tuple[str, bool]:
    """(the round's progress box, whether it has ended); ("", True) for no round."""
    if round_id is None:
        return "", True
    r = svc.store().get_round(int(round_id))
    html = round_progress.progress_html(r, now or datetime.now(timezone.utc))
    if r.error:
        html += views.message_html(r.error, "error")
    return html, r.status in ("succeeded", "failed", "cancelled")


def cancel_training(svc: Services, round_id: int | None) -> str:
    if round_id is None:
        raise ValueError("no training round was launched from this tab")
    return cancel_round(svc, int(round_id))
