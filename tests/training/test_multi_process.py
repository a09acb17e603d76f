"""A round on 2 processes equals the same round on 1 (issue 28): `accelerate launch --config_file
training/accelerate/ddp.yaml --num_processes 2 -m training.worker --once` with policy.device = cpu (2 gloo processes)
against plain `python -m training.worker --once`, each on its own copy of the same SQLite store (the same queued
pairs / stored rollouts and one queued round), with the tiny random Llama.

What "equal" means here: the global batch is the same. `train.batch_size` x `train.grad_accum` is the number of
samples per optimiser step whatever the number of processes, so on 2 processes each takes half of every step:
- DPO (TRL's Trainer, DDP): 8 pairs, batch 4, 2 epochs -> 4 steps. One process runs 1 pair per pass and accumulates
  4 passes per step (CPU micro-batching); two run 1 pair per pass and accumulate 2 each (`dpo.micro_batching`), and
  accelerate's sampler gives process i the pairs i, i + 2, ... of the same seeded order; DDP averages the two
  processes' gradients, so each step's gradient is the mean over the same 4 pairs.
- GRPO (our loop, training/processes.py): 12 samples, batch 4, 2 epochs -> 6 steps; each process takes rows i, i + 2
  of every minibatch, weighs its loss by its share (2/4) and the gradients are summed once per step: again the mean
  over the same 4 samples.
The sums run in another order and each process pads its own rows, so the results agree up to float rounding, not
bit for bit. Stated tolerance: every logged step loss within 1e-4 (absolute), and every adapter tensor within 1e-4
of the other's (absolute; the LoRA weights are ~1e-2 after lr 5e-3, so that is ~1 % of the smallest moved weight and
far below what one step changes). Measured on 2026-11-27 (2 shared cores): see the test bodies' comments.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.paths import REPO
from evorag_core.store import NewPair, open_store

PROMPT = "<|im_start|>system\nYou answer.<|im_end|>\n<|im_start|>user\nQuestion: {}<|im_end|>\n<|im_start|>assistant\n"
SETTINGS = {"policy.device": "cpu", "policy.threads": 1, "train.max_length": 192, "train.lr": 5e-3,
            "train.batch_size": 4, "train.epochs": 2, "train.seed": 3, "train.kl_coef": 0.1, "train.dtype": "float32"}
TOLERANCE = 1e-4
LAUNCH_2 = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(REPO / "training" / "accelerate" / "ddp.yaml"), "--num_processes", "2"]


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _worker(home: Path, url: str, tiny: Path, launch: list[str]) -> subprocess.CompletedProcess:
    args = ["--home", str(home), "--db", url, "--model", str(tiny), "--once"]
    for key, value in SETTINGS.items():
        args += ["--set", f"{key}={value}"]
    launch = [*launch, "--main_process_port", _free_port()] if launch else []
    cmd = [*launch, "-m", "training.worker", *args] if launch else [sys.executable, "-m", "training.worker", *args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO),
               OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def _both(tmp_path: Path, tiny: Path, fill) -> dict[int, tuple[dict, dict]]:
    """{processes: (the finished round's metrics, the adapter's tensors)} for 1 and 2 processes, each on a copy of
    the store that `fill(store)` filled (it queues the round)."""
    seed_db = tmp_path / "seed.db"
    store = open_store(f"sqlite:///{seed_db}")
    rid = fill(store)
    store.close()
    out = {}
    for n, launch in ((1, []), (2, LAUNCH_2)):
        home = tmp_path / f"home{n}"
        home.mkdir()
        shutil.copy(seed_db, home / "evorag.db")
        url = f"sqlite:///{home / 'evorag.db'}"
        proc = _worker(home, url, tiny, launch)
        with open_store(url) as st:
            row = st.get_round(rid)
        assert proc.returncode == 0 and row.status == "succeeded", (
            f"{n} process(es): rc {proc.returncode}, round {row.status}: {row.error}\n{proc.stderr[-4000:]}")
        assert row.metrics.get("processes", 1) == n
        out[n] = (row.metrics, load_file(str(Path(row.metrics["adapter_path"]) / "adapter_model.safetensors")))
    return out


def _assert_equal(runs: dict[int, tuple[dict, dict]]) -> tuple[float, float]:
    """(largest step-loss difference, largest adapter difference), both asserted within TOLERANCE."""
    (m1, a1), (m2, a2) = runs[1], runs[2]
    assert m1["steps"] == m2["steps"] and [s for s, _ in m1["loss_history"]] == [s for s, _ in m2["loss_history"]]
    loss_diff = max(abs(x - y) for (_, x), (_, y) in zip(m1["loss_history"], m2["loss_history"]))
    assert sorted(a1) == sorted(a2)
    weight_diff = max(float((a1[k] - a2[k]).abs().max()) for k in a1)
    moved = min(float(a1[k].abs().max()) for k in a1 if "lora_B" in k)
    assert moved > 100 * TOLERANCE, "the round did not move the adapter: nothing to compare"
    assert loss_diff <= TOLERANCE and weight_diff <= TOLERANCE, (loss_diff, weight_diff, m1["loss_history"],
                                                                 m2["loss_history"])
    return loss_diff, weight_diff


@pytest.mark.slow
def test_a_dpo_round_on_two_processes_equals_one(tmp_path, tiny):
    """8 pairs, batch 4, 2 epochs: 4 steps on both; step 1's loss is ln 2 on both (policy = reference)."""
    def fill(store) -> int:
        store.add_pairs([NewPair(PROMPT.format(f"who founded town {i}"), f"SEARCH: town {i} founder", f"ANSWER: {i}")
                         for i in range(8)])
        return store.enqueue_round("dpo", {"pairs": 8})

    runs = _both(tmp_path, tiny, fill)
    assert runs[1][0]["steps"] == 4 and runs[2][0]["pairs"] == 8
    loss_diff, weight_diff = _assert_equal(runs)
    print(f"dpo: loss diff {loss_diff:.3g}, adapter diff {weight_diff:.3g}")


@pytest.mark.slow
def test_a_grpo_round_on_two_processes_equals_one(tmp_path, tiny):
    """The stored rollouts of tests/training/test_rounds.py: 12 samples in 3 usable groups, batch 4, 2 epochs: 6
    steps on both; step 1's ratio is 1 and its KL 0 on both."""
    from tests.training.test_rounds import write_rollouts

    def fill(store) -> int:
        write_rollouts(store)
        return store.enqueue_round("grpo", {})

    runs = _both(tmp_path, tiny, fill)
    assert runs[1][0]["steps"] == 6 and runs[2][0]["samples"] == 12
    assert runs[2][0]["first_kl"] == 0.0 and abs(runs[2][0]["first_ratio_mean"] - 1.0) < 1e-6
    assert abs(runs[1][0]["surrogate_end"] - runs[2][0]["surrogate_end"]) <= TOLERANCE
    loss_diff, weight_diff = _assert_equal(runs)
    print(f"grpo: loss diff {loss_diff:.3g}, adapter diff {weight_diff:.3g}")
