"""How many of the agent's passages should its reader read? The agent's finished episodes re-read at its ANSWER step
with other `policy.reader_passages` limits, the same reader otherwise.

    python -m bench.reader_passages --runs RUNS/hotpot-pooled__agent.jsonl[.gz] \\
        --data ../shared/benchmarks/hotpotqa_dev300.jsonl --limits 5,4,3,2 [--questions A:B] \\
        [--ranker-path bench/results/ranker_dev.json] [--set KEY=VALUE]... [--out FILE]

With greedy decisions the agent's searches do not depend on what its reader reads (the hop planner and the label
scores decide them), so re-reading each episode's last state under another limit gives exactly the answers a run
with that limit would give. The state is rebuilt from the episode's record (`env.replay.step_views`) and read through
`policy.agent.reader_passages` and the span reader, as the agent reads it. The first limit is the one the runs used:
the re-read must give back the recorded answers (`reproduced`), else the comparison is void. Episodes that did not end
in ANSWER keep their outcome under every limit. Per limit: EM, F1, the answers changed, F1 and EM against the first
limit (paired bootstrap, 10,000 resamples), and the same on the questions whose every gold passage was retrieved.
The report keeps each limit's answers by question id; `--before FILE` pairs each limit with the same limit of an
earlier report (e.g. the same episodes read by another reader: `--set answer.KEY=VALUE`), EM and F1.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tqdm import tqdm

from bench.reader_types import _commit
from evorag_core.config import home_dir, load_config
from evorag_core.data.corpus import pool_passages
from evorag_core.data.datasets import load_dataset
from evorag_core.env.actions import action_name
from evorag_core.env.episode import EpisodeRecord
from evorag_core.env.replay import step_views
from evorag_core.metrics import exact_match, f1_score, mean, paired_bootstrap
from evorag_core.policy.agent import reader_passages

if TYPE_CHECKING:
    from evorag_core.config import Config
    from evorag_core.reader.answers import Reader
    from evorag_core.types import Passage, Question

ROOT = Path(__file__).resolve().parents[1]


def _rows(path: Path) -> list[dict[str, Any]]:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _span(text: str) -> tuple[int, int]:
    a, _, b = text.partition(":")
    return int(a), int(b)


@dataclass(frozen=True)
class RunContext:
    """What re-reading a run's episodes needs (`run_context`)."""

    cfg: "Config"  # the run's overrides (`--set`) and the given ranker
    questions: "list[Question]"  # the data file's questions
    rows: list[dict[str, Any]]  # the run's rows within `--questions`
    lookup: "Callable[[str], Passage]"  # pid (or an alias of it) -> the pooled corpus's passage
    canonical: Callable[[Iterable[str]], list[str]]  # pids -> their pooled-corpus pids, in order, without repeats
    reader: "Reader"  # on the embedded backend, as the runs read


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments `run_context` reads: --runs, --data, --questions, --ranker-path, --threads, --set."""
    p.add_argument("--runs", type=Path, required=True, help="a bench.agent run file of the agent (.jsonl or .jsonl.gz)")
    p.add_argument("--data", type=Path, required=True, help="the data file the runs came from (its pooled corpus)")
    p.add_argument("--questions", default="", help="A:B, the questions' positions in the data file (default: all)")
    p.add_argument("--ranker-path", default=str(ROOT / "bench" / "results" / "ranker_dev.json"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config overrides, as the runs had them (e.g. policy.model=PATH)")


def run_context(args: argparse.Namespace) -> RunContext:
    """The context of a re-read from the parsed arguments --runs, --data, --questions, --ranker-path, --threads and
    --set: the data file's questions and its pooled corpus (what the runs searched), the run's rows, the reader."""
    import torch

    from evorag_core.lm.hf_backend import TransformersBackend
    from evorag_core.reader.answers import Reader

    torch.set_num_threads(args.threads)
    cfg = load_config(None, {"answer.ranker_path": args.ranker_path, "policy.device": "cpu",
                             **dict(kv.split("=", 1) for kv in args.overrides)})
    questions = load_dataset(args.data).questions
    order = {q.id: i for i, q in enumerate(questions)}
    corpus = pool_passages(p for q in questions for p in q.passages)
    table = {ps.pid: ps for ps in corpus.passages}
    lo, hi = _span(args.questions) if args.questions else (0, len(questions))
    backend = TransformersBackend(cfg.policy, home_dir())
    return RunContext(
        cfg, questions, [r for r in _rows(args.runs) if lo <= order.get(r["question_id"], -1) < hi],
        lambda pid: table[corpus.aliases.get(pid, pid)],
        lambda pids: list(dict.fromkeys(corpus.aliases.get(x, x) for x in pids)),
        Reader(backend, cfg.answer, cfg.policy.passage_chars, cfg.policy.max_answer_tokens))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(p)
    p.add_argument("--limits", default="5,3", help="reader_passages limits, the runs' own first")
    p.add_argument("--before", type=Path, default=None, help="an earlier report: each limit paired with its answers")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    limits = [int(x) for x in args.limits.split(",")]
    before = json.loads(args.before.read_text()) if args.before else None

    ctx = run_context(args)
    rows, reader, lookup = ctx.rows, ctx.reader, ctx.lookup
    canonical = lambda pids: set(ctx.canonical(pids))  # noqa: E731
    gold = {q.id: (q.answers, canonical(q.gold_pids)) for q in ctx.questions}

    preds: dict[int, list[str]] = {k: [] for k in limits}
    all_retrieved: list[bool] = []
    reproduced = answered = 0
    start = time.perf_counter()
    for row in tqdm(rows, desc="re-read", unit="q"):
        record = EpisodeRecord.from_dict(row["extras"]["episode"])
        answers, gold_pids = gold[row["question_id"]]
        retrieved = {pid for s in record.steps for pid in s.passages}
        all_retrieved.append(bool(gold_pids) and gold_pids <= canonical(retrieved))
        last = record.steps[-1] if record.steps else None
        if last is None or action_name(last.action) != "ANSWER":
            for k in limits:
                preds[k].append(row["prediction"] or "")
            continue
        answered += 1
        view = step_views(record, lookup)[-1]
        for k in limits:
            preds[k].append(reader.read(view.question, reader_passages(view, k))[0].text)
        reproduced += preds[limits[0]][-1] == row["prediction"]
    seconds = time.perf_counter() - start
    golds = [gold[r["question_id"]][0] for r in rows]
    em = {k: [exact_match(a, g) for a, g in zip(preds[k], golds)] for k in limits}
    f1 = {k: [f1_score(a, g) for a, g in zip(preds[k], golds)] for k in limits}
    base = limits[0]
    sub = [i for i, full in enumerate(all_retrieved) if full]
    report: dict[str, Any] = {
        "commit": _commit(), "runs": str(args.runs), "data": str(args.data), "questions": args.questions or "all",
        "n": len(rows), "answered": answered, "reproduced": reproduced, "ranker_path": args.ranker_path,
        "overrides": args.overrides, "seconds": round(seconds, 1),
        "every_gold_retrieved": len(sub), "limits": {},
    }
    for k in limits:
        entry: dict[str, Any] = {"em": mean(em[k]), "f1": mean(f1[k]),
                                 "changed": sum(a != b for a, b in zip(preds[k], preds[base])),
                                 "f1_every_gold_retrieved": mean([f1[k][i] for i in sub]) if sub else None}
        if k != base:
            entry["f1_vs_first"] = asdict(paired_bootstrap(f1[k], f1[base]))
            entry["em_vs_first"] = asdict(paired_bootstrap(em[k], em[base]))
            if sub:
                entry["f1_vs_first_every_gold_retrieved"] = asdict(paired_bootstrap([f1[k][i] for i in sub],
                                                                                    [f1[base][i] for i in sub]))
        if before is not None and str(k) in before["limits"]:
            earlier = before["limits"][str(k)]["answers"]
            ids = [r["question_id"] for r in rows]
            if set(ids) - set(earlier):
                raise SystemExit(f"--before {args.before}: limit {k} lacks answers to some of these questions")
            em_b = [exact_match(earlier[i], g) for i, g in zip(ids, golds)]
            f1_b = [f1_score(earlier[i], g) for i, g in zip(ids, golds)]
            entry["vs_before"] = {"before": str(args.before), "em_before": mean(em_b), "f1_before": mean(f1_b),
                                  "changed": sum(a != earlier[i] for a, i in zip(preds[k], ids)),
                                  "em": asdict(paired_bootstrap(em[k], em_b)),
                                  "f1": asdict(paired_bootstrap(f1[k], f1_b))}
            print(f"limit {k} vs before: EM {mean(em_b):.3f} -> {entry['em']:.3f}, F1 {mean(f1_b):.3f} -> "
                  f"{entry['f1']:.3f} (p {entry['vs_before']['f1']['p_value']:.3f}), changed "
                  f"{entry['vs_before']['changed']}", file=sys.stderr)
        entry["answers"] = {r["question_id"]: a for r, a in zip(rows, preds[k])}
        report["limits"][str(k)] = entry
        print(f"limit {k}: EM {entry['em']:.3f} F1 {entry['f1']:.3f} changed {entry['changed']}"
              + (f" dF1 {entry['f1_vs_first']['diff']:+.3f} (p {entry['f1_vs_first']['p_value']:.3f})"
                 if k != base else ""), file=sys.stderr)
    print(f"reproduced {reproduced} of {answered} recorded answers at limit {base}", file=sys.stderr)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
