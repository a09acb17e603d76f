"""Answering methods: episode policies run in the environment, and pipeline baselines."""
from evorag_core.methods.base import EpisodeMethod, QuestionResult, run_episode
from evorag_core.methods.oracle import OraclePolicy
from evorag_core.methods.script import ScriptPolicy, load_script

__all__ = ["EpisodeMethod", "QuestionResult", "run_episode", "OraclePolicy", "ScriptPolicy", "load_script"]
