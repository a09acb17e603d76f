"""Episode handlers: data files and questions, Reset / Step / Run to end, refusal overrides, sibling candidates
and human preference pairs, and the episode's rendered view."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import plotly.graph_objects as go

from evorag_core.env.actions import action_to_dict
from evorag_core.env.episode import EpisodeRecord
from evorag_core.types import Passage

from app.common import grading_view, views
from app.common.handlers import adapter_lookup, check_typed, short
from app.common.policies import FeatureUnavailable
from app.common.services import Services
from app.common.session import EpisodeSession, EpisodeSettings

__all__ = [
    "EpisodeView",
    "start_episode",
    "step_episode",
    "run_steps",
    "run_to_end",
    "episode_view",
    "override_verdict",
    "sample_siblings",
    "score_siblings",
    "queue_pair",
]


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
    running: bool = False  # an episode is under way: a person may act in the policy's place ("Act yourself")
    proposal: str = ""  # HTML: the policy's proposal at the current state, once asked for (or how to ask)


def start_episode(svc: Services, settings: EpisodeSettings, loading: str = "") -> tuple[EpisodeView, EpisodeSession]:
    """Reset: a new episode on the chosen question (or the typed one) with the chosen policy and schedule.
    `loading`: what the page said this Reset would load first (`human.loading_note`); the message says how long it
    took."""
    start = time.perf_counter()
    check_typed(settings.free_question.strip(), svc.cfg.studio.max_question_chars, "typed question")
    rt = svc.runtime(settings.data_path or None)
    policy = svc.policies.make(settings.policy, script=settings.script, adapter_lookup=adapter_lookup(svc))
    session = EpisodeSession.start(settings, rt, policy, svc.store_or_none())
    took = f"; {loading.rstrip('…')} took {time.perf_counter() - start:.1f} s" if loading else ""
    blank = (" The typed question was blank, so the picked question was asked."
             if settings.free_question and not settings.free_question.strip() else "")
    return episode_view(session, f"New episode started{took}.{blank}"), session


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
    with session.exclusive():
        found = session.policy.sample(session.env.view(), int(k), float(temperature), int(seed))
        session.set_candidates(found)
    return episode_view(session, f"Sampled {len(found)} candidates at t = {session.candidates_t}."), session


def score_siblings(session: EpisodeSession | None, horizon: int = 6,
                   on_progress: Callable[[int, int], None] | None = None, stop: threading.Event | None = None
                   ) -> tuple[EpisodeView, EpisodeSession]:
    """Branch returns: each candidate taken, then the policy continues for at most `horizon` steps. `on_progress`
    hears (branches scored, branches); a set `stop` ends the scoring with no branch return kept."""
    session = _require(session)
    if not session.score_candidates(int(horizon), on_progress, stop):
        return episode_view(session, "Stopped: scoring was cancelled; no branch return was kept."), session
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
    msg = f"Queued human pair #{pair_id}: candidate {i} preferred over {j}."
    if margin is not None and margin <= 0:  # a person may overrule the rewards; say that this pair does
        msg += (f" Note: the branch returns do not agree ({a['branch_return']:+.3f} vs {b['branch_return']:+.3f}, "
                f"margin {margin:+.3f}); the pair is kept as your judgment.")
    return msg, pair_id


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
    recorded = views.recorded_weights(rec)  # the steps' markers: part of the chart's key (an answer keeps current_t)
    source = grading_view.source_index(rec.answer, passages, grading_view.recorded_source(rec)) if rec.done else None
    msg = views.message_html(message, "ok") + "".join(views.message_html(n, "warn") for n in notes)
    return EpisodeView(
        status=_status_html(session, rec, f"[{source + 1}] {passages[source].title}" if source is not None else ""),
        steps=views.steps_table(rec),
        breakdown=views.step_breakdown(last) + _arena_answer_html(session, last),
        passages=views.passages_html(passages, rec.gold_pids, session.question.has_passages, heading, source,
                                     rec.answer),
        weights=views.weights_figure(rec.stage, rec.schedule, rec.preset, rec.t_max, current_t, session.env.table,
                                     recorded),
        contributions=views.contributions_figure(rec),
        verdicts=views.verdicts_html(rec),
        judged_steps=[s.t for s in rec.steps if s.verdict is not None],
        candidates=views.candidates_html(session.candidates),
        candidate_choices=[(f"#{i} {c['action']} {short(c.get('argument') or '', 40)}", i)
                           for i, c in enumerate(session.candidates, 1)],
        message=msg,
        weights_key=(rec.stage, rec.schedule, rec.preset, rec.t_max, current_t, recorded),
        contributions_key=(rec.episode_id, tuple((s.t, s.reward) for s in rec.steps)),
        running=not rec.done, proposal=_proposal_html(session),
    )


def _proposal_html(session: EpisodeSession) -> str:
    """The policy's proposal at the current state when it was asked for, else how to ask ('' once done)."""
    if session.done:
        return ""
    t = session.env.view().t
    p = session.proposal
    if p is None or p.t != t:
        return (f'<span class="evo-proposal" id="evo-proposal" data-t="{t}">t = {t}: press <i>Agent\'s proposal</i> '
                "to see what the policy would do here, or act yourself.</span>")
    return (f'<span class="evo-proposal" id="evo-proposal" data-t="{t}">the policy proposes at t = {t}: '
            f'<b id="evo-proposal-text">{views.esc(p.completion)}</b></span>')


def _status_html(session: EpisodeSession, rec: EpisodeRecord, source: str = "") -> str:
    """The question, its gold answer ("unanswerable" for an unanswerable one), policy and state; once finished, the
    outcome with its grade badge (EM, F1) and the passage a span answer was read from."""
    q = session.question
    gold = grading_view.gold_text(q)
    if rec.done:
        outcome = (f'answered <b id="evo-answer">{views.esc(rec.answer)}</b>' if rec.answer is not None
                   else "refused" if rec.refused else "ran out of steps")
        outcome += grading_view.grade_html(grading_view.episode_grade(q, rec))
        if source:
            outcome += f' · <span class="evo-src-ref">read from passage {views.esc(source)}</span>'
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


def _arena_answer_html(session: EpisodeSession, step) -> str:
    """ARENA's answer view under the breakdown when the step's answer is a cited reply (`--answerer arena`): the
    [i] citations link to the references, the relevance list is set against the gold ids, and, where the question
    has gold answers, the four reward components are shown."""
    arena = (step.info or {}).get("arena") if step is not None else None
    if not arena:
        return ""
    from evorag_core.reader.arena.parse import parse_arena
    from evorag_core.methods.arena.rewards import arena_reward, gold_reference_ids

    from app.common.arena_view import render_arena_answer

    refs = tuple(session.env.passage(pid) for pid in arena.get("references", ()))
    gold_ids = gold_reference_ids([p.pid for p in refs], session.record.gold_pids)
    answers = () if grading_view.is_unanswerable(session.question) else tuple(session.question.answers or ())
    reward = arena_reward(parse_arena(arena.get("text", ""), len(refs)), answers, gold_ids) if answers else None
    return render_arena_answer(refs, arena.get("text", ""), gold_ids=gold_ids, reward=reward, gold_answers=answers,
                               anchor=f"arena-step-{step.t}")
