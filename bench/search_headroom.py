"""How much could better search decisions add, with this reader? Upper bounds from the agent's own greedy episodes.

    python -m bench.search_headroom --runs RUNS/hotpot-pooled__agent.jsonl[.gz] \\
        --data ../shared/benchmarks/hotpotqa_dev300.jsonl [--questions A:B] \\
        [--ranker-path bench/results/ranker_dev.json] [--set KEY=VALUE]... [--out FILE]

Every state of each episode (`env.replay.step_views`) after its first search is read as the agent reads its last
one (`policy.agent.reader_passages`, the span reader). Per question, F1 of:
- `agent`: the recorded answer; the last state re-read must give it back (`reproduced`), else the bounds are void;
- `oracle_stop`: the best answer along the episode's own path (had it answered after 1, 2, ... searches): what a
  perfect decision to stop could reach with the same queries;
- `oracle_evidence`: the last state plus one more hop holding every gold passage the episode did not retrieve (a
  perfect further search, read as the reader reads a hop); the last state when nothing was missing;
- `oracle_search`: the better of the two: no choice of when to search or what to search for does better with this
  reader and its passage selection;
- `gold_only`: the reader over the gold passages alone (the reader's own ceiling, no distractors).
Each bound against `agent`: the paired difference with its 95 % interval and p (bootstrap, 10,000 resamples), on all
questions and on those whose first search missed a gold passage. Search decisions (the hop planner, the policy's
labels, any round that trains them) can move F1 by at most `oracle_search - agent` here; the rest is the reader's.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from bench.reader_passages import add_run_arguments, run_context
from bench.reader_types import _commit
from bench.record import settings, write_json
from evorag_core.env.state import AgentView, Hop
from evorag_core.metrics import mean, paired_bootstrap
from evorag_core.types import Passage

__all__ = ["QuestionBounds", "oracle_view", "summarize", "main"]

BOUNDS = ("oracle_stop", "oracle_evidence", "oracle_search", "gold_only")


@dataclass(frozen=True)
class QuestionBounds:
    qid: str
    agent: float  # the recorded answer's F1
    path: tuple[float, ...]  # F1 of answering after 1, 2, ... searches along the episode (empty: no search)
    evidence: float  # the last state plus the missing gold passages
    gold_only: float  # the reader over the gold passages alone
    first_missed: bool  # the first search left a gold passage out
    full_support: bool  # the episode retrieved every gold passage

    @property
    def oracle_stop(self) -> float:
        return max((self.agent, *self.path))

    @property
    def oracle_evidence(self) -> float:
        return max(self.agent, self.evidence)

    @property
    def oracle_search(self) -> float:
        return max(self.oracle_stop, self.oracle_evidence)


def oracle_view(view: AgentView, missing: Sequence[Passage]) -> AgentView:
    """`view` with one more hop whose ranking is `missing` (a perfect further search); `view` itself when nothing
    is missing."""
    if not missing:
        return view
    return AgentView(view.question, (*view.chain, Hop("(every missing gold passage)", tuple(missing))),
                     view.dropped, view.t + 1, view.t_max)


def _compare(rows: Sequence[QuestionBounds]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows), "agent": mean(r.agent for r in rows)}
    for name in BOUNDS:
        values = [getattr(r, name) for r in rows]
        out[name] = mean(values)
        if name != "gold_only":  # gold_only is no bound on the agent (it can be lower): its mean alone
            out[f"{name}_minus_agent"] = asdict(paired_bootstrap(values, [r.agent for r in rows]))
    return out


def summarize(rows: Sequence[QuestionBounds]) -> dict[str, Any]:
    """The bounds' means and their paired differences from the agent: on every question, on those whose first
    search missed a gold passage, and on those whose episode retrieved every gold passage."""
    out = {"all": _compare(rows)}
    for key, keep in (("first_search_missed", lambda r: r.first_missed), ("full_support", lambda r: r.full_support)):
        sub = [r for r in rows if keep(r)]
        out[key] = _compare(sub) if sub else {"n": 0}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(p)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)

    from evorag_core.env.actions import action_name
    from evorag_core.env.episode import EpisodeRecord
    from evorag_core.env.replay import step_views
    from evorag_core.metrics import f1_score
    from evorag_core.policy.agent import reader_passages

    ctx = run_context(args)
    reader, lookup, limit = ctx.reader, ctx.lookup, ctx.cfg.policy.reader_passages
    by_id = {q.id: q for q in ctx.questions}

    def read(view: AgentView) -> str:
        return reader.read(view.question, reader_passages(view, limit))[0].text

    rows: list[QuestionBounds] = []
    answered = reproduced = 0
    start = time.perf_counter()
    for run in tqdm(ctx.rows, desc="states", unit="q"):
        q = by_id[run["question_id"]]
        record = EpisodeRecord.from_dict(run["extras"]["episode"])
        gold = ctx.canonical(q.gold_pids)
        views = step_views(record, lookup) if record.steps else []
        searched = [v for v in views if v.chain]  # the states after 1, 2, ... searches
        texts = [read(v) for v in searched]
        if record.steps and action_name(record.steps[-1].action) == "ANSWER":
            answered += 1
            reproduced += bool(texts) and views[-1] is searched[-1] and texts[-1] == run["prediction"]
        last = views[-1] if views else None  # an episode that ended otherwise (a refusal, T_max) keeps its outcome
        got = {x.pid for x in last.passages} if last is not None else set()
        missing = [lookup(pid) for pid in gold if pid not in got]
        first = {x.pid for x in searched[0].chain[0].passages} if searched else set()
        evidence = f1_score(read(oracle_view(last, missing)), q.answers) if last is not None and missing else run["f1"]
        only = AgentView(q.question, (Hop(q.question, tuple(lookup(pid) for pid in gold)),), (), 1, 1)
        rows.append(QuestionBounds(run["question_id"], float(run["f1"]), tuple(f1_score(t, q.answers) for t in texts),
                                   evidence, f1_score(read(only), q.answers) if gold else 0.0,
                                   bool(gold) and not set(gold) <= first, bool(gold) and not missing))
    seconds = time.perf_counter() - start
    summary = summarize(rows)
    report = {"commit": _commit(), "settings": settings(args), "answered": answered, "reproduced": reproduced,
              "seconds": round(seconds, 1), "summary": summary, "questions": [asdict(r) for r in rows]}
    whole = summary["all"]
    print(f"n {whole['n']}: agent F1 {whole['agent']:.3f}; oracle stop {whole['oracle_stop']:.3f}, oracle evidence "
          f"{whole['oracle_evidence']:.3f}, oracle search {whole['oracle_search']:.3f}, gold only "
          f"{whole['gold_only']:.3f}; reproduced {reproduced} of {answered}", file=sys.stderr)
    if args.out:
        write_json(args.out, report)
        print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
