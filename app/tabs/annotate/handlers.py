"""Annotate tab handlers (plain values in and out): the next item of the queue for an annotator, a label given by the
keys (a command string the page's script writes: "rank|12|2,0|<nonce>" or, with a candidate marked worst,
"rank|12|2,0/3|<nonce>", "tie|12||…", "skip|12||…", "undo|||…",
"next|||…"), progress, the review list and a reviewer's resolution, and "send this state to the queue" from the
Episode tab. Who acts and whether they may is decided by the caller (app/tabs/annotate/layout.py, app/common/roles.py)."""
from __future__ import annotations

from dataclasses import dataclass

from evorag_core.pairs.annotation import check_ranking, rescored_refusal, tiers_from_picks
from evorag_core.pairs.annotation_export import disagreements, labelled_items, queue_agreement
from evorag_core.store import AnnotationItem, Store

from app.common import views
from app.common.services import Services
from app.tabs.annotate import view as av

__all__ = ["AnnotateView", "ReviewView", "Command", "parse_command", "next_item", "run_command", "review_list",
           "review_item", "resolve", "agreement_line", "parse_picks", "member_header", "EMPTY_QUEUE", "ADMIN_HINT"]

EMPTY_QUEUE = ("Nothing left for you to label right now: you have labelled or skipped every item open to you. "
               "New items show up here as they are added; an item someone else left unfinished comes back too.")
ADMIN_HINT = (" (Admins queue items with `evorag annotate import`, `evorag annotate from-rollouts` or the Episode "
              "tab's \"Send this state to the queue\".)")


@dataclass(frozen=True)
class AnnotateView:
    item_id: int | None
    item: str  # HTML
    progress: str  # HTML
    message: str  # HTML


@dataclass(frozen=True)
class Command:
    verb: str  # rank | tie | skip | undo | next
    item_id: int | None
    picks: tuple[int, ...]  # 0-based, in the order picked
    worst: int | None = None  # 0-based, the candidate marked worst


_VERBS = ("rank", "tie", "skip", "undo", "next")


def parse_command(value: str | None) -> Command | None:
    """The command the page's script wrote; None for an empty value (the box cleared)."""
    if not value or not value.strip():
        return None
    parts = (value.split("|") + ["", "", ""])[:3]
    verb, item, picks = (p.strip() for p in parts)
    if verb not in _VERBS:
        raise ValueError(f"unknown annotation command {verb!r}")
    try:
        item_id = int(item) if item else None
        best, _, worst = picks.partition("/")
        chosen = tuple(int(p) for p in best.split(",") if p.strip())
        marked = int(worst) if worst.strip() else None
    except ValueError:
        raise ValueError(f"malformed annotation command {value[:80]!r}") from None
    return Command(verb, item_id, chosen, marked)


def parse_picks(text: str | None) -> tuple[int, ...]:
    """A ranking typed by a reviewer, "2,1,3" (1-based, best first) -> 0-based picks."""
    try:
        return tuple(int(p) - 1 for p in (text or "").replace(" ", "").split(",") if p)
    except ValueError:
        raise ValueError(f"type the candidates best first as numbers, e.g. 2,1; got {text!r}") from None


def _settings(svc: Services) -> tuple[int, float]:
    return svc.cfg.annotate.annotators_per_item, float(svc.cfg.annotate.lease_seconds)


def _view(svc: Services, who: str, item: AnnotationItem | None, message: str = "", *,
          admin: bool = False) -> AnnotateView:
    per_item, _ = _settings(svc)
    progress = av.progress_html(svc.store().annotation_progress(who, per_item=per_item))
    html = av.item_html(item) if item is not None else av.empty_html(EMPTY_QUEUE + (ADMIN_HINT if admin else ""))
    return AnnotateView(item.id if item else None, html, progress, views.message_html(message, "ok") if message else "")


def next_item(svc: Services, who: str, message: str = "", *, admin: bool = False) -> AnnotateView:
    """The item `who` works on now (their leased one, else a new claim); an empty queue says so in words, with the
    commands that fill it only for an admin."""
    per_item, lease_s = _settings(svc)
    item = svc.store().claim_annotation_item(who, per_item=per_item, lease_s=lease_s)
    return _view(svc, who, item, message, admin=admin)


def member_header(svc: Services, who: str, role: str) -> str:
    """The page header of an annotator or reviewer: who they are and their own progress (an admin's header, with
    the live adapter, rounds and worker, is `handlers.header_status`)."""
    per_item, _ = _settings(svc)
    p = svc.store().annotation_progress(who, per_item=per_item)
    skipped = f", {p.skipped} skipped" if p.skipped else ""
    return (f'<div class="evo-header-status" id="evo-member-header" data-role="{views.esc(role)}">'
            f'<b>{views.esc(who)}</b> ({views.esc(role)}) · you have labelled <b>{p.done}</b> '
            f'item{"" if p.done == 1 else "s"}{skipped}; {p.open} open to you</div>')


def _decision(item: AnnotationItem, cmd: Command) -> tuple[str, list[list[int]] | None]:
    if cmd.verb in ("tie", "skip"):
        if cmd.verb == "tie" and item.kind != "preference":
            raise ValueError("a refusal item is answerable (1) or unanswerable (2), not a tie")
        return cmd.verb, None
    if item.kind == "refusal":
        if len(cmd.picks) != 1 or cmd.picks[0] not in (0, 1) or cmd.worst is not None:
            raise ValueError("press 1 (answerable) or 2 (unanswerable), then Enter")
        return av.VERDICTS[cmd.picks[0]], None
    k = len(item.payload["candidates"])
    return "rank", tiers_from_picks(list(cmd.picks), k, cmd.worst)


