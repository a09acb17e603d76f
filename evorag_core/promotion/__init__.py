"""Gated promotion: a new adapter goes live only if it beats the live one on held-out questions.

- `rule.decide`: the verdict from a paired comparison (pure).
- `report.build_report`: the stored report (both sides' summaries and intervals, the differences, changed questions).
- `evaluate.evaluate_side`: one side's results on the `[promotion]` slice, cached by weights and setting.
- `gate.evaluate_candidate` / `gate.promote`: evaluate, record the report, activate a passing adapter (auto) or on
  an admin's request (forced, with a reason, when it did not pass).

The worker runs `gate.evaluate_candidate` as a queued job after every round that registers an adapter
(`training/evaluate_round.py`); `evorag adapters evaluate|promote` and the studio's Adapters panel call it too.
docs/promotion.md says why the rule is what it is.
"""
