"""Rollout executors (evorag_core/pairs/executors.py): the reorder buffer by hand, then `evorag rollout` with the
tiny Llama on the demo questions in this process, in a 2-process pool and on 2 Ray actors (local Ray): the stored
episodes and pairs are the same for a fixed seed, whichever executor ran them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evorag_core.cli.main import main as cli_main
from evorag_core.pairs.executors import in_order
from evorag_core.store import open_store
from tests.paths import DEMO


def test_in_order_releases_each_rollout_once_everything_before_it_arrived():
    arrivals = [(2, "c"), (0, "a"), (3, "d"), (1, "b")]
    seen: list[str] = []
    out = in_order(((i, r) for i, r in arrivals if not seen.append(f"got {r}")), [0, 1, 2, 3])
    for r in out:
        seen.append(f"out {r}")
    assert seen == ["got c", "got a", "out a", "got d", "got b", "out b", "out c", "out d"]


def test_in_order_follows_the_given_order_and_names_what_never_came():
    assert list(in_order([(5, "x"), (1, "y")], [5, 1])) == ["x", "y"]
    with pytest.raises(RuntimeError, match=r"\[7\]"):
        list(in_order([(5, "x")], [5, 7]))


# -- the CLI on the tiny model --------------------------------------------------------------------------------------

QUESTIONS = 4


@pytest.mark.parametrize(("policy_threads", "threads", "workers", "cores", "expected"),
                         [(0, None, 2, 2, (0, 1)), (0, 2, 2, 2, (0, 1)), (0, None, 2, 16, (0, 8)),
                          (4, None, 2, 16, (4, 8)), (0, 1, 2, 16, (0, 1)), (12, 6, 2, 16, (8, 6)),
                          (0, None, 1, 2, (0, None)), (3, 5, 1, 2, (3, 5))])
def test_a_pool_holds_each_rollout_worker_to_its_share_of_the_cores(monkeypatch, tmp_path, policy_threads, threads,
                                                                     workers, cores, expected):
    """`evorag rollout --workers N` without --threads: each pool worker sets cores // N torch threads, not torch's
    default (every core: 2 workers on 2 cores took 425 s against 104 s at one thread each); a smaller --threads is
    kept, and policy.threads (which wins in the worker when set) is lowered to the share; one worker keeps what it
    was given. `expected`: (policy.threads, threads) after."""
    from dataclasses import replace

    from evorag_core.config import Config
    from evorag_core.pairs.executors import WorkerSpec, held_to_share

    monkeypatch.setattr("os.cpu_count", lambda: cores)
    cfg = Config()
    spec = WorkerSpec(replace(cfg, policy=replace(cfg.policy, threads=policy_threads)), str(tmp_path), str(DEMO),
                      threads=threads)
    held = held_to_share(spec, workers)
    assert (held.cfg.policy.threads, held.threads) == expected
    assert replace(held, cfg=spec.cfg, threads=spec.threads) == spec  # nothing else changed


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    rows = [json.loads(line) for line in DEMO.open(encoding="utf-8")]
    texts = [r["question"] for r in rows] + [f"{p['title']}: {p['text']}" for r in rows for p in r["passages"]]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts, vocab_size=2048)


def _rollout(tiny: Path, home: Path, db: Path, *extra: str) -> dict:
    sets = {"policy.model": str(tiny), "policy.device": "cpu", "rollout.t_max": 3, "rollout.siblings": 3,
            "rollout.max_states": 2, "policy.max_query_tokens": 6, "policy.max_answer_tokens": 4,
            "policy.passage_chars": 160}
    argv = ["rollout", "--data", str(DEMO), "--home", str(home), "--db", f"sqlite:///{db}", "--limit",
            str(QUESTIONS), "--threads", "1", "--json", *extra]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    assert cli_main(argv) == 0
    with open_store(f"sqlite:///{db}") as store:
        episodes = sorted(store.list_episodes(limit=None), key=lambda e: e.id)
        pairs = sorted(store.list_pairs(limit=None), key=lambda p: p.id)
        return {
            "episodes": [(e.question_id, e.total_return, e.answer) for e in episodes],
            "pairs": [(p.prompt, p.chosen, p.rejected, round(p.margin, 9)) for p in pairs],
        }


@pytest.mark.slow
def test_process_pool_and_ray_store_what_one_process_stores(tiny, tmp_path, capsys):
    home = tmp_path / "home"
    serial = _rollout(tiny, home, tmp_path / "serial.db")
    assert len(serial["episodes"]) == QUESTIONS and serial["pairs"], "the tiny policy's siblings gave no pairs"
    pool = _rollout(tiny, home, tmp_path / "pool.db", "--workers", "2")
    assert pool == serial
    pytest.importorskip("ray", reason="Ray is the optional extra [ray]; the test install includes it")
    ray_run = _rollout(tiny, home, tmp_path / "ray.db", "--executor", "ray", "--workers", "2")
    assert ray_run == serial
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(o["executor"], o["workers"], o["episodes"]) for o in out] == [
        ("local", 1, QUESTIONS), ("local", 2, QUESTIONS), ("ray", 2, QUESTIONS)]


@pytest.mark.slow
def test_resume_skips_stored_questions_with_a_pool(tiny, tmp_path):
    home, db = tmp_path / "home", tmp_path / "r.db"
    _rollout(tiny, home, db, "--workers", "2", "--set", "rollout.seed=3")
    again = _rollout(tiny, home, db, "--workers", "2", "--resume", "--set", "rollout.seed=3")
    assert len(again["episodes"]) == QUESTIONS  # nothing rolled out twice
