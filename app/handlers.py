"""The studio's actions as plain functions: values in, values out, no Gradio. `ui.py` wires them to components.

Handlers raise the project's errors (EvoRagError subclasses, ValueError, KeyError) with readable messages; the
UI layer turns those into a message in the page.
"""
from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import plotly.graph_objects as go

from evorag_core.actions import action_to_dict
from evorag_core.episode import EpisodeRecord
from evorag_core.evaluation import compare_results, evaluate
from evorag_core.methods.base import EpisodeMethod, QuestionResult
from evorag_core.types import Passage

from . import views
from .policies import FeatureUnavailable, policy_choices
from .services import Services
from .session import EpisodeSession, EpisodeSettings

__all__ = [
    "DataInfo",
    "EpisodeView",
    "PairsView",
    "TrainingView",
    "EvalRun",
    "data_choices",
    "load_data",
    "upload_data",
    "policy_options",
    "start_episode",
    "step_episode",
    "run_steps",
    "run_to_end",
    "episode_view",
    "override_verdict",
    "sample_siblings",
    "score_siblings",
    "queue_pair",
    "pairs_view",
    "pair_fields",
    "edit_pair",
    "discard_pair",
    "restore_pair",
    "launch_round",
    "training_view",
    "activate_adapter",
    "use_base_model",
    "header_status",
    "run_eval",
    "eval_summary",
    "compare_runs",
    "eval_questions",
    "eval_method_options",
    "drill_down",
    "OBJECTIVES",
    "KL_ESTIMATORS",
]

log = logging.getLogger(__name__)

OBJECTIVES = ("dpo", "grpo", "ppo")
KL_ESTIMATORS = ("k3", "k2")


# ---------------------------------------------------------------------------------------------------------------
# Data files
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DataInfo:
    path: str
    questions: list[tuple[str, str]]  # (label, question id)
    summary: str


def data_choices(svc: Services) -> list[tuple[str, str]]:
    return svc.data_files()


def load_data(svc: Services, path: str | None) -> DataInfo:
    """Load a data file (any supported format; path typed or picked) and list its questions."""
    rt = svc.runtime(path.strip() if path else None)
    ds = rt.dataset
    questions = [(f"{q.id} · {_short(q.question, 90)}", q.id) for q in ds.questions]
    n_pass = sum(len(q.passages) for q in ds.questions)
    summary = f"{ds.name}: {len(ds.questions)} questions, {n_pass} passages ({Path(ds.path).name})"
    if n_pass == 0:
        summary += " — this file has no passages, so its questions cannot be searched here"
    return DataInfo(str(Path(ds.path).resolve()), questions, summary)


def upload_data(svc: Services, uploaded: str) -> DataInfo:
    """Keep an uploaded data file under <home>/uploads/ (Gradio's temp files are short-lived) and load it."""
    src = Path(uploaded)
    target_dir = svc.home / "uploads"
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / src.name
    shutil.copyfile(src, target)
    return load_data(svc, str(target))


