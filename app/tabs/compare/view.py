"""Compare: the same question run by two policies (base vs an adapter, or two adapters), step aligned.

Pure functions over two finished `EpisodeRecord`s: `compare` aligns them by step t and grades both outcomes (the
grading badge's EM/F1, support found); `comparison_html` renders the summary (return, answer, grade, steps, gold
passages found, and their differences B − A) and the aligned steps, with the first step where the actions differ
marked. The handler that runs the two episodes is `handlers.compare`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from evorag_core.env.actions import action_to_dict
from evorag_core.env.episode import EpisodeRecord, StepRecord
from evorag_core.types import Question

from app.common import grading_view, views
from app.common.grading_view import Grade

__all__ = ["Side", "AlignedStep", "Comparison", "compare", "comparison_html", "side_labels"]


@dataclass(frozen=True)
class Side:
    label: str  # the policy as the page names it
    record: EpisodeRecord
    grade: Grade | None  # None: the question has no gold answer (a typed question)
    gold_found: int  # gold passages among everything the episode retrieved
    gold_total: int
    episode_id: int | None = None  # the store's row (Traces), None without a store

    @property
    def outcome(self) -> str:
        if self.record.answer is not None:
            return self.record.answer
        return "refused" if self.record.refused else "no answer (ran out of steps)"


@dataclass(frozen=True)
class AlignedStep:
    t: int
    a: StepRecord | None  # None: policy A had already stopped
    b: StepRecord | None

    @property
    def same_action(self) -> bool:
        return self.a is not None and self.b is not None and _name(self.a) == _name(self.b)

    @property
    def same(self) -> bool:
        """Same action and the same argument (query or answer, compared without case and extra spaces)."""
        return self.same_action and _norm(_argument(self.a)) == _norm(_argument(self.b))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Comparison:
    question: str
    gold: str
    a: Side
    b: Side
    steps: tuple[AlignedStep, ...]

    @property
    def first_difference(self) -> int | None:
        """The first t where the two episodes took different steps (or one had stopped); None if identical."""
        return next((row.t for row in self.steps if not row.same), None)

    @property
    def return_diff(self) -> float:
        return self.b.record.total_return - self.a.record.total_return


def _name(step: StepRecord) -> str:
    return action_to_dict(step.action)["action"]


def _argument(step: StepRecord) -> str:
    act = action_to_dict(step.action)
    return str(act.get("query") or act.get("answer") or "")


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _side(question: Question, record: EpisodeRecord, label: str, episode_id: int | None) -> Side:
    gold = set(record.gold_pids or question.gold_pids)
    found = len(gold & set(record.retrieved))
    return Side(label, record, grading_view.episode_grade(question, record), found, len(gold), episode_id)


def compare(question: Question, a: EpisodeRecord, label_a: str, b: EpisodeRecord, label_b: str,
            ids: tuple[int | None, int | None] = (None, None)) -> Comparison:
    """Both episodes (finished, on `question`) aligned by t; the longer one's extra steps face None."""
    for record in (a, b):
        if record.question_id != question.id:
            raise ValueError(f"episode {record.episode_id} is on question {record.question_id}, not {question.id}")
    steps_a = {s.t: s for s in a.steps}
    steps_b = {s.t: s for s in b.steps}
    ts = sorted(set(steps_a) | set(steps_b))
    rows = tuple(AlignedStep(t, steps_a.get(t), steps_b.get(t)) for t in ts)
    return Comparison(question.question, grading_view.gold_text(question), _side(question, a, label_a, ids[0]),
                      _side(question, b, label_b, ids[1]), rows)


# -- rendering -------------------------------------------------------------------------------------------------------

def _step_cell(step: StepRecord | None) -> str:
    if step is None:
        return '<td class="cmp-none">—</td><td class="num">–</td>'
    name = _name(step)
    return (f'<td><span class="act act-{name.lower()}">{name}</span> <span class="arg">'
            f"{views.esc(_argument(step))}</span></td><td class=\"num\">{step.reward:+.3f}</td>")


