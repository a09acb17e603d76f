"""Policy training: objectives (DPO via TRL, step-level GRPO and PPO losses), LoRA adapters and pair data.

Re-exported here: the pure, torch-only pieces. `training.lora` (peft) and `training.objectives.dpo.trainer` (TRL)
pull in heavier libraries, so import them from their modules: `from training.objectives.dpo.trainer import train_dpo`.
Each objective's folder is training/objectives/<name>/ (its round, config and loss).
"""
from training.kl import kl_estimator, kl_k2, kl_k3
from training.objectives.dpo.data import (FitReport, PairExample, fit_pairs, from_conversational, split_pairs,
                                          to_conversational)
from training.objectives.grpo.loss import group_advantages, grpo_loss
from training.objectives.ppo.loss import ValueHead, gae, ppo_losses
from training.reduce import per_sequence, sequence_mean

__all__ = [
    "PairExample",
    "FitReport",
    "fit_pairs",
    "split_pairs",
    "to_conversational",
    "from_conversational",
    "group_advantages",
    "grpo_loss",
    "kl_k3",
    "kl_k2",
    "kl_estimator",
    "gae",
    "ppo_losses",
    "ValueHead",
    "per_sequence",
    "sequence_mean",
]
