"""Training rounds (DPO, GRPO, PPO) end to end on a tiny 2-layer random Llama saved as a model folder: the real
loading, prompt rendering, store, LoRA and registration code; episodes are written to a real SQLite store.

The stored episodes are hand-written over the demo data (passages stored as pids, resolved through the data file),
so the expected advantages and rewards can be worked out by hand in the docstrings.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.paths import DEMO
from evorag_core.config import apply_overrides, load_config
from evorag_core.errors import ConfigError, TrainingError
from evorag_core.env.scheduler import step_reward, weights_at
from evorag_core.store import NewPair, Sibling, Step, open_store
from training.job import RoundJob, job_config
from training.rollout_data import PassageResolver, candidate_groups, replay_episode
from training.objectives.grpo.round import grpo_samples

Q1 = "On which river is the birthplace of the chemist Ansel Travine?"
ZERO = {"ret": 0.0, "dup": 0.0, "bt": 0.0, "ref": 0.0, "step": -1.0, "ans": 0.0, "act": 0.0}


def signals(**kw: float) -> dict[str, float]:
    return {**ZERO, **kw}


def step(t: int, action: str, argument: str | None = None, passages=(), siblings=(), **sig: float) -> Step:
    s = signals(**sig)
    w = weights_at("discovery", t, 20)
    return Step(t=t, action=action, argument=argument, passages=tuple(passages), signals=s, weights=w,
                reward=step_reward(s, w), siblings=tuple(siblings))


def add_episode(store, steps, *, status="finished") -> int:
    return store.add_episode(question_id="demo-001", dataset="demo", question=Q1, policy="test", stage="discovery",
                             schedule="time-dynamic", config={"data": str(DEMO), "t_max": 20}, steps=steps,
                             status=status, total_return=sum(s.reward for s in steps))


def write_rollouts(store) -> list[int]:
    """Two episodes; every state has 4 siblings scored by branch return (one group has equal returns)."""
    sib = lambda returns: [Sibling(a, g, -1.0, r) for (a, g), r in zip(  # noqa: E731
        [("SEARCH", "Ansel Travine birthplace"), ("SEARCH", "Travine lamp"), ("ANSWER", "Mirrow"), ("REFUSE", None)],
        returns)]
    e1 = add_episode(store, [
        step(1, "SEARCH", "Ansel Travine birthplace", ["demo:demo-001:2", "demo:demo-001:0"], sib([1.0, 0.0, 0.0, -1.0]), ret=1.0),
        step(2, "SEARCH", "Mirrow river", ["demo:demo-001:4"], sib([0.5, 0.5, 2.0, -1.0]), ret=1.0),
        step(3, "ANSWER", "Sable River", siblings=sib([0.3, 0.3, 0.3, 0.3]), ans=1.0),
    ])
    e2 = add_episode(store, [
        step(1, "SEARCH", "Travine lamp", ["demo:demo-001:0"], sib([2.0, -0.5, -0.5, -1.0]), ret=-1.0),
        step(2, "BACKTRACK", None, (), bt=-1.0),
        step(3, "REFUSE", None, (), ref=-1.0),
    ])
    return [e1, e2]


@pytest.fixture()
def world(tmp_path, tiny):
    """(config, home, store) with the tiny model as the policy."""
    torch.set_num_threads(1)  # tiny model: one thread is fastest (and 2 threads crawl on a busy machine)
    cfg = apply_overrides(load_config(), {
        "policy.model": str(tiny), "policy.device": "cpu", "train.max_length": 192, "train.lr": 5e-3,
        "train.batch_size": 4, "train.epochs": 2, "train.seed": 3, "train.kl_coef": 0.1,
    })
    store = open_store(f"sqlite:///{tmp_path / 'evorag.db'}")
    yield cfg, tmp_path, store
    store.close()


def job(cfg, home, round_id: int, objective: str, **values) -> RoundJob:
    return RoundJob.from_config(round_id, objective, job_config(objective, **values), cfg, home)


def lora_b(path: Path) -> dict[str, torch.Tensor]:
    return {k: v for k, v in load_file(str(path / "adapter_model.safetensors")).items() if "lora_B" in k}


# -- fast: jobs, replay, groups -----------------------------------------------------------------------------------

def test_job_merges_train_keys_and_rejects_typos(tmp_path):
    """epochs/lr/kl shortcuts and `train: {...}` land in TrainConfig; an unknown key is a ConfigError."""
    cfg = load_config()
    j = RoundJob.from_config(7, "grpo", {"epochs": 3, "lr": 0.01, "kl": "k2", "train": {"clip_eps_high": 0.28},
                                         "episodes": 5, "reference": "base"}, cfg, tmp_path)
    assert (j.train.epochs, j.train.lr, j.train.kl, j.train.clip_eps_high) == (3, 0.01, "k2", 0.28)
    assert j.objective == "grpo" == j.train.objective and j.episodes == 5 and j.adapter_name == "r7-grpo"
    assert j.adapter_dir == tmp_path / "adapters" / "7"
    with pytest.raises(ConfigError, match="unknown job key"):
        RoundJob.from_config(1, "dpo", {"epoch": 3}, cfg, tmp_path)
    with pytest.raises(ConfigError, match="kl must be"):
        RoundJob.from_config(1, "grpo", {"kl": "k1"}, cfg, tmp_path)
    with pytest.raises(ConfigError):
        RoundJob.from_config(1, "grpo", {"train": {"lrr": 1}}, cfg, tmp_path)


def test_dpo_claims_only_the_pairs_its_steps_use(tmp_path):
    """max_steps 12, batch 4, grad_accum 1, 2 epochs -> 12 · 4 / 2 = 24 pairs; with holdout 0.2 -> ⌈24 / 0.8⌉ = 30;
    never more than `pairs`; without max_steps exactly `pairs`."""
    from training.objectives.dpo.round import claim_size

    cfg = load_config()
    size = lambda **v: claim_size(RoundJob.from_config(1, "dpo", v, cfg, tmp_path))  # noqa: E731
    assert size(pairs=1000, max_steps=12, epochs=2) == 24
    assert size(pairs=1000, max_steps=12, epochs=2, holdout=0.2) == 30
    assert size(pairs=10, max_steps=12, epochs=2) == 10 and size(pairs=77) == 77


def test_replay_rebuilds_the_views_the_policy_saw(tmp_path):
    """Episode 2: t=1 sees no search; t=2 sees one hop (the lamp passage, resolved from the data file); after
    BACKTRACK, t=3 sees an empty chain and 'Travine lamp' among the dropped queries. Rewards are Σ w_k r_k."""
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        _, e2 = write_rollouts(store)
        replay = replay_episode(store.get_episode(e2), PassageResolver(), 20)
    views = [s.view for s in replay.steps]
    assert [v.t for v in views] == [1, 2, 3] and views[0].chain == ()
    assert views[1].chain[0].query == "Travine lamp" and views[1].chain[0].passages[0].title == "Travine lamp"
    assert views[2].chain == () and views[2].dropped == ("Travine lamp",)
    assert [s.completion for s in replay.steps] == ["SEARCH: Travine lamp", "BACKTRACK", "REFUSE"]
    w1 = weights_at("discovery", 1, 20)
    assert math.isclose(replay.steps[0].reward, -1.0 * w1["beta"] - 1.0 * w1["eta"])  # ret −1, step −1
    assert replay.terminated and replay.final_view.t == 4


def test_ppo_gives_human_steps_no_advantage_but_keeps_their_reward_in_the_returns(tmp_path):
    """A person answered at t=2 in the studio: the replay says so; PPO whitens the policy's own steps only and sets
    the human step's advantage to 0 (no policy gradient on an action the policy did not choose), while its +1 answer
    reward still reaches the policy's t=1 return. With no human step nothing changes."""
    from training.objectives.ppo.round import PpoStep, _advantages, ppo_steps

    human_answer = dataclasses.replace(step(2, "ANSWER", "Sable River", ans=1.0), actor="human")
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        eid = add_episode(store, [step(1, "SEARCH", "Ansel Travine", ["demo:demo-001:2"], ret=1.0), human_answer,
                                  step(3, "REFUSE", None, (), ref=-1.0)])
        replay = replay_episode(store.get_episode(eid), PassageResolver(), 20)
    assert [s.actor for s in replay.steps] == ["policy", "human", "policy"]
    steps = ppo_steps([replay], lambda view: f"t={view.t}")
    assert [s.human for s in steps] == [False, True, False]
    cfg = load_config().train
    values = torch.zeros(3)
    advantages, returns = _advantages(steps, values, [0.0], cfg)
    assert advantages[1] == 0.0
    assert float(advantages[[0, 2]].mean()) == pytest.approx(0.0, abs=1e-6)  # whitened over the policy's steps
    rewards = [s.reward for s in steps]
    g, lam = cfg.gamma, cfg.gae_lambda
    assert float(returns[0]) == pytest.approx(rewards[0] + g * lam * (rewards[1] + g * lam * rewards[2]), rel=1e-5)
    plain = [PpoStep(s.episode, s.prompt, s.completion, s.reward) for s in steps]
    a_plain, r_plain = _advantages(plain, values, [0.0], cfg)
    assert torch.allclose(r_plain, returns) and a_plain[1] != 0.0


