"""bench/gpu_real_weights.py's comparison of a run's greedy decisions with a reference (no model needed): identical
episodes, a different action, a different generated token, a different number of steps, a different state."""
from __future__ import annotations

import copy


def _module():
    from bench import gpu_real_weights

    return gpu_real_weights


def _step(action, tokens, *, search=-0.5, answer=-1.5, prompt="p0"):
    return {"t": 1, "action": action, "completion": f"{action}: x", "allowed": ["SEARCH", "ANSWER"],
            "label_logprobs": {"SEARCH": search, "BACKTRACK": -9.0, "ANSWER": answer, "REFUSE": -8.0},
            "label_margin": abs(search - answer), "prompt_sha": prompt,
            "generations": [{"prompt_sha": prompt + "g", "tokens": tokens, "text": ""}], "fallback": None}


def _episode(qid, steps, answer="a"):
    return {"question": qid, "actions": [s["action"] for s in steps], "answer": answer, "refused": False,
            "done": True, "seconds": 0.0, "steps": steps}


def test_compare_finds_the_first_divergence_of_each_kind():
    m = _module()
    ref = [_episode("q1", [_step("SEARCH", [1, 2]), _step("ANSWER", [3, 4], prompt="p1")]),
           _episode("q2", [_step("SEARCH", [1, 2]), _step("ANSWER", [3], prompt="p1")]),
           _episode("q3", [_step("SEARCH", [5, 6, 7])]),
           _episode("q4", [_step("SEARCH", [1]), _step("ANSWER", [2], prompt="p1")]),
           _episode("q5", [_step("SEARCH", [1]), _step("ANSWER", [2], prompt="p1")])]
    run = copy.deepcopy(ref)
    run[0]["steps"][0]["label_logprobs"]["SEARCH"] = -0.52  # same decisions, slightly different scores
    run[1]["steps"][1] = _step("REFUSE", [], search=-0.6, answer=-1.4, prompt="p1")
    run[1]["actions"], run[1]["answer"] = ["SEARCH", "REFUSE"], None
    run[2]["steps"][0]["generations"][0]["tokens"] = [5, 9, 7]
    run[3]["steps"] = run[3]["steps"][:1]
    run[3]["actions"] = ["SEARCH"]
    run[4]["steps"][1]["prompt_sha"] = "other"
    out = m.compare(ref, run, {}, None)
    rows = {r["question"]: r for r in out["per_question"]}
    assert (out["questions"], out["identical"], out["actions_match"], out["answers_match"]) == (5, 1, 3, 4)
    assert abs(out["label_logprob_max_abs_diff"] - 0.1) < 1e-9  # q2 step 1 (same state, other action)
    assert "first_divergence" not in rows["q1"] and rows["q1"]["actions_match"]
    d = rows["q2"]["first_divergence"]
    assert (d["kind"], d["step"], d["own"]) == ("action", 1, "REFUSE: x") and not rows["q2"]["answer_match"]
    d = rows["q3"]["first_divergence"]
    assert (d["kind"], d["step"], d["generation"], d["token_index"]) == ("tokens", 0, 0, 1) and "margin" not in d
    assert rows["q4"]["first_divergence"] == {"step": 1, "kind": "length"}
    assert rows["q5"]["first_divergence"]["kind"] == "state" and rows["q5"]["actions_match"]
