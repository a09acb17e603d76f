"""Evaluation handlers: run a method on a slice of a data file, the summary of runs, the paired bootstrap between
two runs, and the per-question drill-down into a trace.

The runs listed are the store's evaluation runs (`Store.eval_runs`: every run the studio or `evorag eval` stored,
those of an earlier studio process included), plus this page's runs that were not stored (no store). A run is known
by its store name ('oracle on demo · 2026-11-29 09:00:38'); its results are read back from the store when it is
compared or opened (`evaluation.traces.load_run`), unless this page still holds them."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import plotly.graph_objects as go

from evorag_core.env.episode import EpisodeRecord
from evorag_core.evaluation.traces import EvalRecorder, load_run, run_name
from evorag_core.evaluation.runner import compare_results, evaluate
from evorag_core.methods.base import EpisodeMethod, QuestionResult
from evorag_core.methods.registry import LM_FREE_METHODS, METHODS, Method, build_method
from evorag_core.store import TraceFilter

from app.common import views
from app.common.handlers import adapter_lookup, short
from app.common.pickers import policy_options
from app.common.policies import BASE, LIVE
from app.common.services import Services
from app.common.stored_traces import open_trace

if TYPE_CHECKING:
    from evorag_core.runtime import Runtime

__all__ = ["EvalRun", "EVAL_PREFIX", "eval_method_options", "run_eval", "run_names", "eval_summary", "compare_runs",
           "eval_questions", "drill_down"]


@dataclass
class EvalRun:
    name: str
    method: str
    data: str
    summary: dict[str, Any]
    results: list[QuestionResult] = field(default_factory=list)
    path: str = ""  # the data file (to look passages up in a drill-down)
    episode_ids: dict[str, int] = field(default_factory=dict)  # question id -> stored trace (Traces tab)


EVAL_PREFIX = "eval:"  # method choices built by the method registry (`evorag_core.methods.registry`)


def eval_method_options(svc: Services) -> list[tuple[str, str]]:
    """The studio's policies plus every other `evorag eval` method (DynaKrag, ARENA, the pipeline baselines...)."""
    extra = [(f"eval · {name}", EVAL_PREFIX + name) for name in sorted(METHODS) if name not in LM_FREE_METHODS]
    return policy_options(svc) + extra


def _eval_method(svc: Services, rt: Runtime, method: str, script: str) -> Method:
    if method.startswith(EVAL_PREFIX):
        name = method[len(EVAL_PREFIX):]
        if name not in METHODS:
            raise ValueError(f"unknown evaluation method {name!r}; expected one of {', '.join(sorted(METHODS))}")
        return build_method(name, rt)
    policy = svc.policies.make(method, script=script, adapter_lookup=adapter_lookup(svc))
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
    recorder = _recorder(svc, rt, method, em)

    def progress(res: QuestionResult, done: list[QuestionResult]) -> None:
        if recorder is not None:
            recorder(res, done)
        if on_progress is not None:
            on_progress(len(done), total, res)

    summary, results = evaluate(em, questions, on_result=progress)
    runs = dict(runs or {})
    name = recorder.run if recorder is not None else (
        f"{len(runs) + 1}: {method} on {rt.dataset.name}[{start}:{start + len(questions)}]")
    run = EvalRun(name, em.label, rt.dataset.name, summary, results, str(rt.dataset.path),
                  dict(recorder.episode_ids) if recorder is not None else {})
    runs[name] = run
    return runs, run


def _free_run_name(store, name: str) -> str:
    """`name`, or `name (2)`, `name (3)`... when the store holds a run by that name already (run names have
    one-second resolution: two runs started within a second would otherwise be listed as one)."""
    candidate, k = name, 1
    while store.search_traces(TraceFilter(run=candidate), limit=1).total:
        k += 1
        candidate = f"{name} ({k})"
    return candidate


def _recorder(svc: Services, rt: Runtime, method: str, em: Method) -> EvalRecorder | None:
    """Stores the run's episodes (source 'eval') for the Traces tab; None when the store is unavailable."""
    store = svc.store_or_none()
    if store is None:
        return None
    name = method[len(EVAL_PREFIX):] if method.startswith(EVAL_PREFIX) else method
    adapter = None
    if name == LIVE:
        active = store.active_adapter()
        adapter = active.name if active is not None else None
    elif name.startswith("lm:") and name != BASE:
        adapter = name[3:]
    return EvalRecorder(store, method=name, label=em.label, run=_free_run_name(store, run_name(name, rt.dataset.name)),
                        data_path=str(rt.dataset.path), stage=svc.cfg.reward.stage, schedule=svc.cfg.reward.schedule,
                        adapter=adapter)


_SUMMARY_KEYS = ("n", "em", "f1", "avg_steps", "support_recall", "refusal_rate", "seconds")


def _listed(svc: Services, runs: dict[str, EvalRun] | None) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, method, summary) of every run the tab lists: the store's evaluation runs, oldest first, then this
    page's runs that are not in the store."""
    store = svc.store_or_none()
    stored = store.eval_runs() if store is not None else ()
    out = [(r.run, r.policy, {k: getattr(r, k) for k in _SUMMARY_KEYS}) for r in stored]
    names = {name for name, _, _ in out}
    return out + [(r.name, r.method, r.summary) for r in (runs or {}).values() if r.name not in names]


