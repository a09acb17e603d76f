"""Reward ablations and adaptive weight tuning over one stored rollout set (issue #27): `variants` (the paper's
schedule and preset ablations as `Variant`s), `pipeline` (re-score -> pairs -> one round -> evaluation, resumable),
`report` (the markdown table, JSON and plotly figure) and `tune` (UCB1 and optuna searches over the weight table).
`evorag ablate` and `evorag tune-weights` (evorag_core/cli) are the commands."""
