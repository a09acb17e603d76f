"""bench.answer_ranker's out-of-fold evaluation with `--fit-agent`, on made-up dumped rows of real shared question
ids (no model): the agent's states carry a signal the fixed-k states do not, and only the fit that sees the agent's
other folds uses it."""
from __future__ import annotations

import json

import pytest

from bench import answer_ranker as ar


def _ids(benchmarks, start: int, end: int) -> list[str]:
    lines = (benchmarks / ar.FILES["hotpot"]).read_text().splitlines()[start:end]
    return [json.loads(line)["id"] for line in lines]


def _row(qid: str, pos: int, right: int, title_marks_right: bool) -> dict:
    names = ["Alpha", "Beta", "Gamma"]
    features = [{"lm": -0.5 if k == 0 else -1.0 - 0.1 * k,
                 "is_title": float(title_marks_right and k == right)} for k in range(3)]
    ev = ar._is_eval("hotpot", pos)
    return {"set": "hotpot", "id": qid, "pos": pos, "eval": ev, "fold": pos % ar.FOLDS if ev else -1,
            "question": "Which one?", "answers": [names[right]], "type": "bridge", "options": [],
            "yes_no": {"is": False}, "candidates": [{"text": n, "lm": f["lm"]} for n, f in zip(names, features)],
            "features": features, "correct": [k == right for k in range(3)]}


def test_fit_agent_learns_what_only_the_agent_states_show(benchmarks):
    fixed = [_row(q, i, 0, False) for i, q in enumerate(_ids(benchmarks, 0, 100))]  # the LM's top is right
    agent = [_row(q, 100 + i, 1 + i % 2, True) for i, q in enumerate(_ids(benchmarks, 100, 140))]  # a title is
    plain = ar.out_of_fold(fixed, agent, 10.0)
    both = ar.out_of_fold(fixed, agent, 10.0, fit_agent=True)
    assert set(both["predictions"]["agent"]) == {"ranker", "ranker_agent"}
    assert plain["agent"]["hotpot"]["all"]["ranker_em"] == 0.0  # the fixed-k fit picks the LM's top: always wrong
    table = both["agent"]["hotpot"]["all"]
    assert table["ranker_em"] == 0.0 and table["ranker_agent_em"] == 1.0
    assert table["ranker_agent_minus_ranker_em"]["diff"] == pytest.approx(1.0)
    assert both["fixed_k"] == plain["fixed_k"]  # the fixed-k rows' answers do not depend on the option
