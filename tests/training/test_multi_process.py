"""A round on 2 processes equals the same round on 1 (issue 28): `accelerate launch --config_file
training/accelerate/ddp.yaml --num_processes 2 -m training.worker --drain` with policy.device = cpu (2 gloo
processes) against plain `python -m training.worker --drain`, each on its own copy of the same SQLite store (the same
queued pairs / stored rollouts and queued rounds), with the tiny random Llama. One launch per process count runs
every queued round (the DPO, GRPO and PPO rounds share their launches: each launch costs seconds of imports).

What "equal" means here: the global batch is the same. `train.batch_size` x `train.grad_accum` is the number of
samples per optimiser step whatever the number of processes, so on 2 processes each takes half of every step:
- DPO (TRL's Trainer, DDP): 8 pairs, batch 4, 2 epochs -> 4 steps. One process runs 1 pair per pass and accumulates
  4 passes per step (CPU micro-batching); two run 1 pair per pass and accumulate 2 each (`dpo.micro_batching`), and
  accelerate's sampler gives process i the pairs i, i + 2, ... of the same seeded order; DDP averages the two
  processes' gradients, so each step's gradient is the mean over the same 4 pairs.
- GRPO and PPO (our loops, training/processes.py): GRPO 12 samples, batch 4, 2 epochs -> 6 steps; each process takes
  rows i, i + 2 of every minibatch, weighs its loss by its share (2/4) and the gradients are summed once per step:
  again the mean over the same 4 samples. PPO the same over 6 stored steps (4 optimiser steps), value head included.
The sums run in another order and each process pads its own rows, so the results agree up to float rounding, not
bit for bit. Stated tolerance: every logged step loss within 1e-4 (absolute), and every adapter weight within 1e-4
of the other's (absolute). One Adam step at lr 5e-3 moves a LoRA B weight by ~5e-3, and the test first checks that
every B matrix moved by more than 10x the tolerance, so a wrong shard, a missing or doubled gradient sum would show.
Measured on 2026-11-27 (2 shared cores), largest differences: DPO loss 1.2e-7, weights 5.6e-8; GRPO 1.5e-7, 5.8e-7;
PPO 1.6e-7, 6.6e-7; ARENA GRPO 0, 1.9e-7 (R²AG GRPO: tests/methods/test_r2ag.py, 0 and 0).
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.paths import REPO
from evorag_core.procs import free_port
from evorag_core.store import NewPair, open_store
from tests.methods.test_arena import warm_tiny  # noqa: F401  (fixture: a tiny model whose replies differ in reward)

PROMPT = "<|im_start|>system\nYou answer.<|im_end|>\n<|im_start|>user\nQuestion: {}<|im_end|>\n<|im_start|>assistant\n"
SETTINGS = {"policy.device": "cpu", "policy.threads": 1, "train.max_length": 192, "train.lr": 5e-3,
            "train.batch_size": 4, "train.epochs": 2, "train.seed": 3, "train.kl_coef": 0.1, "train.dtype": "float32"}
TOLERANCE = 1e-4
LAUNCH_2 = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(REPO / "training" / "accelerate" / "ddp.yaml"), "--num_processes", "2"]


def _worker(home: Path, url: str, tiny: Path, launch: list[str], until: str = "--once",
            **settings) -> subprocess.CompletedProcess:
    args = ["--home", str(home), "--db", url, "--model", str(tiny), until]
    for key, value in {**SETTINGS, **settings}.items():
        args += ["--set", f"{key}={value}"]
    launch = [*launch, "--main_process_port", str(free_port())] if launch else []
    cmd = [*launch, "-m", "training.worker", *args] if launch else [sys.executable, "-m", "training.worker", *args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO),
               OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


Run = tuple[dict, dict]  # a finished round's metrics, its adapter's tensors


def _both(tmp_path: Path, tiny: Path, fill) -> dict[int, dict[int, Run]]:
    """{processes: {round id: (metrics, adapter tensors)}} for 1 and 2 processes, each a worker run with `--drain`
    on a copy of the store that `fill(store)` filled: it queues the rounds and returns their ids (the worker runs them
    in that order and exits when none is left; promotion.evaluate is off, so no round queues another)."""
    seed_db = tmp_path / "seed.db"
    store = open_store(f"sqlite:///{seed_db}")
    rids = fill(store)
    store.close()
    out = {}
    for n, launch in ((1, []), (2, LAUNCH_2)):
        home = tmp_path / f"home{n}"
        home.mkdir()
        shutil.copy(seed_db, home / "evorag.db")
        url = f"sqlite:///{home / 'evorag.db'}"
        proc = _worker(home, url, tiny, launch, "--drain", **{"promotion.evaluate": "false"})
        out[n] = {}
        for rid in rids:
            with open_store(url) as st:
                row = st.get_round(rid)
            assert proc.returncode == 0 and row.status == "succeeded", (
                f"{n} process(es): rc {proc.returncode}, round {rid} {row.status}: {row.error}\n{proc.stderr[-4000:]}")
            assert row.metrics.get("processes", 1) == n
            folder = Path(row.metrics["adapter_path"])
            tensors = load_file(str(folder / "adapter_model.safetensors"))
            if (folder / "value_head.safetensors").is_file():  # PPO's value head, compared like the LoRA weights
                tensors.update({f"value_head.{k}": v
                                for k, v in load_file(str(folder / "value_head.safetensors")).items()})
            out[n][rid] = (row.metrics, tensors)
    return out


def _assert_equal(one: Run, two: Run) -> tuple[float, float]:
    """(largest step-loss difference, largest adapter difference) of one round on 1 and on 2 processes, both asserted
    within TOLERANCE."""
    (m1, a1), (m2, a2) = one, two
    assert m1["steps"] == m2["steps"] and [s for s, _ in m1["loss_history"]] == [s for s, _ in m2["loss_history"]]
    loss_diff = max(abs(x - y) for (_, x), (_, y) in zip(m1["loss_history"], m2["loss_history"]))
    assert sorted(a1) == sorted(a2)
    weight_diff = max(float((a1[k] - a2[k]).abs().max()) for k in a1)
    moved = min(float(a1[k].abs().max()) for k in a1 if "lora_B" in k)
    assert moved > 10 * TOLERANCE, "the round did not move the adapter: nothing to compare"
    assert loss_diff <= TOLERANCE and weight_diff <= TOLERANCE, (loss_diff, weight_diff, m1["loss_history"],
                                                                 m2["loss_history"])
    return loss_diff, weight_diff


@pytest.mark.slow
def test_dpo_grpo_and_ppo_rounds_on_two_processes_equal_one(tmp_path, tiny):
    """Three rounds queued on one store, each run by one worker launch per process count (`--drain`); each round
    starts from the base model (none is activated), so each is compared on its own:
    - DPO: 8 pairs, batch 4, 2 epochs: 4 steps on both; step 1's loss is ln 2 on both (policy = reference).
    - GRPO: the stored rollouts of tests/training/test_rounds.py, 12 samples in 3 usable groups, batch 4, 2 epochs:
      6 steps on both; step 1's ratio is 1 and its KL 0 on both.
    - PPO: the same stored rollouts, 6 steps from 2 episodes, batch 4, 2 epochs -> 4 optimiser steps (minibatches of
      4 and 2 rows: each process takes 2 and 1 of them). The value head (zero at the start) is compared with the LoRA
      weights; π_old, V_old and the bootstrap values are computed on each process's shard and gathered."""
    from tests.training.test_rounds import write_rollouts

    def fill(store) -> list[int]:
        store.add_pairs([NewPair(PROMPT.format(f"who founded town {i}"), f"SEARCH: town {i} founder", f"ANSWER: {i}")
                         for i in range(8)])
        write_rollouts(store)
        return [store.enqueue_round("dpo", {"pairs": 8}), store.enqueue_round("grpo", {}),
                store.enqueue_round("ppo", {})]

    runs = _both(tmp_path, tiny, fill)
    dpo, grpo, ppo = sorted(runs[1])
    assert runs[1][dpo][0]["steps"] == 4 and runs[2][dpo][0]["pairs"] == 8
    assert abs(runs[2][dpo][0]["loss_history"][0][1] - math.log(2)) < 1e-4
    assert runs[1][grpo][0]["steps"] == 6 and runs[2][grpo][0]["samples"] == 12
    assert runs[2][grpo][0]["first_kl"] == 0.0 and abs(runs[2][grpo][0]["first_ratio_mean"] - 1.0) < 1e-6
    assert abs(runs[1][grpo][0]["surrogate_end"] - runs[2][grpo][0]["surrogate_end"]) <= TOLERANCE
    assert runs[1][ppo][0]["steps"] == 4 and runs[2][ppo][0]["samples"] == 6
    assert any(float(t.abs().max()) > 0 for k, t in runs[2][ppo][1].items() if k.startswith("value_head."))
    for name, rid in (("dpo", dpo), ("grpo", grpo), ("ppo", ppo)):
        loss_diff, weight_diff = _assert_equal(runs[1][rid], runs[2][rid])
        print(f"{name}: loss diff {loss_diff:.3g}, adapter diff {weight_diff:.3g}")


