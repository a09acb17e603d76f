"""Answering methods: episode policies run in the environment, and pipeline baselines."""
from .base import EpisodeMethod, QuestionResult, run_episode
from .oracle import OraclePolicy
from .script import ScriptPolicy, load_script

__all__ = ["EpisodeMethod", "QuestionResult", "run_episode", "OraclePolicy", "ScriptPolicy", "load_script"]
