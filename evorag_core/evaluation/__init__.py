"""Evaluation: EM/F1/support metrics, the question-by-question runner with bootstrap comparisons, and stored eval traces."""