@pytest.mark.slow
def test_an_arena_grpo_round_on_two_processes_equals_one(tmp_path, warm_tiny):
    """ARENA's GRPO over one question Q (tests/methods/test_arena.py's warmed-up tiny model, whose replies differ in
    reward), 2 epochs and 2 questions per step: one step of two groups of G = 4 sampled replies (seeds 3 + 0 and
    3 + 1). On 2 processes each samples and trains on one group (the seed is the group's, not the process's), so
    both runs see the same 8 replies; the step's loss, rewards and the adapter agree within the tolerance. (R²AG's
    round: tests/methods/test_r2ag.py, on its own warmed-up model.)"""
    from evorag_core.data.datasets import write_jsonl
    from evorag_core.types import Dataset
    from tests.methods.test_arena import Q
    from training.job import job_config

    data = tmp_path / "q.jsonl"
    write_jsonl(Dataset("demo", str(data), (Q,)), data)
    raw = job_config("arena-grpo", data=str(data), kl="k3", reference="base",
                     arena={"group_size": 4, "questions": 1, "questions_per_step": 2, "max_new_tokens": 40})
    runs = _both(tmp_path, warm_tiny, lambda store: [store.enqueue_round("arena-grpo", raw)])
    [rid] = runs[1]
    (m1, _), (m2, _) = runs[1][rid], runs[2][rid]
    assert m1["steps"] == m2["steps"] == 1
    assert abs(m1["first_reward"] - m2["first_reward"]) <= TOLERANCE and m1["first_reward"] > 0
    loss_diff, weight_diff = _assert_equal(runs[1][rid], runs[2][rid])
    print(f"arena-grpo: loss diff {loss_diff:.3g}, adapter diff {weight_diff:.3g}")


