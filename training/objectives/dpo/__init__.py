"""DPO (TRL's DPOTrainer on LoRA) on queued preference pairs: `data.py` (pair examples, fitting to max_length),
`trainer.py` (train_dpo), `round.py` (the worker's round). Its settings are [train]'s (beta, lr, epochs...)."""
