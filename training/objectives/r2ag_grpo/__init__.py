"""R²AG's tree-steering GRPO on the data file's questions: `config.py` (R2agGrpoConfig, the job's `r2ag` object),
`round.py` (the progressive forest, the update, the worker's round)."""
