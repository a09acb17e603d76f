"""Human-in-the-loop handlers: the policy's proposal at the current state, a step taken by a person instead of the
policy (SEARCH with a typed query, BACKTRACK, ANSWER with a typed answer, REFUSE), the human-correction pair it may
queue, and the live counts the page shows (pairs queued) and what a Reset is about to load."""
from __future__ import annotations

from evorag_core.env.actions import action_to_dict
from evorag_core.live.human import HUMAN_SOURCE, Correction, correction_metadata, human_action
from evorag_core.store.records import NewAnnotationItem

from app.common.handlers import adapter_lookup, check_typed
from app.common.services import Services
from app.common.session import EpisodeSession, EpisodeSettings
from app.tabs.episode.handlers import EpisodeView, _completion, _prompt, _require, episode_view

__all__ = ["propose_action", "human_step", "queue_correction", "pairs_count_html", "loading_note",
           "state_item", "queue_item"]


def propose_action(session: EpisodeSession | None) -> tuple[EpisodeView, str, str]:
    """Ask the policy what it would do at the current state: (view, action name, argument) - the action row is
    filled with the proposal, so a person can take it as is or edit it."""
    session = _require(session)
    proposal = session.propose()
    act = action_to_dict(proposal.action)
    arg = act.get("query", act.get("answer", ""))
    return episode_view(session, f"The policy proposes at t = {proposal.t}: {proposal.completion}"), act["action"], arg


def human_step(session: EpisodeSession | None, svc: Services, name: str | None, argument: str | None, who: str,
               queue: bool = False) -> tuple[EpisodeView, EpisodeSession, int | None]:
    """A person's step instead of the policy's; with `queue`, the human-correction pair where it replaced a
    different proposal. Returns (view, session, pair id or None). The policy continues with the next Step / Run."""
    session = _require(session)
    limit = svc.cfg.studio.max_question_chars
    action = human_action(name, check_typed((argument or "").strip(), limit, "typed query or answer"))
    who = check_typed(who.strip(), limit, "annotator name") or "anonymous"
    if queue:  # refused before the step is taken: no half-done action
        proposal = session.propose()
        if proposal.prompt is None:
            raise ValueError("correction pairs need a language-model policy (its prompt at this state is what the "
                             "pair trains on): choose an LM policy and Reset, or untick 'queue a correction pair'")
    step, correction = session.act_as_human(action, who)
    took = f"t = {step.t}: you took {action_to_dict(action)['action']}; the policy had proposed {step.info['proposal']}"
    pair_id = None
    if queue and correction is not None:
        pair_id = queue_correction(session, svc, correction, who)
        took += f". Queued human-correction pair #{pair_id} (yours preferred over the policy's)"
    elif queue:
        took += ". Same as the policy's proposal: no correction pair to queue"
    took += ". The episode has ended." if session.done else ". Step or Run to end hands back to the policy."
    return episode_view(session, took), session, pair_id


def queue_correction(session: EpisodeSession, svc: Services, correction: Correction, who: str) -> int:
    """Queue `correction` as a pair with source human-correction; returns its id."""
    meta = correction_metadata(correction, episode=session.record.episode_id, episode_db_id=session.db_id,
                               question_id=session.question.id, dataset=session.question.dataset,
                               policy=session.policy.label)
    return svc.store().add_pair(correction.prompt, correction.chosen, correction.rejected, source=HUMAN_SOURCE,
                                annotator=who or "anonymous", stage=session.record.stage, metadata=meta)


def pairs_count_html(svc: Services) -> str:
    """The Episode tab's line: how many pairs wait for a training round."""
    store = svc.store_or_none()
    if store is None:
        return '<span class="evo-pairs-count">pairs: store unavailable</span>'
    n = store.count_pairs("status", status="queued").get("queued", 0)
    return (f'<span class="evo-pairs-count" id="evo-ep-pairs" data-n="{n}">pairs queued for training: '
            f'<b>{n}</b></span>')


def loading_note(svc: Services, settings: EpisodeSettings) -> str:
    """What a Reset with `settings` will load before it starts ('' when everything is loaded), e.g. "loading adapter
    r3 into the policy model…"; shown while it loads."""
    if not settings.policy.startswith("lm:"):
        return ""
    note = svc.policies.pending_load(settings.policy, adapter_lookup(svc))
    if svc.warm_status:
        return f"waiting for the start-up warm-up ({svc.warm_status})" + (f", then {note}" if note else "…")
    return note


def state_item(session: EpisodeSession | None, svc: Services) -> NewAnnotationItem:
    """The annotation-queue item of the current state: the question, the chain so far with its passages, the sampled
    candidates with what each SEARCH would retrieve (as the policy's next prompt would show it: the preference
    model's preview) and their branch returns when scored, and the prompt they were sampled after."""
    session = _require(session)
    if not session.candidates or session.candidates_t != session.env.view().t:
        raise ValueError("sample K candidates at this state first (Candidates: Sample), then send it to the queue")
    from evorag_core.pairs.annotation_items import MAX_CANDIDATES

    if len(session.candidates) > MAX_CANDIDATES:
        raise ValueError(f"the queue takes at most {MAX_CANDIDATES} candidates (keys 1-9); sample fewer")
    rec = session.record
    chain = [{"t": s.t, "action": action_to_dict(s.action)["action"], "argument": _argument(s.action),
              "passages": [{"pid": p.pid, "title": p.title, "text": p.text} for p in session.passages(s)]}
             for s in rec.steps]
    previews = _previews(session, svc)
    candidates, seen = [], set()
    for i, (cand, preview) in enumerate(zip(session.candidates, previews)):
        text = _completion(session, i)
        if text in seen:
            continue
        seen.add(text)
        candidates.append({"completion": text, "preview": preview, "branch_return": cand.get("branch_return"),
                           "logprob": cand.get("logprob")})
    if len(candidates) < 2:
        raise ValueError("the sampled candidates are all the same action; sample again (a higher temperature)")
    payload = {"question": session.question.question, "question_id": session.question.id,
               "dataset": session.question.dataset, "stage": rec.stage, "t": session.candidates_t,
               "prompt": _prompt(session), "chain": chain, "candidates": candidates,
               "episode_db_id": session.db_id}
    key = f"studio:{rec.episode_id}:{session.candidates_t}:{len(candidates)}"
    return NewAnnotationItem("preference", payload, "studio", key)


def _argument(action) -> str | None:
    d = action_to_dict(action)
    return d.get("query") or d.get("answer")


def _previews(session: EpisodeSession, svc: Services) -> list[str]:
    """What each SEARCH candidate retrieves ("" for other actions), taken on the live environment from a snapshot
    that is restored afterwards."""
    from evorag_core.env.actions import Search
    from evorag_core.policy.prompts import render_search_result

    chars = svc.cfg.policy.passage_chars
    out = []
    with session.exclusive():
        view, snap = session.env.view(), session.env.snapshot()
        try:
            for action in session.candidate_actions:
                if not isinstance(action, Search):
                    out.append("")
                    continue
                session.env.restore(snap)
                found = session.env.step(action).record.passages
                out.append(render_search_result(view, [session.env.passage(pid) for pid in found], chars))
        finally:
            session.env.restore(snap)
    return out


def queue_item(svc: Services, item: NewAnnotationItem) -> int:
    """Queue one item (the Episode tab's "Send this state to the queue"); its id."""
    ids = svc.store().add_annotation_items([item])
    if not ids:
        raise ValueError("this state is already in the annotation queue")
    return ids[0]
