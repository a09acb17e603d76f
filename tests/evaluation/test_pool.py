"""`evorag eval --workers 2` (evaluation/pool.py) with the tiny Llama on demo questions: the plain agent (one LM per
worker) and a baseline built from the registry write the same per-question results, in the same order, as one
process; a resumed run on the pool only runs the questions the file lacks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evorag_core.cli.main import main as cli_main
from tests.paths import DEMO

SETS = {"policy.device": "cpu", "policy.threads": 1, "env.t_max": 3, "policy.max_query_tokens": 6,
        "policy.max_answer_tokens": 4, "policy.passage_chars": 160, "env.corpus": "per-question"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    rows = [json.loads(line) for line in DEMO.open(encoding="utf-8")]
    texts = [r["question"] for r in rows] + [f"{p['title']}: {p['text']}" for r in rows for p in r["passages"]]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts, vocab_size=2048)


def _eval(tiny: Path, home: Path, out: Path, method: str, *extra: str) -> list[tuple]:
    argv = ["eval", "--method", method, "--data", str(DEMO), "--home", str(home), "--limit", "4", "--out", str(out),
            "--no-store", "--no-progress", "--json", *extra]
    for key, value in {**SETS, "policy.model": str(tiny)}.items():
        argv += ["--set", f"{key}={value}"]
    assert cli_main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [(r["question_id"], r["prediction"], r["steps"], r["em"], r["f1"], r["trace"]) for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["agent", "direct"])
def test_two_workers_write_what_one_process_writes(tiny, tmp_path, method):
    one = _eval(tiny, tmp_path / "home", tmp_path / "one.jsonl", method)
    two = _eval(tiny, tmp_path / "home", tmp_path / "two.jsonl", method, "--workers", "2")
    assert len(one) == 4 and [r[0] for r in one] == ["demo-001", "demo-002", "demo-003", "demo-004"]
    assert two == one
    if method != "agent":
        return
    # resumed on the pool (the agent's rows): the first two lines are kept as they are, the other two are run again
    part = tmp_path / "part.jsonl"
    part.write_text("".join((tmp_path / "one.jsonl").read_text().splitlines(keepends=True)[:2]))
    assert _eval(tiny, tmp_path / "home", part, method, "--workers", "2", "--resume") == one


def test_workers_below_one_is_refused(tmp_path, capsys):
    assert cli_main(["eval", "--method", "oracle", "--data", str(DEMO), "--home", str(tmp_path), "--limit", "1",
                     "--workers", "0", "--no-store"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
def test_corpus_from_retrieves_from_another_files_passages(tiny, tmp_path):
    """`--corpus-from` end to end: questions that ship no passages (as Bamboogle) retrieve from the pooled passages
    of another file, the same hits as those questions with their own file pooled (`env.corpus=pooled`), in one
    process and on the pool."""
    rows = [json.loads(line) for line in DEMO.open(encoding="utf-8")][:4]
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps({**r, "passages": []}) + "\n" for r in rows))

    def hits(data: Path, out: Path, *extra: str) -> list[tuple]:
        argv = ["eval", "--method", "fixed-k", "--data", str(data), "--home", str(tmp_path / "home"), "--out",
                str(out), "--no-store", "--no-progress", "--json", *extra]
        for key, value in {**SETS, "policy.model": str(tiny), "env.corpus": "pooled"}.items():
            argv += ["--set", f"{key}={value}"]
        assert cli_main(argv) == 0
        return [(r["question_id"], tuple(r["passages"])) for r in map(json.loads, out.read_text().splitlines())]

    own = hits(DEMO, tmp_path / "own.jsonl", "--limit", "4")
    assert len(own) == 4 and all(len(p) > 0 for _, p in own)
    assert any(not pid.startswith(f"demo:{qid}:") for qid, pids in own for pid in pids)  # pooled, not its own 10
    assert hits(bare, tmp_path / "from.jsonl", "--corpus-from", str(DEMO)) == own
    assert hits(bare, tmp_path / "from2.jsonl", "--corpus-from", str(DEMO), "--workers", "2") == own


@pytest.mark.parametrize(("threads", "workers", "cores", "expected"),
                         [(0, 2, 2, 1), (2, 2, 2, 1), (1, 2, 2, 1), (0, 2, 16, 8), (4, 2, 16, 4), (2, 1, 2, 2)])
def test_each_worker_keeps_to_its_share_of_the_cores(monkeypatch, tmp_path, threads, workers, cores, expected):
    """policy.threads (0 = every core) above cores // workers is lowered to it: two 2-thread workers on 2 cores ran
    3.3x slower; one worker keeps what it was given."""
    from dataclasses import replace

    from evorag_core.config import Config
    from evorag_core.evaluation.pool import EvalPool, EvalSpec

    monkeypatch.setattr("os.cpu_count", lambda: cores)
    cfg = Config()
    spec = EvalSpec(replace(cfg, policy=replace(cfg.policy, threads=threads)), str(tmp_path), str(DEMO), threads=2)
    pool = EvalPool(spec, workers)
    assert pool.spec.cfg.policy.threads == expected
    assert pool.spec.threads <= max(1, cores // workers) or workers == 1