@pytest.mark.slow
def test_a_round_that_fails_on_every_process_fails_once_with_a_readable_error(tmp_path, tiny):
    """batch 3 cannot be split over 2 processes: every process raises the same ConfigError in its setup, the
    outcomes are gathered, the main process fails the round with that message (its pairs back in the queue), and
    both processes end normally (rc 0), none left waiting in a collective."""
    url = f"sqlite:///{tmp_path / 'evorag.db'}"
    with open_store(url) as store:
        store.add_pairs([NewPair(PROMPT.format(f"town {i}"), f"SEARCH: town {i}", f"ANSWER: {i}") for i in range(6)])
        rid = store.enqueue_round("dpo", {"pairs": 6})
    proc = _worker(tmp_path, url, tiny, LAUNCH_2, **{"train.batch_size": 3})
    with open_store(url) as store:
        row = store.get_round(rid)
        queued = store.count_pairs("status")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert row.status == "failed" and "ConfigError" in row.error and "2 processes" in row.error, row.error
    assert queued == {"queued": 6}


@pytest.mark.slow
def test_a_cancel_stops_every_process_at_the_same_step(tmp_path, tiny):
    """A long 2-process DPO round (8 pairs, batch 2, 40 epochs: 160 steps) is cancelled once the store shows a
    training step: the main process's heartbeat sees the request at its next report, the verdict is broadcast, both
    processes stop there (none waits in a collective), the round ends `cancelled` with its pairs queued again and
    no adapter, and the launch exits 0. The test waits on the round's progress and status in the store."""
    import time

    url = f"sqlite:///{tmp_path / 'evorag.db'}"
    store = open_store(url)
    try:
        store.add_pairs([NewPair(PROMPT.format(f"town {i}"), f"SEARCH: town {i}", f"ANSWER: {i}") for i in range(8)])
        rid = store.enqueue_round("dpo", {"pairs": 8})
        args = ["--home", str(tmp_path), "--db", url, "--model", str(tiny), "--once"]
        for key, value in {**SETTINGS, "train.batch_size": 2, "train.epochs": 40}.items():
            args += ["--set", f"{key}={value}"]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO),
                   OMP_NUM_THREADS="1")
        log = (tmp_path / "launch.log").open("w")
        proc = subprocess.Popen([*LAUNCH_2, "--main_process_port", str(free_port()), "-m", "training.worker", *args],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600
            while (store.get_round(rid).progress or {}).get("step", 0) < 1:
                assert proc.poll() is None, (tmp_path / "launch.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "no training step within 600 s"
                time.sleep(0.2)  # a poll of the store
            store.cancel_round(rid)
            assert proc.wait(300) == 0, (tmp_path / "launch.log").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        row = store.get_round(rid)
        assert row.status == "cancelled" and row.progress["step"] < 160, (row.status, row.progress, row.error)
        assert store.count_pairs("status") == {"queued": 8}
        assert not store.list_adapters()
    finally:
        store.close()


# -- fast: how a step's batch is split ----------------------------------------------------------------------------

def test_dpo_splits_the_global_batch_over_the_processes():
    """batch 4 x grad_accum 1 = 4 pairs per step. CPU (1 pair per pass): 1 process 1 x 4 passes, 2 processes 1 x 2
    each, 4 processes 1 x 1. GPU (the configured batch per pass): 2 processes 2 pairs x 1 pass each. 3 processes
    cannot split 4 pairs: a ConfigError, not a silently different batch."""
    import dataclasses

    from evorag_core.config import load_config
    from evorag_core.errors import ConfigError
    from training.objectives.dpo.trainer import micro_batching

    cfg = dataclasses.replace(load_config().train, batch_size=4, grad_accum=1)
    assert micro_batching(cfg, use_cpu=True) == (1, 4)
    assert micro_batching(cfg, use_cpu=True, processes=2) == (1, 2)
    assert micro_batching(cfg, use_cpu=True, processes=4) == (1, 1)
    assert micro_batching(cfg, use_cpu=False, processes=2) == (2, 1)
    with pytest.raises(ConfigError, match="3 processes"):
        micro_batching(cfg, use_cpu=True, processes=3)


def test_shards_cover_a_minibatch_once():
    """Process i of N takes rows i, i + N, ...: the shards of [0..4] over 2 processes are [0, 2, 4] and [1, 3], and
    together every row once; one process (SINGLE) takes them all and its collectives are the identity."""
    from training.processes import SINGLE, Processes

    rows = [0, 1, 2, 3, 4]
    shards = [Processes(i, 2).shard(rows) for i in range(2)]
    assert shards == [[0, 2, 4], [1, 3]] and sorted(shards[0] + shards[1]) == rows
    assert Processes(1, 4).shard([7]) == []  # a short minibatch leaves a process nothing to do
    assert SINGLE.shard(rows) == rows and SINGLE.broadcast("x") == "x" and SINGLE.sum_values({"a": 1.5}) == {"a": 1.5}
    assert SINGLE.on_main(lambda a, b: a + b, 2, b=3) == 5 and SINGLE.gather([1]) == [1]


def test_close_destroys_the_process_group_and_is_a_no_op_alone(tmp_path):
    """A launched worker ends with `Processes.close()`: its process group is destroyed (a gloo group alive at exit can
    abort the interpreter with SIGABRT after every round succeeded, as the r2ag two-process test once did in a full
    suite). Alone (`SINGLE`) nothing happens; closing twice is fine."""
    import torch.distributed as dist

    from training.processes import SINGLE, Processes

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        SINGLE.close()
        assert dist.is_initialized()
        Processes(0, 2).close()
        assert not dist.is_initialized()
        Processes(0, 2).close()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
