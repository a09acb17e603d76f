"""End to end on the demo data with a tiny 2-layer random Llama as the policy model (the real code path everywhere):
rollout with sibling candidates in the real environment (BM25 + MiniLM retrieval) -> episodes and pairs in a
SQLite store -> a DPO round run by the worker loop -> adapter registered, staged -> its promotion evaluation (the
job the worker queued) -> report stored -> activated (verified; with a logged reason when the gate did not pass) ->
a running backend hot-swaps it without reloading its base model -> the agent's log-probs of the chosen actions
changed.

Also: the adapter watcher refuses a corrupt adapter and keeps the live one; an episode in flight finishes on the
adapter it started with.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evorag_core.config import apply_overrides, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.policy.agent import LMPolicy
from evorag_core.lm.hf_backend import TransformersBackend
from evorag_core.adapters.watcher import AdapterWatcher, PinnedPolicy
from evorag_core.runtime import Runtime
from evorag_core.env.state import AgentView
from evorag_core.store import open_store
from evorag_core.adapters.registry import activate
from tests.lora_adapters import random_adapter

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo" / "demo.jsonl"
VIEW = AgentView("On which river is the birthplace of the chemist Ansel Travine?", (), (), 1, 20)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    rows = [json.loads(line) for line in DEMO.open(encoding="utf-8")]
    texts = [r["question"] for r in rows] + [f"{p['title']}: {p['text']}" for r in rows for p in r["passages"]]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts, vocab_size=2048)


@pytest.fixture()
def cfg(tiny):
    torch.set_num_threads(1)  # tiny model: one thread is fastest (and 2 threads crawl on a busy machine)
    return apply_overrides(load_config(), {
        "policy.model": str(tiny), "policy.device": "cpu", "train.max_length": 160, "train.lr": 2e-2,
        "train.batch_size": 4, "train.epochs": 4, "env.t_max": 4, "rollout.t_max": 4, "policy.max_query_tokens": 6,
        "policy.max_answer_tokens": 4, "policy.passage_chars": 160, "promotion.questions": "0:6", "promotion.min_n": 5,
    })


def backend_for(cfg, home: Path) -> TransformersBackend:
    return TransformersBackend(cfg.policy, home)


def make_adapter(cfg, tiny: Path, folder: Path, seed: int) -> Path:
    """A LoRA adapter with random (non-zero) B matrices, saved with its checksum for the tiny base model."""
    return random_adapter(tiny, folder, seed, cfg.train)


def completion_logprob(backend, view=VIEW, completion="SEARCH: Ansel Travine") -> float:
    prompt = LMPolicy(backend).prompt(view)
    return backend.sequence_logprob(prompt, completion)


def test_watcher_hot_swaps_and_refuses_a_corrupt_adapter(cfg, tiny, tmp_path):
    """Activating A in the store -> the next poll injects and activates A (same base model object, log-probs change);
    B's weights are corrupted after registration -> activating B's row is refused by the watcher, A stays live;
    deactivating -> the base model's log-probs again (up to the prefix cache's float rounding)."""
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        backend = backend_for(cfg, tmp_path)
        base_model, base_lp = backend.model, completion_logprob(backend)
        watcher = AdapterWatcher(store, backend, min_interval_s=0.0)
        assert watcher.poll() is None
        for name, seed in (("a", 1), ("b", 2)):
            path = make_adapter(cfg, tiny, tmp_path / "adapters" / name, seed)
            store.register_adapter(name, str(path), base_model=str(tiny),
                                   checksum=json.loads((path / "evorag_adapter.json").read_text())["sha256"])
        activate(store, "a", str(tiny))
        assert watcher.poll() == "a" and backend.active_adapter == "a" and backend.model is base_model
        a_lp = completion_logprob(backend)
        assert abs(a_lp - base_lp) > 1e-3

        weights = tmp_path / "adapters" / "b" / "adapter_model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-16] + b"\x00" * 16)
        store.mark_adapter_active("b")  # bypassing the registry's check: the watcher is the second line of defence
        assert watcher.poll() == "a" and backend.active_adapter == "a" and backend.list_adapters() == ["a"]
        assert "sha256" in next(iter(watcher.refused.values()))
        assert completion_logprob(backend) == pytest.approx(a_lp, rel=1e-3)

        store.deactivate_adapters()
        assert watcher.poll() is None and completion_logprob(backend) == pytest.approx(base_lp, rel=1e-3)


def test_an_episode_in_flight_finishes_on_the_adapter_it_started_with(cfg, tiny, tmp_path):
    """Episode 1 begins on the base model; adapter A becomes active mid-episode. Episode 1's next decision still
    runs on the base model (its log-prob equals the base one), while episode 2, begun after the change, runs on A."""
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        backend = backend_for(cfg, tmp_path)
        watcher = AdapterWatcher(store, backend, min_interval_s=0.0)
        lm = LMPolicy(backend, cfg.policy)
        first, second = PinnedPolicy(lm, watcher), PinnedPolicy(lm, watcher)
        first.begin(None)
        _, info_before = first.act(VIEW)
        path = make_adapter(cfg, tiny, tmp_path / "adapters" / "a", 1)
        store.register_adapter("a", str(path), base_model=str(tiny))
        activate(store, "a", str(tiny))
        second.begin(None)
        _, info_second = second.act(VIEW)
        _, info_first = first.act(VIEW)
        assert (first.adapter, second.adapter) == (None, "a")
        assert info_first["adapter"] is None and info_second["adapter"] == "a"
        assert info_first["logprob"] == pytest.approx(info_before["logprob"], rel=1e-3)
        assert abs(info_second["logprob"] - info_before["logprob"]) > 0.05  # A's weights score the same text otherwise


# -- the end-to-end run ---------------------------------------------------------------------------------------------

def rollout_pairs(runtime: Runtime, backend, cfg, store, questions) -> tuple[list[int], object]:
    """The project's sibling-branch rollouts (evorag_core/pairs/rollout.py) of the LM policy into the store."""
    from evorag_core.pairs.rollout import PairSelector, run_rollouts

    selector = PairSelector(balance_ratio=cfg.rollout.balance_ratio)
    stats = run_rollouts(questions, runtime.make_env, LMPolicy(backend, cfg.policy), store, cfg.rollout, selector,
                         policy_name=f"lm:{backend.model_id}", stage="discovery")
    selector.finish()
    return [p.id for p in store.list_pairs(status="queued", limit=None)], stats


