"""Step-level GRPO on stored episodes' sibling groups: `loss.py` (group advantages, the clipped objective with KL;
also ARENA's and R²AG's loss), `round.py` (the worker's round), `completions.py` (GRPO over sampled completions of
one prompt: what ARENA's and R²AG's rounds share). Its settings are [train]'s."""