def _short(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ---------------------------------------------------------------------------------------------------------------
# Episodes
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EpisodeView:
    status: str  # HTML
    steps: str  # HTML table of steps with signals, R_t and the running return
    breakdown: str  # HTML: the latest step's r, w, w·r
    passages: str  # HTML: the latest step's passages (or the active chain's)
    weights: go.Figure
    contributions: go.Figure
    verdicts: str  # HTML
    judged_steps: list[int]  # steps with a verdict, for the override picker
    candidates: str  # HTML of the sampled siblings
    candidate_choices: list[tuple[str, int]]  # for the preferred / rejected pickers
    message: str = ""  # HTML notice (store problems, what just happened)
    weights_key: tuple = ()  # equal keys: identical weight charts (the UI then leaves the chart alone)
    contributions_key: tuple = ()


def policy_options(svc: Services) -> list[tuple[str, str]]:
    """The policy dropdown: oracle, script, LM live/base, and one entry per registered adapter."""
    store = svc.store_or_none()
    names = [a.name for a in store.list_adapters()] if store is not None else []
    return policy_choices(names)


def _adapter_lookup(svc: Services) -> Callable[[str | None], Any]:
    def lookup(name: str | None):
        store = svc.store_or_none()
        if store is None:
            if name is None:
                return None
            raise FeatureUnavailable("adapters are listed in the store, which could not be opened")
        return store.active_adapter() if name is None else store.get_adapter(name)

    return lookup


def start_episode(svc: Services, settings: EpisodeSettings) -> tuple[EpisodeView, EpisodeSession]:
    """Reset: a new episode on the chosen question (or the typed one) with the chosen policy and schedule."""
    rt = svc.runtime(settings.data_path or None)
    policy = svc.policies.make(settings.policy, script=settings.script, adapter_lookup=_adapter_lookup(svc))
    session = EpisodeSession.start(settings, rt, policy, svc.store_or_none())
    return episode_view(session, "New episode started."), session


def _require(session: EpisodeSession | None) -> EpisodeSession:
    if session is None:
        raise ValueError("no episode yet: press Reset to start one")
    return session


def step_episode(session: EpisodeSession | None) -> tuple[EpisodeView, EpisodeSession]:
    session = _require(session)
    step = session.step()
    took = session.step_seconds[-1]
    return episode_view(session, f"t = {step.t}: {action_to_dict(step.action)['action']} ({took:.2f} s)"), session


def run_steps(session: EpisodeSession | None) -> Iterator[tuple[EpisodeView, EpisodeSession]]:
    """Step until the episode ends, yielding the view after every step (the page streams them)."""
    session = _require(session)
    if session.done:
        raise ValueError("the episode has ended; press Reset to start another")
    n = 0
    while not session.done:
        session.step()
        n += 1
        note = "Ran to the end" if session.done else "Running"
        yield episode_view(session, f"{note}: {n} step(s), last {session.step_seconds[-1]:.2f} s."), session


def run_to_end(session: EpisodeSession | None) -> tuple[EpisodeView, EpisodeSession]:
    out = None
    for out in run_steps(session):
        pass
    return out


def override_verdict(session: EpisodeSession | None, t: int | None, verdict: str, who: str
                     ) -> tuple[EpisodeView, EpisodeSession]:
    """Replace the judge's verdict at step t ('answerable' / 'unanswerable'); returns recomputed at once."""
    session = _require(session)
    if t is None:
        raise ValueError("choose the step whose verdict to override")
    if verdict not in ("answerable", "unanswerable"):
        raise ValueError(f"a verdict is 'answerable' or 'unanswerable', not {verdict!r}")
    step = session.override(int(t), verdict == "answerable", who.strip() or "anonymous")
    msg = f"Override stored: step {step.t} is {verdict}; ref = {step.signals['ref']:+.0f}, R_t = {step.reward:+.3f}."
    return episode_view(session, msg), session


def sample_siblings(session: EpisodeSession | None, k: int, temperature: float, seed: int
                    ) -> tuple[EpisodeView, EpisodeSession]:
    """Sample K candidate actions at the current state (LM policies only)."""
    session = _require(session)
    if session.done:
        raise ValueError("the episode has ended; siblings are sampled at a state before its end")
    if session.policy.sample is None:
        raise FeatureUnavailable("sibling candidates need a language-model policy (choose an LM policy and Reset)")
    if not 2 <= int(k) <= 16:
        raise ValueError(f"K must be between 2 and 16, got {k}")
    found = session.policy.sample(session.env.view(), int(k), float(temperature), int(seed))
    session.set_candidates(found)
    return episode_view(session, f"Sampled {len(found)} candidates at t = {session.candidates_t}."), session


def score_siblings(session: EpisodeSession | None, horizon: int = 6) -> tuple[EpisodeView, EpisodeSession]:
    """Branch returns: each candidate taken, then the policy continues for at most `horizon` steps."""
    session = _require(session)
    session.score_candidates(int(horizon))
    cut = sum(1 for c in session.candidates if c.get("branch_cut"))
    note = f" ({cut} cut at the horizon of {int(horizon)} steps)" if cut else ""
    return episode_view(session, f"Branch returns computed{note}."), session


def queue_pair(session: EpisodeSession | None, svc: Services, preferred: int | None, rejected: int | None,
               annotator: str) -> tuple[str, int]:
    """Queue a human preference pair (preferred over rejected at the current state); returns (message, pair id)."""
    session = _require(session)
    if not session.candidates:
        raise ValueError("sample candidates first")
    if preferred is None or rejected is None:
        raise ValueError("choose a preferred and a rejected candidate")
    i, j = int(preferred), int(rejected)
    n = len(session.candidates)
    if not (1 <= i <= n and 1 <= j <= n):
        raise ValueError(f"candidates are numbered 1..{n}")
    if i == j:
        raise ValueError("preferred and rejected must be different candidates")
    chosen, rejected_text = _completion(session, i - 1), _completion(session, j - 1)
    if chosen == rejected_text:
        raise ValueError("these two candidates are the same action; pick two that differ")
    a, b = session.candidates[i - 1], session.candidates[j - 1]
    margin = None
    if a.get("branch_return") is not None and b.get("branch_return") is not None:
        margin = float(a["branch_return"] - b["branch_return"])
    meta = {"episode": session.record.episode_id, "episode_db_id": session.db_id, "t": session.candidates_t,
            "question_id": session.question.id, "dataset": session.question.dataset,
            "logprobs": [a.get("logprob"), b.get("logprob")], "policy": session.policy.label}
    pair_id = svc.store().add_pair(
        _prompt(session), chosen, rejected_text, source="human", annotator=annotator.strip() or "anonymous",
        margin=margin, stage=session.record.stage, metadata=meta,
    )
    return f"Queued human pair #{pair_id}: candidate {i} preferred over {j}.", pair_id


def _prompt(session: EpisodeSession) -> str:
    """The agent prompt the candidates were sampled after (training reads exactly this text)."""
    if session.candidate_prompt:
        return session.candidate_prompt
    render = getattr(getattr(session.policy.policy, "lm", None), "prompt", None)
    if render is None:
        raise FeatureUnavailable("the policy cannot render its prompt; pairs need the LM policy")
    return render(session.env.view())


def _completion(session: EpisodeSession, index: int) -> str:
    """The candidate's completion as the policy wrote it, e.g. "SEARCH: Mirrow"."""
    cand = session.candidates[index]
    if cand.get("completion"):
        return cand["completion"]
    act = action_to_dict(session.candidate_actions[index])
    arg = act.get("query") or act.get("answer")
    return f"{act['action']}: {arg}" if arg else act["action"]


def episode_view(session: EpisodeSession | None, message: str = "") -> EpisodeView:
    if session is None:
        return EpisodeView(
            status='<div class="evo-empty">Pick a question and a policy, then press Reset.</div>',
            steps=views.steps_table(None), breakdown=views.step_breakdown(None),
            passages=views.passages_html((), (), False), weights=views.weights_figure("discovery", "time-dynamic", "full", 20, None),
            contributions=views.contributions_figure(None), verdicts=views.verdicts_html(None), judged_steps=[],
            candidates=views.candidates_html(()), candidate_choices=[], message=views.message_html(message),
        )
    rec = session.record
    last = rec.steps[-1] if rec.steps else None
    notes = session.take_notes()
    passages: tuple[Passage, ...] = session.passages(last)
    heading = f"Passages retrieved at t = {last.t}" if passages and last else ""
    if not passages:
        chain = session.env.view().passages
        passages, heading = chain, ("Evidence in the active chain" if chain else "")
    current_t = min(len(rec.steps) + (0 if rec.done else 1), rec.t_max) if rec.steps else 1
    msg = views.message_html(message, "ok") + "".join(views.message_html(n, "warn") for n in notes)
    return EpisodeView(
        status=_status_html(session, rec),
        steps=views.steps_table(rec),
        breakdown=views.step_breakdown(last),
        passages=views.passages_html(passages, rec.gold_pids, session.question.has_passages, heading),
        weights=views.weights_figure(rec.stage, rec.schedule, rec.preset, rec.t_max, current_t),
        contributions=views.contributions_figure(rec),
        verdicts=views.verdicts_html(rec),
        judged_steps=[s.t for s in rec.steps if s.verdict is not None],
        candidates=views.candidates_html(session.candidates),
        candidate_choices=[(f"#{i} {c['action']} {_short(c.get('argument') or '', 40)}", i)
                           for i, c in enumerate(session.candidates, 1)],
        message=msg,
        weights_key=(rec.stage, rec.schedule, rec.preset, rec.t_max, current_t),
        contributions_key=(rec.episode_id, tuple((s.t, s.reward) for s in rec.steps)),
    )


def _status_html(session: EpisodeSession, rec: EpisodeRecord) -> str:
    q = session.question
    gold = ", ".join(q.answers) if q.answers else "unknown (free question)"
    if rec.done:
        outcome = (f"answered <b>{views.esc(rec.answer)}</b>" if rec.answer is not None
                   else "refused" if rec.refused else "ran out of steps")
        state = f'<span class="badge done">done</span> {outcome}'
    else:
        state = f'<span class="badge running">running</span> next step t = {len(rec.steps) + 1} of {rec.t_max}'
    adapter = session.policy.adapter or ("base model" if session.policy.choice.startswith("lm:") else "—")
    return (
        f'<div class="evo-status" id="evo-status"><div class="evo-q">{views.esc(q.question)}</div>'
        f'<div class="evo-meta">question <code>{views.esc(q.id)}</code> · gold answer: {views.esc(gold)} · '
        f"policy: {views.esc(session.policy.label)} · adapter: <b id=\"evo-episode-adapter\">{views.esc(adapter)}</b> · "
        f"{views.esc(rec.stage)} / {views.esc(rec.schedule)} / {views.esc(rec.preset)}</div>"
        f'<div class="evo-meta">{state} · return <b id="evo-return">{rec.total_return:+.3f}</b></div></div>'
    )


# ---------------------------------------------------------------------------------------------------------------
# Preference pairs
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairsView:
    table: str
    counts: str
    ids: list[tuple[str, int]]


def _none_if_all(value: str | None) -> str | None:
    return None if value in (None, "", "all") else value


def pairs_view(svc: Services, source: str | None = None, status: str | None = None, annotator: str | None = None,
               stage: str | None = None, limit: int = 200) -> PairsView:
    """Pairs matching the filters ('all' or empty: no filter), with counts by source, status, annotator and stage."""
    store = svc.store()
    filters = {"source": _none_if_all(source), "status": _none_if_all(status),
               "annotator": _none_if_all(annotator.strip() if annotator else None), "stage": _none_if_all(stage)}
    rows = store.list_pairs(**filters, limit=limit)
    table = views.table_html(
        ["id", "source", "status", "annotator", "stage", "margin", "chosen", "rejected", "created"],
        [[p.id, p.source, p.status, p.annotator or "", p.stage or "", p.margin if p.margin is not None else "",
          _short(p.chosen, 60), _short(p.rejected, 60), p.created_at.strftime("%Y-%m-%d %H:%M")] for p in rows],
        table_id="evo-pairs", empty="No pairs match these filters.",
    )
    active = {k: v for k, v in filters.items() if v is not None}
    counts = "".join(views.counts_html(f"by {g}", store.count_pairs(g, **active))
                     for g in ("source", "status", "annotator", "stage"))
    total = sum(store.count_pairs("status", **active).values())
    counts = f'<div class="evo-counts"><span class="evo-h">matching pairs</span> <b id="evo-pair-total">{total}</b></div>' + counts
    return PairsView(table, counts, [(f"#{p.id} {p.status} {_short(p.chosen, 40)}", p.id) for p in rows])


def pair_fields(svc: Services, pair_id: int | None) -> tuple[str, str, str, str]:
    """(prompt, chosen, rejected, stage) of a pair, for the edit form."""
    if pair_id is None:
        return "", "", "", ""
    p = svc.store().get_pair(int(pair_id))
    return p.prompt, p.chosen, p.rejected, p.stage or ""


def edit_pair(svc: Services, pair_id: int | None, chosen: str, rejected: str, stage: str) -> str:
    if pair_id is None:
        raise ValueError("choose a pair to edit")
    if not chosen.strip() or not rejected.strip():
        raise ValueError("chosen and rejected must not be empty")
    if chosen.strip() == rejected.strip():
        raise ValueError("chosen and rejected must differ")
    p = svc.store().update_pair(int(pair_id), chosen=chosen.strip(), rejected=rejected.strip(),
                                stage=stage.strip() or None)
    return f"Pair #{p.id} saved."


def discard_pair(svc: Services, pair_id: int | None) -> str:
    if pair_id is None:
        raise ValueError("choose a pair to discard")
    p = svc.store().discard_pair(int(pair_id))
    return f"Pair #{p.id} discarded (kept in the database, never trained on)."


def restore_pair(svc: Services, pair_id: int | None) -> str:
    if pair_id is None:
        raise ValueError("choose a pair to restore")
    p = svc.store().restore_pair(int(pair_id))
    return f"Pair #{p.id} is queued again."


# ---------------------------------------------------------------------------------------------------------------
# Training rounds and adapters
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingView:
    progress: str  # HTML progress bar of the newest round
    loss: go.Figure
    rounds: str  # HTML history table
    adapters: str  # HTML table with metrics
    adapter_names: list[str]
    live: str  # active adapter name or "base model"
    loss_key: tuple = ()  # (round id, loss points): equal keys mean an identical loss figure


def launch_round(svc: Services, objective: str, pairs: int, epochs: int, lr: float, kl: str,
                 source: str | None = None, stage: str | None = None, episodes: int | None = None,
                 max_steps: int | None = None) -> tuple[str, int]:
    """Queue a training round for the worker; returns (message, round id).

    The round's job (stored as JSON, read by `evorag worker`): objective, pairs (DPO: queued pairs to claim),
    episodes (GRPO/PPO: newest stored episodes), epochs, lr, kl, source/stage filters, max_steps, base_model."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
    if kl not in KL_ESTIMATORS:
        raise ValueError(f"KL estimator must be one of {', '.join(KL_ESTIMATORS)}")
    pairs, epochs, lr = int(pairs or 0), int(epochs or 0), float(lr or 0.0)
    episodes, max_steps = int(episodes or 32), int(max_steps or 0)
    if pairs < 1 or epochs < 1 or episodes < 1 or not lr > 0 or max_steps < 0:
        raise ValueError("pairs, episodes and epochs must be at least 1, the learning rate positive, max steps >= 0")
    store = svc.store()
    config = {"objective": objective, "pairs": pairs, "episodes": episodes, "epochs": epochs, "lr": lr, "kl": kl,
              "source": _none_if_all(source), "stage": _none_if_all(stage), "max_steps": max_steps or None,
              "base_model": svc.cfg.policy.model}
    config = {k: v for k, v in config.items() if v is not None}
    round_id = store.enqueue_round(objective, config)
    worker = svc.worker.describe() if svc.worker is not None else "no worker process started by this studio"
    note = ""
    if objective == "dpo":
        queued = sum(store.count_pairs("status", status="queued", source=config.get("source"),
                                       stage=config.get("stage")).values())
        note = "" if queued else " Note: no queued pairs match; the round will fail with nothing to train on."
    return (f"Round #{round_id} queued ({objective}, {epochs} epoch(s), lr {lr:g}, KL {kl}"
            f"{f', up to {pairs} pairs' if objective == 'dpo' else f', {episodes} episodes'}); {worker}.{note}",
            round_id)


def training_view(svc: Services) -> TrainingView:
    store = svc.store()
    rounds = store.list_rounds(limit=50)
    newest = rounds[0] if rounds else None
    loss_key: tuple = ()
    if newest is None:
        progress = '<div class="evo-empty">No training round yet.</div>'
        loss = views.loss_figure([])
    else:
        prog = newest.progress or {}
        points = svc.loss_history.setdefault(newest.id, [])
        _merge_losses(points, newest)
        phase = f" · {prog['phase']}" if newest.status == "running" and prog.get("phase") else ""
        progress = views.progress_html(f"Round #{newest.id} ({newest.objective}){phase}", prog.get("step"),
                                       prog.get("total"), prog.get("eta"), newest.status)
        if newest.error:
            progress += views.message_html(newest.error, "error")
        loss = views.loss_figure(points, f"Round #{newest.id} loss")
        loss_key = (newest.id, tuple(points))
    round_rows = []
    for r in rounds:
        m = r.metrics or {}
        summary = ", ".join(f"{k}={m[k]:.4g}" if isinstance(m[k], float) else f"{k}={m[k]}" for k in _key_metrics([m]))
        if m.get("adapter"):
            summary = f"adapter {m['adapter']}" + (f", {summary}" if summary else "")
        took = (r.finished_at - r.started_at).total_seconds() if r.finished_at and r.started_at else None
        data_used = r.config.get("pairs", "") if r.objective == "dpo" else r.config.get("episodes", "")
        round_rows.append([r.id, r.objective, r.status, data_used, r.config.get("epochs", ""),
                           r.config.get("lr", ""), r.config.get("kl", ""), took if took is not None else "",
                           _short(summary, 120) if summary else (r.error or "")[:120]])
    rounds_html = views.table_html(["round", "objective", "status", "pairs / episodes", "epochs", "lr", "KL", "seconds",
                                    "metrics"],
                                   round_rows, table_id="evo-rounds", empty="No rounds yet.")
    adapters = store.list_adapters()
    keys = _key_metrics([a.metrics for a in adapters])
    adapter_rows = [[("● " if a.active else "") + a.name, a.objective or "", a.round_id or "",
                     *[(a.metrics or {}).get(k, "") for k in keys], a.created_at.strftime("%Y-%m-%d %H:%M")]
                    for a in adapters]
    adapters_html = views.table_html(["adapter", "objective", "round", *keys, "created"], adapter_rows,
                                     table_id="evo-adapters", empty="No adapters yet: a finished round registers one.")
    live = next((a.name for a in adapters if a.active), "base model")
    return TrainingView(progress, loss, rounds_html, adapters_html, [a.name for a in adapters], live, loss_key)


# Metrics shown first when rounds and adapters are compared (whichever of them a round reported).
KEY_METRICS = ("eval_em", "eval_f1", "em", "f1", "heldout_accuracy", "final_rewards_accuracies",
               "final_rewards_margins", "final_loss", "first_loss", "final_kl", "steps", "pairs", "episodes", "wall_s")


def _key_metrics(metrics_list: list[dict[str, Any]], limit: int = 8) -> list[str]:
    numeric = [{k for k, v in (m or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
               for m in metrics_list]
    present = set().union(*numeric) if numeric else set()
    keys = [k for k in KEY_METRICS if k in present]
    return keys if keys else sorted(present)[:limit]


def _merge_losses(points: list[tuple[float, float]], r: Any) -> None:
    """Loss points: the round's reported history when it has one, else each progress report the UI has seen."""
    history = (r.metrics or {}).get("loss_history") or (r.progress or {}).get("loss_history")
    if isinstance(history, list) and history:
        points[:] = [(float(i + 1), float(v)) if not isinstance(v, (list, tuple)) else (float(v[0]), float(v[1]))
                     for i, v in enumerate(history)]
        return
    prog = r.progress or {}
    if prog.get("loss") is not None and prog.get("step") is not None:
        point = (float(prog["step"]), float(prog["loss"]))
        if not points or points[-1][0] != point[0]:
            points.append(point)


def activate_adapter(svc: Services, name: str | None) -> str:
    if not name:
        raise ValueError("choose an adapter to activate")
    a = svc.store().activate_adapter(name)
    return f"Adapter {a.name} is live: new episodes with the 'LM · live adapter' policy use it."


def use_base_model(svc: Services) -> str:
    svc.store().deactivate_adapters()
    return "No adapter is active: new LM episodes use the base model."


def header_status(svc: Services) -> str:
    """Live adapter, worker and store state, for the page header."""
    parts = []
    store = svc.store_or_none()
    if store is None:
        parts.append('<span class="chip warn">store unavailable</span>')
    else:
        active = store.active_adapter()
        name = active.name if active is not None else "base model"
        parts.append(f'live adapter: <b id="evo-live-adapter">{views.esc(name)}</b>')
        running = store.list_rounds(status="running", limit=5)
        queued = store.list_rounds(status="queued", limit=50)
        parts.append(f"rounds: {len(running)} running, {len(queued)} queued")
    parts.append(views.esc(svc.worker.describe() if svc.worker is not None else "worker: not started"))
    if svc.warm_status:
        parts.append(f'<span class="chip warn" id="evo-warming">{views.esc(svc.warm_status)}…</span>')
    return '<div class="evo-header-status">' + " · ".join(parts) + "</div>"


# ---------------------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class EvalRun:
    name: str
    method: str
    data: str
    summary: dict[str, Any]
    results: list[QuestionResult] = field(default_factory=list)
    path: str = ""  # the data file (to look passages up in a drill-down)


EVAL_PREFIX = "eval:"  # method choices that are `evorag eval` methods (built by that command's METHODS table)


def eval_method_options(svc: Services) -> list[tuple[str, str]]:
    """The studio's policies plus every other `evorag eval` method (DynaKrag, ARENA, the pipeline baselines...)."""
    from evorag_core.commands.eval import METHODS

    extra = [(f"eval · {name}", EVAL_PREFIX + name) for name in sorted(METHODS) if name not in ("oracle", "script")]
    return policy_options(svc) + extra


def _eval_method(svc: Services, rt: Any, method: str, script: str):
    if method.startswith(EVAL_PREFIX):
        import argparse

        from evorag_core.commands.eval import METHODS

        name = method[len(EVAL_PREFIX):]
        if name not in METHODS:
            raise ValueError(f"unknown evaluation method {name!r}; expected one of {', '.join(sorted(METHODS))}")
        return METHODS[name](argparse.Namespace(adapter=None, script=None), rt)
    policy = svc.policies.make(method, script=script, adapter_lookup=_adapter_lookup(svc))
    return EpisodeMethod(policy.policy, rt.make_env, label=policy.label)


def run_eval(svc: Services, runs: dict[str, EvalRun] | None, data_path: str | None, method: str, script: str,
             start: int, count: int, on_progress: Callable[[int, int, QuestionResult], None] | None = None
             ) -> tuple[dict[str, EvalRun], EvalRun]:
    """Run one method on questions [start, start+count) of a data file; the run is added to `runs`."""
    rt = svc.runtime(data_path or None)
    start, count = int(start or 0), int(count or 0)
    questions = rt.dataset.questions[start: start + count]
    if count < 1 or not questions:
        raise ValueError(f"the slice [{start}, {start + count}) of {rt.dataset.name} holds no question "
                         f"({len(rt.dataset.questions)} in the file)")
    em = _eval_method(svc, rt, method, script)
    total = len(questions)

    def progress(res: QuestionResult, done: list[QuestionResult]) -> None:
        if on_progress is not None:
            on_progress(len(done), total, res)

    summary, results = evaluate(em, questions, on_result=progress)
    runs = dict(runs or {})
    name = f"{len(runs) + 1}: {method} on {rt.dataset.name}[{start}:{start + len(questions)}]"
    run = EvalRun(name, em.label, rt.dataset.name, summary, results, str(rt.dataset.path))
    runs[name] = run
    return runs, run


def eval_summary(runs: dict[str, EvalRun] | None) -> str:
    rows = [[r.name, r.method, r.summary["n"], r.summary["em"], r.summary["f1"], r.summary["avg_steps"],
             r.summary["support_recall"], r.summary["refusal_rate"], r.summary["seconds"]]
            for r in (runs or {}).values()]
    return views.table_html(["run", "method", "n", "EM", "F1", "steps", "support recall", "refusal rate", "seconds"],
                            rows, table_id="evo-eval-summary", empty="No evaluation run yet.")


def compare_runs(runs: dict[str, EvalRun] | None, a: str | None, b: str | None, resamples: int = 10_000) -> str:
    """Paired bootstrap of EM, F1 and steps between two runs on their common questions."""
    runs = runs or {}
    if not a or not b or a not in runs or b not in runs:
        raise ValueError("choose two evaluation runs to compare")
    if a == b:
        raise ValueError("choose two different runs")
    out = compare_results(runs[a].results, runs[b].results, resamples=int(resamples))
    rows = []
    for metric in ("em", "f1", "steps"):
        r = out[metric]
        verdict = "significant" if r["p_value"] < 0.05 else "not significant"
        rows.append([metric, r["mean_a"], r["mean_b"], f"{r['diff']:+.4f}",
                     f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]", f"{r['p_value']:.4f}", verdict])
    head = f'<div class="evo-h">A = {views.esc(a)} · B = {views.esc(b)} · {out["n"]} common questions · {int(resamples)} resamples</div>'
    return head + views.table_html(["metric", "mean A", "mean B", "A − B", "95% CI", "p", "p < 0.05"], rows,
                                   table_id="evo-bootstrap")


def eval_questions(runs: dict[str, EvalRun] | None, name: str | None) -> list[tuple[str, str]]:
    run = (runs or {}).get(name or "")
    if run is None:
        return []
    return [(f"{'✓' if r.em else '✗'} {r.question_id} · {_short(r.question, 60)}", r.question_id) for r in run.results]


def drill_down(svc: Services, runs: dict[str, EvalRun] | None, name: str | None, question_id: str | None
               ) -> tuple[str, str, go.Figure]:
    """The trace of one evaluated question: (summary HTML, trace HTML, contributions figure). Environment episodes
    show their steps with signals; DynaKrag its controller trace; ARENA its structured answer over the references."""
    run = (runs or {}).get(name or "")
    if run is None or not question_id:
        raise ValueError("choose a run and a question")
    res = next((r for r in run.results if r.question_id == question_id), None)
    if res is None:
        raise KeyError(f"question {question_id!r} is not in run {name!r}")
    head = (f'<div class="evo-status"><div class="evo-q">{views.esc(res.question)}</div><div class="evo-meta">'
            f"prediction: <b>{views.esc(res.prediction if res.prediction is not None else '(none)')}</b> · gold: "
            f"{views.esc(', '.join(res.gold))} · EM {res.em:.0f} · F1 {res.f1:.2f} · steps {res.steps}"
            f"{'' if res.total_return is None else f' · return {res.total_return:+.3f}'}</div></div>")
    empty = views.contributions_figure(None)
    if res.extras.get("episode"):
        record = EpisodeRecord.from_dict(res.extras["episode"])
        return head, views.steps_table(record), views.contributions_figure(record)
    if res.extras.get("arena"):
        from .arena_view import render_arena_answer

        arena = res.extras["arena"]
        rt = svc.runtime(run.path or None)
        by_pid = {p.pid: p for q in rt.dataset.questions for p in q.passages}
        refs = [by_pid[pid] for pid in arena.get("references", []) if pid in by_pid]
        body = render_arena_answer(refs, arena.get("text", ""), gold_ids=arena.get("gold_ids", ()),
                                   gold_answers=res.gold, anchor=f"arena-{question_id}")
        return head, body, empty
    if res.trace and all(isinstance(t, dict) and "valid" in t for t in res.trace):
        from .dynakrag_view import trace_html

        return head, trace_html(res.trace), empty
    rows = [[t.get("t", i + 1), json.dumps(dict(t), ensure_ascii=False)] for i, t in enumerate(res.trace)]
    return head, views.table_html(["step", "trace"], rows, empty="This method records no trace."), empty
