"""Does the 135M reader rank the right span higher when it reads only the span's own sentence? A probe of the LM's
span scores, before any ranker, on the questions' gold passages.

    python -m bench.reader_focus --split tune [--limit N] [--threads 2] [--out FILE]

On the questions (not yes/no) whose gold answer is among the span reader's candidates (`reader.span.
extract_candidates`, gold passages, at least two candidates), each candidate is scored by the embedded model in
several ways, and each way's ranking of the gold candidate is reported (mean reciprocal rank, share ranked first):

- `full`: log P(span + end | the reader's prompt over all the gold passages) - the reader's own LM score (`full_norm`:
  per token);
- `sentence`: the same prompt over only the sentence the span is in, with its passage's title (the best sentence when
  there are several; `sentence_norm`: per token);
- `sentence_pmi`: `sentence` minus the score under that prompt with a question-free "What is mentioned?", the
  question's own contribution; `full_pmi` alike over all the passages.

Splits as `bench/reader_types.py` (`tune`: HotpotQA dev 0:100, 2Wiki dev 0:50).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Sequence

from tqdm import tqdm

from bench.reader_types import ROOT, SPLITS, _backend, _questions
from evorag_core.config import load_config
from evorag_core.metrics import exact_match, mean, normalize_answer
from evorag_core.reader.prompt import ANSWER_SYSTEM_CTX
from evorag_core.reader.ranker import _fold, _sentences
from evorag_core.reader.span import SHORT_ANSWER_DEMOS, extract_candidates, span_prompt

NULL_QUESTION = "What is mentioned?"
WAYS = ("full", "full_norm", "sentence", "sentence_norm", "sentence_pmi", "full_pmi")


def gold_rank(scores: Sequence[float], gold: Sequence[int]) -> int:
    """1 + how many candidates score above the best-scored gold candidate (ties count for the gold)."""
    best = max(scores[k] for k in gold)
    return 1 + sum(1 for s in scores if s > best)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", choices=sorted(SPLITS), default="tune")
    p.add_argument("--limit", type=int, default=0, help="first N questions of each set (0 = all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "reader_focus_tune.json")
    args = p.parse_args(argv)
    be = _backend(args.threads)
    chars = load_config(None, {}).policy.passage_chars
    end = be.tokenizer.eos_token
    ranks: dict[str, list[int]] = {w: [] for w in WAYS}
    start = time.perf_counter()
    for _, q in tqdm(_questions(args.split, args.limit), desc="questions", unit="q"):
        if any(normalize_answer(a) in ("yes", "no") for a in q.answers):
            continue
        ps = [x for x in q.passages if x.pid in q.gold_pids]
        cands = extract_candidates(q.question, ps, chars)
        gold = [k for k, (s, _) in enumerate(cands) if exact_match(s, q.answers)]
        if not gold or len(cands) < 2:
            continue
        spans = [s + end for s, _ in cands]
        tokens = [len(be.tokenizer(s, add_special_tokens=False)["input_ids"]) for s in spans]
        full = be.score_choices(span_prompt(be, q.question, ps, chars, True), spans)
        null = be.score_choices(span_prompt(be, NULL_QUESTION, ps, chars, True), spans)
        sentence, pmi = [-1e9] * len(cands), [-1e9] * len(cands)
        groups: dict[str, list[int]] = {}
        for k, (s, _) in enumerate(cands):
            for x in ps:
                for sent in _sentences(x.text[:chars]):
                    if _fold(s) in _fold(sent) or _fold(s) in _fold(x.title):
                        groups.setdefault(f"[1] {x.title}: {sent}", []).append(k)
        for ctx, ks in groups.items():
            asked = be.score_choices(be.chat_prompt(ANSWER_SYSTEM_CTX, f"{ctx}\n\nQuestion: {q.question}\nAnswer:",
                                                    SHORT_ANSWER_DEMOS), [spans[k] for k in ks])
            free = be.score_choices(be.chat_prompt(ANSWER_SYSTEM_CTX, f"{ctx}\n\nQuestion: {NULL_QUESTION}\nAnswer:",
                                                   SHORT_ANSWER_DEMOS), [spans[k] for k in ks])
            for k, a, b in zip(ks, asked, free):
                sentence[k], pmi[k] = max(sentence[k], a), max(pmi[k], a - b)
        ways = {"full": full, "full_norm": [a / t for a, t in zip(full, tokens)], "sentence": sentence,
                "sentence_norm": [a / t for a, t in zip(sentence, tokens)], "sentence_pmi": pmi,
                "full_pmi": [a - b for a, b in zip(full, null)]}
        for w in WAYS:
            ranks[w].append(gold_rank(ways[w], gold))
    report = {"split": args.split, "sets": SPLITS[args.split], "limit": args.limit, "questions": len(ranks["full"]),
              "seconds": round(time.perf_counter() - start, 1),
              "ways": {w: {"mrr": mean([1 / r for r in ranks[w]]), "first": mean([float(r == 1) for r in ranks[w]])}
                       for w in WAYS}}
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for w, v in report["ways"].items():
        print(f"{w:14s} MRR {v['mrr']:.3f}  gold first {v['first']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
