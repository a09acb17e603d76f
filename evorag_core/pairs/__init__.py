"""Preference pairs: sibling rollouts from the environment, pair selection, persistence and TRL-format pair I/O."""