def test_passage_ids_resolve_through_the_store_when_the_episode_names_no_file(tmp_path):
    """Rollout episodes store pids only: without a data file the resolver asks the store for the question (once
    the data set is registered there); with neither it is a ConfigError naming what it tried."""
    from evorag_core.data.datasets import load_dataset

    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        eid = store.add_episode(question_id="demo-001", dataset="demo", question=Q1, policy="t", stage="discovery",
                                schedule="time-dynamic", steps=[step(1, "SEARCH", "Mirrow", ["demo:demo-001:4"])])
        episode = store.get_episode(eid)
        with pytest.raises(ConfigError, match="not found .*store:demo/demo-001"):
            replay_episode(episode, PassageResolver(store=store), 20)
        store.add_dataset(load_dataset(DEMO))
        replay = replay_episode(episode, PassageResolver(store=store), 20)
    assert replay.final_view.chain[0].passages[0].title == "Mirrow"


def test_grpo_groups_and_hand_computed_advantages(tmp_path):
    """Group [1, 0, 0, −1]: μ = 0, σ = √(2/4) = 0.7071 -> A = [1.4142, 0, 0, −1.4142].
    Group [0.5, 0.5, 2, −1]: μ = 0.5, σ = √((0+0+2.25+2.25)/4) = 1.0607 -> A = [0, 0, 1.4142, −1.4142].
    The group of four equal returns (0.3) carries no gradient and is left out: 4 groups, 3 usable, 12 samples."""
    with open_store(f"sqlite:///{tmp_path / 'db.sqlite'}") as store:
        ids = write_rollouts(store)
        replays = [replay_episode(store.get_episode(i), PassageResolver(), 20) for i in ids]
    groups = candidate_groups(replays, lambda view: f"state t={view.t}")
    assert [(g.episode_id, g.t) for g in groups] == [(ids[0], 1), (ids[0], 2), (ids[0], 3), (ids[1], 1)]
    assert groups[0].completions == ("SEARCH: Ansel Travine birthplace", "SEARCH: Travine lamp", "ANSWER: Mirrow", "REFUSE")
    samples = grpo_samples(groups)
    assert len(samples) == 12 and {s.group for s in samples} == {0, 1, 3}
    got = [round(s.advantage, 4) for s in samples[:8]]
    assert got == [1.4142, 0.0, 0.0, -1.4142, 0.0, 0.0, 1.4142, -1.4142]


