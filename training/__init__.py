"""Policy training: objectives (DPO via TRL, step-level GRPO and PPO losses), LoRA adapters and pair data.

Import from the modules, not from this package: the package itself imports nothing, so a process that only polls
the store (`evorag worker` while the queue is empty, the studio's supervised worker) does not load torch until it
claims a round. Where things are: `training.kl` (KL estimators), `training.reduce` (per-sequence reductions),
`training.objectives.<name>/` (each objective's round, config and loss: `dpo.data` pair fitting, `grpo.loss`,
`ppo.loss` with the value head and GAE), `training.lora` (peft), `training.worker` (the queue's worker).
"""