@pytest.mark.slow
def test_rollout_pairs_dpo_round_activation_changes_the_agents_logprobs(cfg, tiny, tmp_path):
    """The pairs' chosen completions gain log-probability relative to the rejected ones once the round's adapter is
    live: the mean margin log π(chosen) − log π(rejected) over the trained states grows, and every chosen
    log-prob differs from the base model's; the backend kept its base model object throughout. GRPO and PPO rounds
    train on the same stored rollouts."""
    from training.job import job_config
    from training.worker import WorkerOptions, process_one

    home = tmp_path
    with open_store(f"sqlite:///{home / 'evorag.db'}") as store:
        runtime = Runtime(cfg, home, load_dataset(DEMO))
        backend = backend_for(cfg, home)
        base_model = backend.model
        watcher = AdapterWatcher(store, backend, min_interval_s=0.0)
        policy = PinnedPolicy(LMPolicy(backend, cfg.policy), watcher)
        pair_ids, stats = rollout_pairs(runtime, backend, cfg, store, runtime.dataset.questions[:6])
        pairs = [store.get_pair(i) for i in pair_ids]
        assert stats.episodes == 6 and stats.candidates > 0 and len(pairs) >= 3, stats
        # GRPO/PPO rebuild each state's prompt from the stored steps: it must be the prompt the rollout sampled after
        from training.rollout_data import PassageResolver, replay_episode

        render = LMPolicy(backend, cfg.policy).prompt
        for p in pairs:
            replay = replay_episode(store.get_episode(p.metadata["episode_db_id"]), PassageResolver(str(DEMO)), 4)
            assert render(replay.steps[p.metadata["t"] - 1].view) == p.prompt
        before = [(backend.sequence_logprob(p.prompt, p.chosen), backend.sequence_logprob(p.prompt, p.rejected))
                  for p in pairs]

        rid = store.enqueue_round("dpo", job_config("dpo", pairs=len(pairs)))
        done = process_one(store, cfg, home, "e2e-worker", WorkerOptions(lease_s=60))
        assert done.id == rid and done.status == "succeeded", done.error
        assert store.count_pairs("status") == {"consumed": len(pairs)}
        adapter = store.get_adapter(done.metrics["adapter"])
        assert adapter.round_id == rid and Path(adapter.path) == home / "adapters" / str(rid)

        assert store.active_adapter() is None  # staged: it goes live through the gate
        evaluation = process_one(store, cfg, home, "e2e-worker", WorkerOptions(lease_s=60))
        assert evaluation.objective == "evaluate" and evaluation.status == "succeeded", evaluation.error
        [report] = store.list_promotions(adapter.name)
        assert report.report["candidate"]["summary"]["n"] == 6 and evaluation.metrics["promotion_id"] == report.id
        if store.active_adapter() is None:  # not shown better on 6 questions: an admin activates it with a reason
            activate(store, adapter.name, backend.model_id, reason="e2e: the log-prob check below is the test")
            assert store.last_activation().kind == ("forced" if report.passed is not True else "activated")
        policy.begin(None)  # a new episode: the watcher hot-swaps the adapter in
        assert policy.adapter == adapter.name == backend.active_adapter and backend.model is base_model
        after = [(backend.sequence_logprob(p.prompt, p.chosen), backend.sequence_logprob(p.prompt, p.rejected))
                 for p in pairs]
        margin = lambda rows: sum(c - r for c, r in rows) / len(rows)  # noqa: E731
        assert all(abs(a[0] - b[0]) > 1e-4 for a, b in zip(after, before))
        assert margin(after) > margin(before) + 0.05

        # GRPO and PPO rounds from the same stored rollouts (their passages resolved through the data file; not the
        # evaluation's episodes); no promotion job after them here
        ungated = apply_overrides(cfg, {"promotion.evaluate": False})
        for objective in ("grpo", "ppo"):
            store.enqueue_round(objective, job_config(objective, reference="base", data=str(DEMO), epochs=1))
            done = process_one(store, ungated, home, "e2e-worker", WorkerOptions(lease_s=60))
            assert done.status == "succeeded", done.error
            assert done.metrics["episodes"] == 6 and done.metrics["steps"] >= 1 and done.metrics["final_kl"] >= 0


