"""ARENA's GRPO on the data file's questions: `config.py` (ArenaGrpoConfig, the job's `arena` object), `round.py`
(sampled groups, ARENA's rewards, the update, the worker's round)."""
