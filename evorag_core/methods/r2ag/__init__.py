"""R²AG (seed 002, SPEC §7): a reasoning-augmented retrieval tree grown by a steering model, Top-Survivor rewards,
bottom-up pruning; the `r2ag` evaluation method and its retrieval metrics."""
from __future__ import annotations

from evorag_core.methods.r2ag.parse import Expansion, parse_expansion
from evorag_core.methods.r2ag.rewards import R2agReward, RewardWeights, expansion_reward
from evorag_core.methods.r2ag.scripted import ScriptedSteering
from evorag_core.methods.r2ag.steering import LMSteering, Proposal, SteerRequest, Steering
from evorag_core.methods.r2ag.tree import Node, Tree, TreeSettings, expand_once, frontier, grow, new_tree, prune, pruned_context

__all__ = [
    "Expansion", "parse_expansion", "R2agReward", "RewardWeights", "expansion_reward", "ScriptedSteering",
    "LMSteering", "Proposal", "SteerRequest", "Steering", "Node", "Tree", "TreeSettings", "expand_once", "frontier",
    "grow", "new_tree", "prune", "pruned_context",
]
