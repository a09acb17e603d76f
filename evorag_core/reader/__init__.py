"""The reader every method shares: grounded short answers (a passage span, yes/no by label log-probabilities, or a refusal)."""