def test_grpo_without_usable_groups_is_a_training_error(world):
    cfg, home, store = world
    add_episode(store, [step(1, "SEARCH", "x", ["demo:demo-001:0"], [Sibling("REFUSE", None, -1.0, 0.2)] * 2)])
    from training.rounds import run_round

    with pytest.raises(TrainingError, match="GRPO needs"):
        run_round(job(cfg, home, 1, "grpo"), store)


# -- slow: one tiny round of each objective ------------------------------------------------------------------------

@pytest.mark.slow
def test_dpo_round_trains_registers_and_records(world):
    """8 queued pairs, batch 4, 2 epochs -> 4 steps. Step 1 has policy = reference: loss = ln 2 = 0.6931; the loss
    falls, LoRA B (zero at init) becomes non-zero, and the adapter is registered with its metrics."""
    cfg, home, store = world
    prompt = "<|im_start|>system\nYou answer.<|im_end|>\n<|im_start|>user\nQuestion: {}<|im_end|>\n<|im_start|>assistant\n"
    store.add_pairs([NewPair(prompt.format(f"who founded town {i}"), f"SEARCH: town {i} founder", f"ANSWER: {i}")
                     for i in range(8)])
    rid = store.enqueue_round("dpo", {"pairs": 8})
    store.claim_round("w", 60)
    from training.rounds import run_round

    events: list[dict] = []
    ref = run_round(job(cfg, home, rid, "dpo", pairs=8), store, events.append)
    m = ref.metrics
    assert ref.name == f"r{rid}-dpo" and ref.path == home / "adapters" / str(rid)
    steps = [e for e in events if "step" in e]
    assert m["steps"] == 4 and [e["step"] for e in steps] == [1, 2, 3, 4] and steps[-1]["total"] == 4
    # the phases the studio shows, in order, around the steps (each one is also where a cancel is checked)
    assert [e["phase"] for e in events if "step" not in e] == ["load", "prepare", "train", "save", "register"]
    assert events.index(steps[0]) == 3 and events.index(steps[-1]) == 6
    assert math.isclose(m["first_loss"], math.log(2), abs_tol=1e-5) and m["final_loss"] < m["first_loss"]
    assert m["final_rewards_margins"] > 0 and len(m["pair_ids"]) == 8 and m["peak_rss_mb"] > 0
    assert all(t.abs().sum() > 0 for t in lora_b(ref.path).values())
    row = store.get_adapter(ref.name)
    assert row.round_id == rid and row.objective == "dpo" and row.checksum == ref.checksum
    assert "loss_history" not in row.metrics and row.metrics["steps"] == 4
    assert store.count_pairs("status") == {"claimed": 8}  # the worker's finish_round consumes them


