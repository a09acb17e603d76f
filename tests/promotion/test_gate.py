"""Gated promotion end to end on a real SQLite store with real evaluations (evorag_core/promotion/).

Fast tests: the tiny 2-layer Llama (its tokenizer trained on the demo questions) as the policy, the agent on the
first 8 demo questions. A real DPO round on inverted pairs queues its evaluation; the worker runs it like a round;
the adapter, not shown better, stays staged with its report; activating it needs a reason, which is logged. The
slow test uses the embedded SmolLM2 with the fixed-k reader, where a destroyed adapter really is worse: a candidate
that beats it is promoted and hot-swapped into a running backend, and a worse one stays staged.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evorag_core.adapters.files import read_adapter_meta
from evorag_core.adapters.registry import activate, register_verified
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import AdapterError
from evorag_core.lm.loading import base_model_id
from evorag_core.promotion.gate import evaluate_candidate, promote
from evorag_core.store import NewPair, open_store
from tests.lora_adapters import random_adapter
from training.worker import WorkerOptions, process_one

PROMPT = "<|im_start|>system\nYou answer.<|im_end|>\n<|im_start|>user\nQuestion: {}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture()
def world(tmp_path, tiny_demo):
    torch.set_num_threads(1)
    cfg = apply_overrides(load_config(), {
        "policy.model": str(tiny_demo), "policy.device": "cpu", "policy.threads": 1, "train.max_length": 96,
        "train.lr": 1e-3, "train.batch_size": 2, "promotion.questions": "0:8", "promotion.min_n": 5})
    store = open_store(f"sqlite:///{tmp_path / 'evorag.db'}")
    yield cfg, tmp_path, store, base_model_id(str(tiny_demo), tmp_path)
    store.close()


def _register(store, model, home: Path, name: str, base_id: str, **kw) -> None:
    folder = random_adapter(model, home / "adapters" / name, base_id=base_id, **kw)
    register_verified(store, name, folder, base_model_id=base_id, checksum=read_adapter_meta(folder)["sha256"])


def test_a_round_queues_its_evaluation_and_an_adapter_not_shown_better_stays_staged(world):
    """A DPO round on inverted pairs (chosen: a wrong answer, rejected: the search) registers r1-dpo and queues
    job 2 (objective evaluate); the worker runs it: a report of r1-dpo against the base model (none is live), with
    both sides' summaries on the 8 questions, the paired difference and the rule's verdict; the adapter is not live.
    Activating it without a reason is refused (the base model stays live); with one it is live, logged "forced"
    with the reason and the report. The evaluation cached both sides: evaluating again reads no model, and its
    progress still ends at every question of both sides."""
    cfg, home, store, base_id = world
    store.add_pairs([NewPair(PROMPT.format(f"who founded town {i}"), f"ANSWER: nobody {i}", f"SEARCH: town {i} founder")
                     for i in range(6)])
    rid = store.enqueue_round("dpo", {"pairs": 6})
    assert process_one(store, cfg, home, "w", WorkerOptions(lease_s=600)).status == "succeeded"
    [job] = [r for r in store.list_rounds() if r.objective == "evaluate"]
    assert job.id == rid + 1 and job.config["adapter"] == "r1-dpo" and job.config["against"] == "live"

    done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=600))
    assert done.id == job.id and done.status == "succeeded", done.error
    assert done.progress["phase"] == "evaluate base" and done.progress["step"] == done.progress["total"] == 16
    [report] = store.list_promotions("r1-dpo")
    assert report.round_id == job.id and report.against is None and report.metric == "f1"
    assert done.metrics["promotion_id"] == report.id and done.metrics["activated"] is False
    r = report.report
    assert r["candidate"]["summary"]["n"] == r["against"]["summary"]["n"] == 8 == r["comparison"]["n"]
    assert r["candidate"]["name"] == "r1-dpo" and r["against"]["name"] == "base"
    lo, hi = r["candidate"]["f1_ci"]
    assert lo <= r["candidate"]["summary"]["f1"] <= hi
    assert report.passed is not True and report.verdict.split(":")[0] in ("worse", "not shown better")
    assert store.active_adapter() is None

    with pytest.raises(AdapterError, match="did not pass its evaluation .*needs a reason.*the base model stays live"):
        activate(store, "r1-dpo", base_id)
    assert store.active_adapter() is None
    activate(store, "r1-dpo", base_id, reason="a demo for the reading group", who="ada")
    why = store.last_activation()
    assert (why.adapter, why.kind, why.reason, why.who, why.promotion_id) == (
        "r1-dpo", "forced", "a demo for the reading group", "ada", report.id)

    seen = []
    again = evaluate_candidate(store, cfg, home, "r1-dpo", against="base", on_progress=seen.append)
    assert again.report["candidate"]["cached"] == again.report["against"]["cached"] == 8
    assert [(e["phase"], e["step"], e["total"]) for e in seen] == [("evaluate r1-dpo", 8, 16),
                                                                    ("evaluate base", 16, 16)]
    assert again.report["comparison"]["f1"] == r["comparison"]["f1"]


def test_a_cancelled_evaluation_stores_no_report_and_resumes_from_its_cache(world):
    """The studio's Cancel on an evaluation job: the job stops at the next question, ends cancelled, and no report
    is written; the questions it finished are not evaluated again by the next evaluation."""
    cfg, home, store, base_id = world
    _register(store, cfg.policy.model, home, "cand", base_id, seed=1)
    rid = store.enqueue_round("evaluate", {"adapter": "cand"})

    def run(job, st, on_progress):
        from training.evaluate_round import run as evaluate_job

        def cancel_after_three(entry):
            if entry.get("step") == 3:
                st.cancel_round(job.round_id)
            on_progress(entry)
        return evaluate_job(job, st, cancel_after_three)

    done = process_one(store, cfg, home, "w", WorkerOptions(lease_s=600), run)
    assert done.id == rid and done.status == "cancelled" and store.list_promotions() == []
    row = evaluate_candidate(store, cfg, home, "cand")
    assert row.report["candidate"]["cached"] == 3 and row.report["against"]["cached"] == 0


def test_promote_needs_a_reason_without_a_passing_report_and_against_names_an_adapter(world):
    """`promote` (evorag adapters promote): no report -> refused without a reason; with one -> forced. An evaluation
    against a named adapter compares with it; against itself is refused."""
    cfg, home, store, base_id = world
    _register(store, cfg.policy.model, home, "a", base_id, seed=1)
    _register(store, cfg.policy.model, home, "b", base_id, seed=2)
    with pytest.raises(AdapterError, match="it has no promotion report"):
        promote(store, "a", base_id)
    assert promote(store, "a", base_id, reason="baseline for the study", who="ada").name == "a"
    assert store.last_activation().kind == "forced"
    row = evaluate_candidate(store, cfg, home, "b")  # against live = a
    assert row.against == "a" and row.report["against"]["name"] == "a"
    from evorag_core.errors import ConfigError

    with pytest.raises(ConfigError, match="against itself"):
        evaluate_candidate(store, cfg, home, "b", against="b")


@pytest.mark.slow  # the embedded SmolLM2: ~1 min of fixed-k reading, 20 demo questions, two adapters
def test_a_better_adapter_is_promoted_and_hot_swapped_and_a_worse_one_stays_staged(tmp_path, lm_home):
    """SmolLM2 reads with the fixed-k pipeline, spans ranked by the model's log-probabilities alone. "noisy" (every
    LoRA B ~ N(0, 0.5²)) destroys the reader; an admin forces it live with a reason. "zero" (B = 0: the base
    model's answers) is evaluated against the live noisy one: better, p < 0.05, so it is promoted (kind "promoted",
    the report's id) and a running backend following the store (AdapterWatcher) swaps to it. "noisy" is then
    evaluated against the live zero: worse, so it stays staged and zero stays live (both sides' answers read from the
    first evaluation's cache: 40 readings in all)."""
    from evorag_core.adapters.watcher import AdapterWatcher
    from evorag_core.lm.backends import policy_backend
    from evorag_core.lm.loading import resolve_model

    model_home = lm_home[0]
    cfg = apply_overrides(load_config(), {
        "policy.device": "cpu", "policy.threads": 1, "promotion.method": "fixed-k", "answer.ranker": "lm",
        "promotion.questions": "0:20", "promotion.min_n": 15})
    store = open_store(f"sqlite:///{tmp_path / 'evorag.db'}")
    base_id = base_model_id("embedded", model_home)
    folder = resolve_model("embedded", model_home)
    _register(store, folder, tmp_path, "noisy", base_id, seed=1, scale=0.5)
    _register(store, folder, tmp_path, "zero", base_id, seed=2, fill=0.0)
    activate(store, "noisy", base_id, reason="reproduce a bad deployment")
    backend = policy_backend(cfg.policy, model_home)
    watcher = AdapterWatcher(store, backend, min_interval_s=0.0)
    assert watcher.poll(force=True) == "noisy"

    better = evaluate_candidate(store, cfg, model_home, "zero")
    assert better.against == "noisy" and better.passed is True, better.verdict
    assert better.verdict.startswith("better: F1 +")
    assert better.report["candidate"]["summary"]["f1"] > better.report["against"]["summary"]["f1"]
    assert better.report["changed"] and {"question", "gold", "candidate", "against"} <= set(better.report["changed"][0])
    why = store.last_activation()
    assert (store.active_adapter().name, why.kind, why.promotion_id) == ("zero", "promoted", better.id)
    assert watcher.poll(force=True) == "zero" and backend.active_adapter == "zero"

    worse = evaluate_candidate(store, cfg, model_home, "noisy")
    assert worse.against == "zero" and worse.passed is False and worse.verdict.startswith("worse: F1 -")
    assert worse.report["candidate"]["cached"] == worse.report["against"]["cached"] == 20
    assert store.active_adapter().name == "zero"
    store.close()


def test_the_cli_evaluates_lists_promotes_with_a_reason_and_queues(world, capsys):
    """`evorag adapters evaluate a` prints the report; `list --json` carries its held-out columns; `promote a`
    without a pass exits 2 naming --force --reason; with them it is live (forced, the reason logged);
    `evaluate b --queue` queues an evaluate job for the worker."""
    from evorag_core.cli.main import main as cli_main

    cfg, home, store, base_id = world
    _register(store, cfg.policy.model, home, "a", base_id, seed=1)
    _register(store, cfg.policy.model, home, "b", base_id, seed=2)
    args = ["--home", str(home), "--db", str(store.engine.url), "--model", str(cfg.policy.model),
            "--set", "policy.device=cpu", "--set", "promotion.questions=0:6", "--set", "promotion.min_n=5"]
    assert cli_main(["adapters", "evaluate", "a", *args]) == 0
    out = capsys.readouterr().out
    assert "promotion report 1: a vs base" in out and "verdict:" in out and "live now: the base model" in out
    assert cli_main(["adapters", "list", "--json", *args]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["a"]["heldout"]["report"] == 1 and rows["b"]["heldout"]["state"] == "not evaluated"
    assert cli_main(["adapters", "promote", "a", *args]) == 2
    assert "--force --reason" in capsys.readouterr().err
    assert cli_main(["adapters", "promote", "a", "--force", "--reason", "baseline", *args]) == 0
    why = store.last_activation()
    assert (why.adapter, why.kind, why.reason) == ("a", "forced", "baseline") and why.who.startswith("cli")
    assert cli_main(["adapters", "evaluate", "b", "--queue", *args]) == 0
    [job] = store.list_rounds(status="queued")
    assert job.objective == "evaluate" and job.config["adapter"] == "b"


def test_the_cache_key_reads_a_settings_file_by_its_bytes_not_its_path(tmp_path):
    """A ranker refit at the same path is another setting (no stale live side); the same weights copied elsewhere
    are not; an adapter's role is part of the key."""
    from dataclasses import replace

    from evorag_core.promotion.evaluate import Side, _key
    from evorag_core.store.records import Adapter
    from tests.paths import DEMO

    first, copy = tmp_path / "ranker.json", tmp_path / "elsewhere" / "ranker.json"
    copy.parent.mkdir()
    for path in (first, copy):
        path.write_text('{"weights": [1.0]}')
    base = Side(None, "model")

    def key(path: Path, side: Side = base) -> str:
        return _key(apply_overrides(load_config(), {"answer.ranker_path": str(path)}), side, DEMO)

    assert key(first) == key(copy)
    first.write_text('{"weights": [2.0]}')
    assert key(first) != key(copy)
    row = Adapter(1, "r1", "/a/r1", "model", 1, "dpo", "f" * 64, {}, False, None)
    assert key(copy, Side(row, "model")) != key(copy, Side(replace(row, role="reader"), "model")) != key(copy)
