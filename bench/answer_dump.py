"""Dump what the span reader sees and scores, per question, for fitting and evaluating the answer ranker offline.

    python -m bench.answer_dump --sets hotpot:0:300,2wiki:0:182,musique:0:146 --out DIR/fixedk.jsonl [--threads 2]
    python -m bench.answer_dump --agent-runs RUNS/hotpot-pooled_agent.jsonl --set hotpot --out DIR/agent.jsonl
    python -m bench.answer_dump --sets hotpot:0:60,2wiki:0:50 --passages gold --out DIR/gold.jsonl

One JSON line per question (resumable: questions already in --out are skipped): the set, question id, question,
gold answers, the reader's passages (pid, title, text cut to the reader's characters) and, from the embedded model
under the span reader's prompt (`SpanReader.prompt`, demonstrations on):

- `candidates`: every candidate span of `reader.span.extract_candidates` with its source passage index, its raw
  log P(span + end-of-turn | prompt) and its token count;
- `yes_no`: whether the reader treats the question as yes/no, the raw margin log P(yes) - log P(no) and the
  content-free margin (the calibration term).

The passages are those `fixed-k` reads (the question's top-`env.top_k` hybrid hits over the set's pooled corpus);
with `--passages gold` the question's gold passages (in file order: both hops in hand, which fixed-k's passages
rarely give a second-hop question); with --agent-runs those the agent's reader read at its ANSWER step
(`reader_pids` of the episode's last step; a question the agent refused or left unanswered gets a row with no
passages, so it scores as no answer). Nothing here depends on the ranker, so one dump serves every ranker fitted on
it (`bench/answer_ranker.py`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from evorag_core.config import home_dir, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl", "musique": "musique_dev146.jsonl"}


def _done(path: Path) -> set[tuple[str, str]]:
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out.add((row["set"], row["id"]))
    return out


def _agent_items(runs: Path) -> dict[str, list[str]]:
    """question id -> the reader's pids at the agent's ANSWER step."""
    out: dict[str, list[str]] = {}
    for line in runs.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        steps = row.get("extras", {}).get("episode", {}).get("steps", [])
        pids = steps[-1].get("info", {}).get("reader_pids") if steps else None
        out[row["question_id"]] = pids or []  # [] : refused or never answered (a row with no candidates: no answer)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", default="hotpot:0:300")
    p.add_argument("--agent-runs", type=Path, default=None)
    p.add_argument("--set", default="hotpot", help="with --agent-runs: the runs' data set")
    p.add_argument("--passages", choices=("fixed-k", "gold"), default="fixed-k",
                   help="the reader's passages: fixed-k's retrieval, or the question's gold passages")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.agent_runs and args.passages != "fixed-k":
        p.error("--passages is for --sets; with --agent-runs the passages are the agent's")
    import torch

    torch.set_num_threads(args.threads)
    from evorag_core.lm.backends import load_backend
    from evorag_core.reader.span import SpanReader, _raw_candidates, either_or, extract_candidates, is_yes_no

    cfg = load_config(None, {"env.corpus": "pooled"})
    home = home_dir()
    specs = ([(args.set, None, None)] if args.agent_runs else
             [(k, int(a), int(b)) for k, a, b in (s.split(":") for s in args.sets.split(","))])
    done = _done(args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    backend = reader = None
    chars = cfg.policy.passage_chars
    with args.out.open("a") as sink:
        for key, start, end in specs:
            rt = Runtime(cfg, home, load_dataset(BENCH / FILES[key]))
            if backend is None:
                backend, _ = load_backend(rt, None)
                reader = SpanReader(backend, cfg.answer, chars)
            by_pid = {p.pid: p for p in rt.pooled_corpus.passages}
            retriever = rt.retriever_for(rt.dataset.questions[0])
            if args.agent_runs:
                agent = _agent_items(args.agent_runs)
                questions = [q for q in rt.dataset.questions if q.id in agent]
            else:
                questions = rt.dataset.questions[start:end]
            for q in tqdm(questions, desc=key, file=sys.stderr):
                if (key, q.id) in done:
                    continue
                if args.agent_runs:
                    passages = [by_pid[pid] for pid in agent[q.id]]
                    if not passages:
                        sink.write(json.dumps({"set": key, "id": q.id, "question": q.question,
                                               "answers": list(q.answers), "type": q.type, "passages": [],
                                               "options": [], "yes_no": {"is": False}, "candidates": [],
                                               "answered": False}) + "\n")
                        continue
                elif args.passages == "gold":
                    passages = [p for p in q.passages if p.pid in q.gold_pids]
                else:
                    passages = [by_pid[h.pid] for h in retriever.search(q.question, cfg.env.top_k)]
                cands = extract_candidates(q.question, passages, reader.chars, cfg.answer.max_words,
                                           cfg.answer.max_candidates)
                options = either_or(q.question, [s for s, _ in _raw_candidates(passages, reader.chars)], passages,
                                    reader.chars)
                yn = is_yes_no(q.question, options)
                row = {"set": key, "id": q.id, "question": q.question, "answers": list(q.answers),
                       "type": q.type,
                       "gold_pids": sorted(q.gold_pids),
                       "passages": [{"pid": p.pid, "title": p.title, "text": p.text[:reader.chars]} for p in passages],
                       "options": options, "yes_no": {"is": yn}}
                if yn:
                    prompt = reader.prompt(q.question, passages)
                    row["yes_no"].update(raw=reader._label_margin(prompt), content_free=reader._content_free_margin())
                if cands:
                    scores = reader.span_scores(q.question, passages, [s for s, _ in cands])  # length_alpha 0: raw
                    row["candidates"] = [{"text": s, "source": i, "lm": sc, "tokens": reader._n_tokens(s)}
                                         for (s, i), sc in zip(cands, scores)]
                else:
                    row["candidates"] = []
                sink.write(json.dumps(row) + "\n")
                sink.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