@pytest.mark.slow
def test_curriculum_runs_both_stages_and_logs_each_decision(cfg, tmp_path):
    """patience 1, epsilon 100 (every change of the EMA counts as stale): round 1 sets the EMA (stale 0, stay in
    discovery); round 2's improvement is < 100 -> stale 1 = patience -> switch; round 3 runs in refinement, after
    which both stages have run and the loop stops before the budget of 5. Every round trained and activated an
    adapter (reference: the previous round's), on pairs of its own rollout only."""
    from training.curriculum import CurriculumPlan, run_curriculum

    cfg = apply_overrides(cfg, {"curriculum.patience": 1, "curriculum.epsilon": 100.0, "preference.layer": 2,
                                "train.epochs": 1})
    with open_store(f"sqlite:///{tmp_path / 'evorag.db'}") as store:
        decisions = run_curriculum(cfg, tmp_path, store, CurriculumPlan(DEMO, rounds=5, train_per_round=2, dev=2,
                                                                        max_steps=1))
        assert [d["stage"] for d in decisions] == ["discovery", "discovery", "refinement"]
        assert [d["switched"] for d in decisions] == [False, True, False]
        assert [d["controller"]["stale"] for d in decisions[:2]] == [0, 1]
        assert all(d["policy_round"]["status"] == "succeeded" for d in decisions), decisions
        assert [a.name for a in store.list_adapters()] == ["r1-dpo", "r2-dpo", "r3-dpo"]
        assert store.active_adapter().name == "r3-dpo" and decisions[1]["adapter_in"] == "r1-dpo"
        assert all(d["rollout"]["episodes"] == 2 and "mean_return" in d["dev"] for d in decisions)
        # each DPO round trained on its own rollout's pairs: stored after that round's floor, before the next's -
        # although one step (max_steps 1) trains on fewer than a rollout stores, so earlier pairs stay queued
        floors = [d["pairs_after"] for d in decisions] + [store.last_pair_id()]
        for d, lo, hi in zip(decisions, floors, floors[1:]):
            trained = store.list_pairs(round_id=d["policy_round"]["id"], limit=None)
            assert trained and all(lo < p.id <= hi and p.stage == d["stage"] for p in trained), (d["round"], lo, hi)
        assert any(p.id <= floors[1] for p in store.list_pairs(status="queued", stage="discovery", limit=None))