@pytest.mark.slow
def test_grpo_round_moves_the_policy_and_is_reproducible(world):
    """12 samples, batch 4, 2 epochs -> 6 steps. Step 1: ratio 1 and KL 0 (policy = π_old = π_ref). Over all
    samples the surrogate starts at −mean(A) = 0 (each group's advantages sum to 0) and ends below 0: the policy
    moved probability to the better candidates; the KL to the reference grew > 0. The same job on the same data
    gives a byte-identical adapter (same sha256)."""
    cfg, home, store = world
    write_rollouts(store)
    from training.rounds import run_round

    r1 = store.enqueue_round("grpo", {})
    ref = run_round(job(cfg, home, r1, "grpo", kl="k2"), store)
    m = ref.metrics
    assert m["steps"] == 6 and m["samples"] == 12 and m["usable_groups"] == 3 and m["kl_estimator"] == "k2"
    step1 = m["loss_history"][0]
    assert m["first_kl"] == 0.0 and m["first_ratio_mean"] == 1.0 and m["final_kl"] > 0 and m["kl_end"] > 0
    assert abs(m["surrogate_start"]) < 1e-6 and m["surrogate_end"] < -0.05 and step1[1] == m["first_loss"]
    assert all(t.abs().sum() > 0 for t in lora_b(ref.path).values())
    r2 = store.enqueue_round("grpo", {})
    again = run_round(job(cfg, home, r2, "grpo", kl="k2", reference="base"), store)
    assert again.checksum == ref.checksum and again.metrics["loss_history"] == m["loss_history"]


@pytest.mark.slow
def test_grpo_max_steps_scores_only_the_samples_it_trains_on(world):
    """max_steps 2, batch 4: two minibatches of the first (seeded) epoch -> 8 of the 12 samples are scored and
    trained on, and the round stops after 2 optimiser steps."""
    cfg, home, store = world
    write_rollouts(store)
    from training.rounds import run_round

    rid = store.enqueue_round("grpo", {})
    m = run_round(job(cfg, home, rid, "grpo", max_steps=2), store).metrics
    assert m["steps"] == 2 and m["samples"] == 12 and m["samples_used"] == 8


@pytest.mark.slow
def test_ppo_round_trains_policy_and_value_head(world):
    """6 steps from 2 episodes, batch 4, 2 epochs -> 4 optimiser steps. The value head starts at V ≡ 0, so the
    first value loss is ½ mean(R_t²) > 0 and it falls as the head learns; the head is saved beside the adapter.
    Once activated, the first adapter is the second round's reference (reference 'previous': the live adapter) and
    the second round loads its value head."""
    cfg, home, store = world
    write_rollouts(store)
    from training.objectives.ppo.round import VALUE_HEAD_FILE
    from training.rounds import run_round

    r1 = store.enqueue_round("ppo", {})
    ref = run_round(job(cfg, home, r1, "ppo"), store)
    m = ref.metrics
    assert m["samples"] == 6 and m["episodes"] == 2 and m["steps"] == 4 and m["reference"] == "base"
    assert m["first_value_loss"] > 0 and m["final_value_loss"] < m["first_value_loss"]
    assert m["final_loss"] != m["first_loss"] and all(t.abs().sum() > 0 for t in lora_b(ref.path).values())
    head = load_file(str(ref.path / VALUE_HEAD_FILE))
    assert head["linear.weight"].abs().sum() > 0
    from evorag_core.adapters.registry import activate

    activate(store, ref.name, str(cfg.policy.model))
    r2 = store.enqueue_round("ppo", {})
    second = run_round(job(cfg, home, r2, "ppo", epochs=1), store)
    assert second.metrics["reference"] == ref.name
    assert second.metrics["first_value_loss"] < m["first_value_loss"]  # the head continued from round 1's