def _override(store: Store, episode_id: int, t: int, decision: str, who: str) -> None:
    """A refusal label as the human verdict of step t of a stored episode: the override, the step's `ref` and reward
    and the episode's return rescored in one transaction (a stored step that is gone: the label alone stands)."""
    step = next((s for s in store.get_episode(episode_id).steps if s.t == t), None)
    if step is None:
        raise ValueError(f"episode {episode_id} has no step t={t}: the label is saved, the step is not rescored")
    signals, reward = rescored_refusal(step, decision == av.VERDICTS[0])
    store.set_override_rescored(episode_id, t, decision, who, signals=signals, reward=reward)


def _label(svc: Services, who: str, cmd: Command) -> str:
    if cmd.item_id is None:
        raise ValueError("no item is shown: nothing to label")
    store = svc.store()
    item = store.get_annotation_item(cmd.item_id)
    decision, tiers = _decision(item, cmd)
    per_item, _ = _settings(svc)
    store.label_annotation_item(item.id, who, decision, tiers, per_item=per_item)
    p = item.payload
    if decision in av.VERDICTS and p.get("episode_db_id") is not None and p.get("t") is not None:
        _override(store, int(p["episode_db_id"]), int(p["t"]), decision, who)
        return f"Item #{item.id}: {decision} (stored as an override of step {p['t']})."
    return f"Item #{item.id}: {'skipped' if decision == 'skip' else 'saved'}."


def run_command(svc: Services, who: str, value: str | None, *, admin: bool = False) -> AnnotateView:
    """Apply a command of the page's keys and return what to show next (`admin`: the empty queue names the commands
    that fill it)."""
    cmd = parse_command(value)
    if cmd is None or cmd.verb == "next":
        return next_item(svc, who, admin=admin)
    if cmd.verb == "undo":
        _, lease_s = _settings(svc)
        item = svc.store().undo_last_label(who, lease_s=lease_s)
        if item is None:
            return next_item(svc, who, "Nothing to undo.", admin=admin)
        return _view(svc, who, item, f"Undone: item #{item.id} is back; label it again.")
    return next_item(svc, who, _label(svc, who, cmd), admin=admin)


# -- review ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReviewView:
    table: str  # HTML
    choices: list[tuple[str, int]]  # the item picker
    agreement: str  # HTML line


def agreement_line(items) -> str:
    report = queue_agreement(items)
    fmt = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    cohen = ", ".join(f"{a}/{b} {fmt(k)}" for (a, b), k in report.cohen.items()) or "–"
    return (f'<span id="evo-review-agreement">{report.items_compared} items with 2+ labels · mean pairwise '
            f'agreement {fmt(report.mean_agreement)} · Fleiss κ {fmt(report.fleiss)} · Cohen κ {cohen}</span>')


def review_list(svc: Services) -> ReviewView:
    items = labelled_items(svc.store())
    found = disagreements(items)
    rows = [(li.item.id, li.agreement or 0.0, li.item.payload.get("question", ""), len(li.labels)) for li in found]
    return ReviewView(av.review_rows_html(rows), [(f"#{i} (agreement {a:.2f})", i) for i, a, _, _ in rows],
                      agreement_line(items))


def review_item(svc: Services, item_id: int | None) -> str:
    """The item and each annotator's label, for the reviewer."""
    if item_id is None:
        return ""
    store = svc.store()
    item = store.get_annotation_item(int(item_id))
    labels = [lab for lab in store.annotation_labels(item.id) if lab.decision != "skip"]
    options = item.payload.get("candidates") or [{"completion": v} for v in av.VERDICTS]
    return av.item_html(item) + "<h4>Labels</h4>" + av.labels_html(labels, options)


def resolve(svc: Services, reviewer: str, item_id: int | None, decision: str, ranking_text: str | None) -> str:
    """Store the reviewer's label for a disagreement: rank (typed "2,1": best first; unnamed candidates tie last),
    tie, answerable or unanswerable."""
    if item_id is None:
        raise ValueError("choose a disagreement to resolve")
    store = svc.store()
    item = store.get_annotation_item(int(item_id))
    tiers = None
    if decision == "rank":
        if item.kind != "preference":
            raise ValueError("a refusal item is resolved as answerable or unanswerable")
        k = len(item.payload["candidates"])
        tiers = check_ranking(tiers_from_picks(list(parse_picks(ranking_text)), k), k)
    elif decision in av.VERDICTS and item.kind != "refusal" or decision == "tie" and item.kind != "preference":
        raise ValueError(f"{decision} does not fit a {item.kind} item")
    store.resolve_annotation_item(item.id, reviewer, decision, tiers)
    p = item.payload
    if decision in av.VERDICTS and p.get("episode_db_id") is not None and p.get("t") is not None:
        _override(store, int(p["episode_db_id"]), int(p["t"]), decision, reviewer)
    return f"Item #{item.id} resolved by {reviewer}: {decision}{' ' + ranking_text if tiers else ''}."
