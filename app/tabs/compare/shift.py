"""The log-probability shift of the chosen actions: when base and adapter take the same steps, the compared episodes
look identical and say nothing about whether training changed the model. Each step's chosen reply (its completion
text, e.g. `SEARCH: Mirrow`) is scored at the state it was taken in (`env.replay.step_views`) under both models,
log P_A and log P_B, and their difference B − A: positive where the adapter made that reply more likely.

A step both sides took at the same state is scored once ("A = B"); past the first difference each side's steps are
scored on their own states. Only for two language-model policies (the oracle has no log-probabilities)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from evorag_core.env.actions import action_to_dict
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.env.replay import step_views
from evorag_core.env.state import AgentView
from evorag_core.policy.prompts import completion_text
from evorag_core.types import Passage

from app.common import views

__all__ = ["StepShift", "completion_of", "shift_rows", "score_shifts", "shift_html", "lm_scorer", "compare_shift"]


@dataclass(frozen=True)
class StepShift:
    t: int
    side: str  # "A = B" (the same reply at the same state), "A" or "B"
    completion: str
    logprob_a: float  # log P(completion | state) under A's model
    logprob_b: float

    @property
    def shift(self) -> float:
        return self.logprob_b - self.logprob_a


def completion_of(step: StepRecord) -> str:
    """The reply the policy wrote at `step` (recorded in its info), else the action's reply line."""
    recorded = step.info.get("completion") if step.info else None
    if isinstance(recorded, str) and recorded:
        return recorded
    act = action_to_dict(step.action)
    return completion_text(act["action"], str(act.get("query") or act.get("answer") or ""))


def shift_rows(a: EpisodeRecord, b: EpisodeRecord, passage: Callable[[str], Passage]
               ) -> list[tuple[int, str, AgentView, str]]:
    """(t, side, state, completion) to score: a step taken by both at the same state once, as "A = B"; otherwise
    A's and B's steps each on their own state."""
    views_a, views_b = step_views(a, passage), step_views(b, passage)
    rows = []
    for t in range(1, max(len(a.steps), len(b.steps)) + 1):
        sides = []
        if t <= len(a.steps):
            sides.append(("A", views_a[t - 1], completion_of(a.steps[t - 1])))
        if t <= len(b.steps):
            sides.append(("B", views_b[t - 1], completion_of(b.steps[t - 1])))
        if len(sides) == 2 and sides[0][1:] == sides[1][1:]:
            sides = [("A = B", *sides[0][1:])]
        rows += [(t, side, view, completion) for side, view, completion in sides]
    return rows


def score_shifts(rows: Sequence[tuple[int, str, AgentView, str]],
                 score_a: Callable[[Sequence[tuple[AgentView, str]]], list[float]],
                 score_b: Callable[[Sequence[tuple[AgentView, str]]], list[float]]) -> list[StepShift]:
    """Each row's completion scored under both models (`score_x(states and completions)` -> log-probs)."""
    pairs = [(view, completion) for _, _, view, completion in rows]
    lp_a, lp_b = score_a(pairs), score_b(pairs)
    return [StepShift(t, side, completion, x, y) for (t, side, _, completion), x, y in zip(rows, lp_a, lp_b)]


def _cell(value: float) -> str:
    cls = "pos" if value > 1e-6 else "neg" if value < -1e-6 else "zero"
    return f'<td class="num {cls}">{value:+.3f}</td>'


def shift_html(shifts: Sequence[StepShift] | None, label_a: str, label_b: str, note: str = "") -> str:
    """The table: t, side, reply, log P under A and B, B − A (nats); with the mean shift over the rows. `note`
    instead when there is nothing to score (an oracle side)."""
    title = '<div class="evo-h">Log-probability of the chosen replies under both models</div>'
    if not shifts:
        return f'<div id="evo-compare-shift">{title}<div class="evo-empty">{views.esc(note)}</div></div>'
    rows = "".join(
        f'<tr data-t="{s.t}" data-side="{views.esc(s.side)}"><td>{s.t}</td><td>{views.esc(s.side)}</td>'
        f'<td class="arg">{views.esc(s.completion)}</td><td class="num">{s.logprob_a:.3f}</td>'
        f'<td class="num">{s.logprob_b:.3f}</td>{_cell(s.shift)}</tr>' for s in shifts)
    mean = sum(s.shift for s in shifts) / len(shifts)
    verdict = "B makes them more likely" if mean > 1e-6 else "B makes them less likely" if mean < -1e-6 else "no change"
    summary = (f'<div class="evo-compare-shift-mean" data-mean="{mean:.6f}">Mean shift B − A over {len(shifts)} '
               f"{'reply' if len(shifts) == 1 else 'replies'}: <b>{mean:+.3f}</b> nats ({verdict})</div>")
    table = ('<table class="evo-table" id="evo-compare-shift-table"><thead><tr><th>t</th><th>taken by</th>'
             f"<th>reply</th><th>log P · A ({views.esc(label_a)})</th><th>log P · B ({views.esc(label_b)})</th>"
             f"<th>B − A</th></tr></thead><tbody>{rows}</tbody></table>")
    return f'<div id="evo-compare-shift">{title}{summary}{table}</div>'


Scorer = Callable[[Sequence[tuple[AgentView, str]]], list[float]]


def lm_scorer(svc: Any, choice: str, adapter_lookup: Callable) -> Scorer:
    """log P(completion | the agent prompt of the state) under the model of an LM `choice`, with its adapter
    active, under the policy provider's lock."""
    from evorag_core.policy.agent import LMPolicy

    provider = svc.policies
    backend, adapter = provider.backend_for(choice, adapter_lookup)
    policy = LMPolicy(backend, svc.cfg.policy, svc.cfg.answer)

    def score(pairs: Sequence[tuple[AgentView, str]]) -> list[float]:
        with provider.lock:
            provider.use(adapter)
            return backend.sequence_logprobs([(policy.prompt(view), completion) for view, completion in pairs])

    return score


def compare_shift(svc: Any, corpus: Sequence[Passage], choices: tuple[str, str], records: tuple[EpisodeRecord,
                  EpisodeRecord], labels: tuple[str, str], adapter_lookup: Callable) -> str:
    """The shift table of two finished episodes (their passages looked up in `corpus`), or why there is none."""
    if not all(choice.startswith("lm:") for choice in choices):
        return shift_html(None, *labels, note="Log-probabilities need two language-model policies (the oracle "
                                              "has none).")
    by_pid = {p.pid: p for p in corpus}
    rows = shift_rows(*records, by_pid.__getitem__)
    scorers = [lm_scorer(svc, choice, adapter_lookup) for choice in choices]
    return shift_html(score_shifts(rows, *scorers), *labels)
