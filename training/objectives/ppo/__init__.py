"""PPO with a value head and GAE on stored episodes: `loss.py` (ValueHead, gae, ppo_losses), `round.py` (the
worker's round). Its settings are [train]'s and the job's vf_coef."""