def _grade_cell(side: Side) -> str:
    return grading_view.grade_html(side.grade).replace('id="evo-grade" ', "") or "<i>no gold answer</i>"


def _diff(value: float, digits: int = 3, *, neutral: bool = False) -> str:
    """B − A, green when higher, red when lower; `neutral` (steps: fewer is neither better nor worse) uncoloured."""
    cls = "zero" if neutral else "pos" if value > 1e-12 else "neg" if value < -1e-12 else "zero"
    return f'<td class="num {cls}">{value:+.{digits}f}</td>'


def _episode_link(side: Side) -> str:
    return f' <a href="?episode={side.episode_id}" class="cmp-link">#{side.episode_id}</a>' if side.episode_id else ""


def comparison_html(c: Comparison) -> str:
    """The summary table (A, B, B − A) and the step-aligned table; the first differing step is marked."""
    a, b = c.a, c.b
    f1 = [s.grade.f1 if s.grade else None for s in (a, b)]
    f1_diff = _diff(f1[1] - f1[0], 2) if None not in f1 else "<td>–</td>"  # type: ignore[operator]
    summary = (
        '<table class="evo-table" id="evo-compare-summary"><thead><tr><th></th>'
        f"<th>A · {views.esc(a.label)}{_episode_link(a)}</th><th>B · {views.esc(b.label)}{_episode_link(b)}</th>"
        "<th>B − A</th></tr></thead><tbody>"
        f'<tr><td>answer</td><td class="arg">{views.esc(a.outcome)}</td><td class="arg">{views.esc(b.outcome)}</td>'
        "<td></td></tr>"
        f"<tr><td>grade</td><td>{_grade_cell(a)}</td><td>{_grade_cell(b)}</td>{f1_diff}</tr>"
        f'<tr><td>return</td><td class="num">{a.record.total_return:+.3f}</td>'
        f'<td class="num">{b.record.total_return:+.3f}</td>{_diff(c.return_diff)}</tr>'
        f'<tr><td>steps</td><td class="num">{len(a.record.steps)}</td><td class="num">{len(b.record.steps)}</td>'
        f"{_diff(len(b.record.steps) - len(a.record.steps), 0, neutral=True)}</tr>"
        f'<tr><td>gold passages found</td><td class="num">{a.gold_found}/{a.gold_total}</td>'
        f'<td class="num">{b.gold_found}/{b.gold_total}</td>{_diff(b.gold_found - a.gold_found, 0)}</tr>'
        "</tbody></table>"
    )
    first = c.first_difference
    verdict = ("The two policies took the same steps." if first is None
               else f"They first differ at step t={first}.")
    rows = []
    for row in c.steps:
        cls = "cmp-same" if row.same else "cmp-diff"
        mark = ' <span class="badge">first difference</span>' if row.t == first else ""
        rows.append(f'<tr class="{cls}" data-t="{row.t}"><td>{row.t}{mark}</td>{_step_cell(row.a)}'
                    f"{_step_cell(row.b)}</tr>")
    aligned = (
        '<table class="evo-table" id="evo-compare-steps"><thead><tr><th>t</th><th>A: action</th><th>R<sub>t</sub></th>'
        f"<th>B: action</th><th>R<sub>t</sub></th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    head = (f'<div class="evo-compare-q"><b>{views.esc(c.question)}</b> · gold: {views.esc(c.gold)}</div>'
            f'<div class="evo-compare-verdict" data-first-difference="{first if first is not None else ""}">'
            f"{views.esc(verdict)}</div>")
    return f'<div id="evo-compare">{head}{summary}{aligned}</div>'


def side_labels(choices: Sequence[tuple[str, str]], a: str, b: str) -> tuple[str, str]:
    """The dropdown labels of two policy values (the value itself when it is not listed)."""
    names = {value: label for label, value in choices}
    return names.get(a, a), names.get(b, b)
