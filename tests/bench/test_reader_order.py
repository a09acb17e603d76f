"""bench.reader_order's comparison on made-up dumped rows (no model): the reversed-order scores hold the signal,
the dumped ones do not, and each variant's ranker is refit on its own scores (the LM's cached scores are given)."""
from __future__ import annotations

import json
import random

from bench import reader_order as ro


def _row(i: int, rng: random.Random) -> dict:
    names = ["Alpha Beta", "Gamma Delta", "Epsilon Zeta"]
    right = rng.randrange(3)
    return {"set": "hotpot", "id": f"q{i}", "question": "Which place is it?", "answers": [names[right]],
            "options": [], "yes_no": {"is": False}, "correct": [k == right for k in range(3)],
            "passages": [{"pid": f"p{k}", "title": n, "text": f"{n} is a place."} for k, n in enumerate(names)],
            "candidates": [{"text": n, "source": k, "lm": -1.0, "tokens": 3} for k, n in enumerate(names)]}


def test_the_variant_whose_scores_carry_the_answer_wins(tmp_path):
    rng = random.Random(0)
    rows = [_row(i, rng) for i in range(40)]
    scores = tmp_path / "reversed.jsonl"
    scores.write_text("".join(json.dumps({"key": ro._key(r), "lm_rev": [-0.5 if c else -2.0 for c in r["correct"]]})
                              + "\n" for r in rows))
    rev = ro.reversed_scores(rows, scores, threads=1)  # every row cached: no model is loaded
    report = ro.compare(rows, rev)
    assert report["reversed"]["ranker_em"] == 1.0 and report["reversed"]["lm_only_em"] == 1.0
    assert report["retrieval"]["ranker_em"] < 0.6  # equal dumped scores: nothing to rank by
    assert report["reversed"]["f1_minus_retrieval"]["diff"] > 0.4
