"""DynaKrag (SPEC §7): evidence state, seven atomic operations behind a hard validity layer, and a learned
action-value controller. scikit-learn, torch and the retrievers are imported only when used."""
from __future__ import annotations

from evorag_core.methods.dynakrag.controller import Decision, LearnedController, UniformController, ValueModels, load_models, save_models
from evorag_core.methods.dynakrag.features import FEATURE_NAMES, STATE_FEATURES, action_features, state_features
from evorag_core.methods.dynakrag.lm import EvidenceLM, Usage
from evorag_core.methods.dynakrag.method import DynaKragMethod, Episode, StepTrace, build_dynakrag_method, run_dynakrag
from evorag_core.methods.dynakrag.ops import OPS, OpContext, estimated_cost, execute
from evorag_core.methods.dynakrag.state import ACQUISITION, ACTIONS, CONTROL, SCORED, EvidenceDoc, EvidenceState, initial_state
from evorag_core.methods.dynakrag.training import train_dynakrag
from evorag_core.methods.dynakrag.validity import RULES, check_valid, valid_actions

__all__ = [
    "ACQUISITION", "ACTIONS", "CONTROL", "SCORED", "EvidenceDoc", "EvidenceState", "initial_state",
    "RULES", "valid_actions", "check_valid",
    "OPS", "OpContext", "execute", "estimated_cost",
    "EvidenceLM", "Usage",
    "FEATURE_NAMES", "STATE_FEATURES", "state_features", "action_features",
    "Decision", "LearnedController", "UniformController", "ValueModels", "save_models", "load_models",
    "DynaKragMethod", "Episode", "StepTrace", "run_dynakrag", "build_dynakrag_method",
    "train_dynakrag",
]
