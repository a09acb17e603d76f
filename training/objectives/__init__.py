"""One folder per training objective, each listed once in the registry (`evorag_core.objectives.OBJECTIVES`):

    <name>/round.py    run(job, store, on_progress): what the worker calls for a queued round of the objective
    <name>/config.py   the objective's own settings (the job's nested object, e.g. `arena`), when it has any; the
                       registry entry names its class, which has `from_job(job)`
    <name>/loss.py     the objective's loss (GRPO, PPO), pure torch; DPO's is TRL's (`dpo/trainer.py`)

The LoRA objectives plug their steps into `training.lora_round` (setup -> train -> save -> register). A new objective
is a folder here and one line in the registry (tests/training/test_objective_folders.py checks both).
"""
