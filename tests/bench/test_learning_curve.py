"""bench/learning_curve.py: the training questions cut into rounds, the curve read from promotion reports (hand-made
reports, hand-computed rows), and the loop itself on the demo data with a tiny random Llama: two rounds of rollouts
of the live model, a DPO round and its gate, the curve and its figure written, a re-run resuming after the last
finished round."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import learning_curve as lc
from evorag_core.store import open_store
from tests.paths import DEMO, REPO


def test_the_training_questions_are_cut_into_consecutive_chunks_one_per_round():
    """10 questions from 5 in 3 rounds: 4 + 3 + 3 (the first chunk takes the remainder)."""
    assert lc.chunks((5, 15), 3) == [(5, 4), (9, 3), (12, 3)]
    assert lc.chunks((0, 4), 2) == [(0, 2), (2, 2)]
    with pytest.raises(SystemExit, match="2 training questions cannot feed 3 rounds"):
        lc.chunks((0, 2), 3)
    with pytest.raises(SystemExit, match="empty slice"):
        lc._slice("10:10")


def _side(name: str, f1: float, em: float, steps: float) -> dict:
    return {"name": name, "summary": {"n": 40, "f1": f1, "em": em, "avg_steps": steps},
            "f1_ci": [f1 - 0.1, f1 + 0.1], "em_ci": [em - 0.1, em + 0.1]}


def _report(adapter: str, against: dict, candidate: dict, passed: bool, diff: float, p: float) -> dict:
    return {"adapter": adapter, "round_id": int(adapter[1]), "passed": passed, "verdict": "better" if passed else "worse",
            "report": {"setting": {"metric": "f1"}, "candidate": candidate, "against": against,
                       "comparison": {"f1": {"diff": diff, "ci_low": diff - 0.05, "ci_high": diff + 0.05,
                                             "p_value": p}}}}


def test_the_curve_starts_at_the_base_and_the_live_model_moves_only_on_a_pass():
    """r1 beats the base (0.30 -> 0.40) and goes live; r2 (0.35) loses to r1 and stays staged: the live model after
    round 2 is still r1, whose F1 (0.40) the live line keeps."""
    base, r1, r2 = _side("base", 0.30, 0.2, 3.0), _side("r1-dpo", 0.40, 0.3, 2.5), _side("r2-dpo", 0.35, 0.25, 2.0)
    rows = lc.curve_rows([_report("r1-dpo", base, r1, True, 0.10, 0.01),
                          _report("r2-dpo", r1, r2, False, -0.05, 0.2)])
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert [r["adapter"] for r in rows] == ["base", "r1-dpo", "r2-dpo"]
    assert [r["live_after"] for r in rows] == ["base", "r1-dpo", "r1-dpo"]
    assert [r["f1"] for r in rows] == [0.30, 0.40, 0.35] and [r["steps"] for r in rows] == [3.0, 2.5, 2.0]
    assert rows[0]["verdict"] == "base" and rows[0]["diff"] is None
    assert rows[2]["against"]["name"] == "r1-dpo" and rows[2]["diff"] == -0.05 and rows[2]["p"] == 0.2
    assert rows[1]["diff_ci"] == pytest.approx([0.05, 0.15]) and rows[1]["f1_ci"] == pytest.approx([0.3, 0.5])
    assert lc.curve_rows([]) == []
    fig = lc.figure(rows, "t")
    live = [t for t in fig.data if t.name == "live model"]
    assert list(live[0].y) == [0.30, 0.40, 0.40]  # F1 panel: the live model's score after each round


def _run(tiny: Path, home: Path, out: Path, *more: str) -> str:
    argv = [sys.executable, "-m", "bench.learning_curve", "--data", str(DEMO), "--train", "0:4", "--rounds", "2",
            "--eval", "40:46", "--method", "fixed-k", "--pairs", "8", "--max-steps", "2", "--lr", "2e-2",
            "--workers", "1", "--model", str(tiny), "--home", str(home), "--out", str(out), *more]
    for s in ("promotion.min_n=3", "train.max_length=160", "train.epochs=1", "train.batch_size=2",
              "policy.passage_chars=160", "policy.max_query_tokens=6", "policy.max_answer_tokens=4",
              "rollout.t_max=3", "rollout.siblings=2", "rollout.max_states=1", "env.t_max=3"):
        argv += ["--set", s]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_two_rounds_of_the_loop_give_a_curve_read_from_the_gate_reports(tiny, tmp_path):
    home, out = tmp_path / "home", tmp_path / "results" / "curve.json"
    printed = _run(tiny, home, out)
    result = json.loads(out.read_text())
    rows = result["curve"]
    assert [r["round"] for r in rows] == [0, 1, 2] and rows[0]["adapter"] == "base"
    assert [r["adapter"] for r in rows[1:]] == ["r1-dpo", "r3-dpo"]  # round 2 is r1-dpo's evaluation job
    assert all(r["n"] == 6 and 0.0 <= r["f1"] <= 1.0 and len(r["f1_ci"]) == 2 for r in rows)
    assert [r["train_questions"] for r in rows[1:]] == [[0, 2], [2, 2]]
    assert all(set(r["minutes"]) == {"rollouts", "round", "evaluation"} for r in rows[1:])
    # round 2 was rolled out with, and compared with, what was live after round 1
    state = json.loads((home / "learning_curve_state.json").read_text())
    assert state["rounds"][0]["live_before"] == "base"
    assert state["rounds"][1]["live_before"] == rows[1]["live_after"] == rows[2]["against"]["name"]
    with open_store(f"sqlite:///{home / 'evorag.db'}") as store:
        reports = sorted(store.list_promotions(), key=lambda p: p.id)
        assert [p.adapter for p in reports] == ["r1-dpo", "r3-dpo"]
        assert [p.verdict for p in reports] == [r["verdict"] for r in rows[1:]]
        live = store.active_adapter()
        assert (live.name if live else "base") == rows[2]["live_after"]
        episodes = len(store.list_episodes(limit=1000))
    assert episodes > 0
    assert Path(result["figure"]["html"]).read_text().count("held-out F1") >= 1
    assert "round 2: r3-dpo" in printed

    again = _run(tiny, home, out)  # both rounds finished: nothing is rolled out or trained again
    assert json.loads(out.read_text())["curve"] == rows and "round 2: r3-dpo" in again
    with open_store(f"sqlite:///{home / 'evorag.db'}") as store:
        assert len(store.list_promotions()) == 2
        assert len(store.list_episodes(limit=1000)) == episodes


@pytest.mark.slow
def test_rounds_on_answer_pairs_train_on_the_reader_states_of_their_own_episodes(tiny, tmp_path):
    """--source answer: each round queues answer pairs of its own rollouts' reader states and trains on answer
    pairs alone, every one of them (--max-steps 0: one epoch over all): the first round's pairs come from the first
    chunk's episodes, the second round's from the second chunk's only."""
    home, out = tmp_path / "home", tmp_path / "curve.json"
    _run(tiny, home, out, "--source", "answer", "--pairs", "1000", "--train", "0:6", "--max-steps", "0")
    rows = json.loads(out.read_text())["curve"]
    assert [r["round"] for r in rows] == [0, 1, 2]
    with open_store(f"sqlite:///{home / 'evorag.db'}") as store:
        rounds = sorted((j for j in store.list_rounds(limit=100) if j.objective != "evaluate"), key=lambda j: j.id)
        assert [j.config.get("source") for j in rounds] == ["answer", "answer"]
        pairs = [p for p in store.list_pairs(limit=None) if p.round_id is not None]  # the pairs rounds trained on
        assert pairs and all(p.source == "answer" for p in pairs)
        by_round = {j.id: {p.metadata.get("episode_db_id") for p in pairs if p.round_id == j.id} for j in rounds}
        queued = [p for p in store.list_pairs(source="answer", limit=None) if p.round_id is None]
    first, second = (by_round[j.id] for j in rounds)
    assert first and second and max(first) < min(second)  # the second chunk's episodes, stored after round 1
    assert not queued  # every answer pair was trained on
