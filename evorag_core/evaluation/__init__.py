"""Evaluation: the question-by-question runner (metrics are `evorag_core.metrics`) with bootstrap comparisons, and stored eval traces."""