def run_names(svc: Services, runs: dict[str, EvalRun] | None) -> list[str]:
    """The runs the pickers offer, oldest first (see `_listed`)."""
    return [name for name, _, _ in _listed(svc, runs)]


def eval_summary(svc: Services, runs: dict[str, EvalRun] | None) -> str:
    rows = [[name, method, *("" if summary.get(k) is None else summary[k] for k in _SUMMARY_KEYS)]
            for name, method, summary in _listed(svc, runs)]
    return views.table_html(["run", "method", "n", "EM", "F1", "steps", "support recall", "refusal rate", "seconds"],
                            rows, table_id="evo-eval-summary", empty="No evaluation run yet.")


def _run(svc: Services, runs: dict[str, EvalRun] | None, name: str | None) -> EvalRun | None:
    """This page's run `name`, else the store's (read back); None when neither has it."""
    if not name:
        return None
    if name in (runs or {}):
        return runs[name]  # type: ignore[index]
    store = svc.store_or_none()
    if store is None:
        return None
    try:
        stored = load_run(store, name)
    except KeyError:
        return None
    return EvalRun(stored.run, stored.label, stored.dataset, {}, list(stored.results), stored.data_path or "",
                   stored.episode_ids)


def compare_runs(svc: Services, runs: dict[str, EvalRun] | None, a: str | None, b: str | None,
                 resamples: int = 10_000) -> str:
    """Paired bootstrap of EM, F1 and steps between two runs on their common questions."""
    if not a or not b:
        raise ValueError("choose two evaluation runs to compare")
    if a == b:
        raise ValueError("choose two different runs")
    run_a, run_b = _run(svc, runs, a), _run(svc, runs, b)
    if run_a is None or run_b is None:
        raise ValueError("choose two evaluation runs to compare")
    out = compare_results(run_a.results, run_b.results, resamples=int(resamples))
    rows = []
    for metric in ("em", "f1", "steps"):
        r = out[metric]
        rows.append([metric, r["mean_a"], r["mean_b"], f"{r['diff']:+.4f}",
                     f"[{r['ci_low']:+.4f}, {r['ci_high']:+.4f}]", f"{r['p_value']:.4f}", r["verdict"]])
    head = f'<div class="evo-h">A = {views.esc(a)} · B = {views.esc(b)} · {out["n"]} common questions · {int(resamples)} resamples</div>'
    return head + views.table_html(["metric", "mean A", "mean B", "A − B", "95% CI", "p", "verdict"], rows,
                                   table_id="evo-bootstrap")


def eval_questions(svc: Services, runs: dict[str, EvalRun] | None, name: str | None) -> list[tuple[str, str]]:
    run = _run(svc, runs, name)
    if run is None:
        return []
    return [(f"{'✓' if r.em else '✗'} {r.question_id} · {short(r.question, 60)}", r.question_id) for r in run.results]


def drill_down(svc: Services, runs: dict[str, EvalRun] | None, name: str | None, question_id: str | None
               ) -> tuple[str, str, go.Figure]:
    """The trace of one evaluated question: (summary HTML, trace HTML, contributions figure). Environment episodes
    show their steps with signals; DynaKrag its controller trace; ARENA its structured answer over the references."""
    run = _run(svc, runs, name)
    if run is None or not question_id:
        raise ValueError("choose a run and a question")
    res = next((r for r in run.results if r.question_id == question_id), None)
    if res is None:
        raise KeyError(f"question {question_id!r} is not in run {name!r}")
    stored = run.episode_ids.get(question_id)
    head = (f'<div class="evo-status"><div class="evo-q">{views.esc(res.question)}</div><div class="evo-meta">'
            f"prediction: <b>{views.esc(res.prediction if res.prediction is not None else '(none)')}</b> · gold: "
            f"{views.esc(', '.join(res.gold))} · EM {res.em:.0f} · F1 {res.f1:.2f} · steps {res.steps}"
            f"{'' if res.total_return is None else f' · return {res.total_return:+.3f}'}</div></div>")
    empty = views.contributions_figure(None)
    if stored is not None:  # the stored trace, drawn as the Traces tab draws it, with its link
        view = open_trace(svc, stored)
        head += (f'<div class="evo-meta">stored as trace <a id="evo-drill-trace-link" href="{views.esc(view.link)}">'
                 f"#{stored}</a> (Traces tab)</div>")
        return head, view.steps + view.passages + view.verdicts, view.contributions
    if res.extras.get("episode"):
        record = EpisodeRecord.from_dict(res.extras["episode"])
        return head, views.steps_table(record), views.contributions_figure(record)
    if res.extras.get("arena"):
        from app.common.arena_view import render_arena_answer

        arena = res.extras["arena"]
        rt = svc.runtime(run.path or None)
        by_pid = {p.pid: p for q in rt.dataset.questions for p in q.passages}
        refs = [by_pid[pid] for pid in arena.get("references", []) if pid in by_pid]
        body = render_arena_answer(refs, arena.get("text", ""), gold_ids=arena.get("gold_ids", ()),
                                   gold_answers=res.gold, anchor=f"arena-{question_id}")
        return head, body, empty
    if res.trace and all(isinstance(t, dict) and "valid" in t for t in res.trace):
        from app.common.dynakrag_view import trace_html

        return head, trace_html(res.trace), empty
    rows = [[t.get("t", i + 1), json.dumps(dict(t), ensure_ascii=False)] for i, t in enumerate(res.trace)]
    return head, views.table_html(["step", "trace"], rows, empty="This method records no trace."), empty
