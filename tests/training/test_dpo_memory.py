"""DPO's CPU micro-batching (training/objectives/dpo/trainer.py `CPU_MICRO_BATCH`): one pair per forward pass, accumulated to the
configured batch, trains the same adapter as whole batches (equal within float rounding), in a fraction of the
activation memory. bench/memory.py measures the memory on the embedded model."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file

import training.objectives.dpo.trainer as dpo_module
from evorag_core.config import TrainConfig
from training.objectives.dpo.data import PairExample
from training.objectives.dpo.trainer import micro_batching, train_dpo
from evorag_core.adapters.files import WEIGHTS_FILE

from tests.training.test_dpo import BASE_ID, CFG, PAIRS, TRAIN, build_tokenizer, chat, tiny_model


def test_micro_batching_keeps_the_pairs_per_step():
    cfg = dataclasses.replace(TrainConfig(), batch_size=4, grad_accum=2)
    assert micro_batching(cfg, use_cpu=True) == (1, 8)
    assert micro_batching(cfg, use_cpu=False) == (4, 2)  # GPUs: as configured
    assert micro_batching(dataclasses.replace(cfg, batch_size=1), use_cpu=True) == (1, 2)


def _train(pairs, cfg, folder, micro):
    tokenizer = build_tokenizer()
    events: list[dict] = []
    old = dpo_module.CPU_MICRO_BATCH
    dpo_module.CPU_MICRO_BATCH = micro
    try:
        result = train_dpo(pairs, tiny_model(len(tokenizer)), tokenizer, cfg, folder, None, events.append,
                           base_model_id=BASE_ID)
    finally:
        dpo_module.CPU_MICRO_BATCH = old
    return result, load_file(str(folder / WEIGHTS_FILE)), [e for e in events if "loss" in e]


@pytest.mark.slow
@pytest.mark.parametrize("n_pairs", [8, 10])  # 10 pairs, batch 4: each epoch ends with a 2-pair step
def test_micro_batches_train_the_same_adapter(tmp_path, n_pairs):
    pairs = TRAIN if n_pairs == 8 else TRAIN + [PairExample(chat(q + " again"), f"SEARCH: {q}", "ANSWER: no")
                                                   for q in ("largest planet", "author of dune")]
    assert len(pairs) == n_pairs and len(PAIRS) >= 8
    whole, w_whole, log_whole = _train(pairs, CFG, tmp_path / "whole", None)
    micro, w_micro, log_micro = _train(pairs, CFG, tmp_path / "micro", 1)
    assert whole.steps == micro.steps == 3 * -(-n_pairs // CFG.batch_size)
    assert [e["step"] for e in log_whole] == [e["step"] for e in log_micro]
    for a, b in zip(log_whole, log_micro):
        for key in ("loss", "rewards/margins", "rewards/chosen", "rewards/accuracies"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), (a["step"], key)
    assert w_whole.keys() == w_micro.keys()
    for key, tensor in w_whole.items():
        torch.testing.assert_close(w_micro[key], tensor, rtol=1e-4, atol=1e-6)
    assert any(t.abs().sum() > 0 for k, t in w_whole.items() if "lora_B" in k)  # it trained at all
