"""DynaKrag one step at a time (what the studio's DynaKrag tab drives): `exclusion` names the rule that keeps each
operation out of A(s) and agrees with the validity layer on every enumerated state; `control_step` +
`finish_episode` replay `run_dynakrag` exactly. No language model: a fixed stand-in answers and compresses."""
from __future__ import annotations

import pytest

from evorag_core.config import DynaKragConfig
from evorag_core.errors import EnvStateError
from evorag_core.methods.dynakrag import ACTIONS, EvidenceState, UniformController, initial_state, valid_actions
from evorag_core.methods.dynakrag.lm import Usage
from evorag_core.methods.dynakrag.method import control_step, finish_episode, run_dynakrag
from evorag_core.methods.dynakrag.validity import exclusion
from tests.methods.test_dynakrag import DOC_PLAIN, bm25, corpus, demo, enumerated_states, make_ctx  # noqa: F401


class FixedLM:
    """Judges every evidence insufficient, compresses to one sentence, answers "Mirrow"."""

    def judge(self, question, passages):
        return False, 0.25, Usage(1, 10, 0)

    def missing_info(self, question, passages):
        return "birthplace", Usage(1, 10, 2)

    def compress(self, question, passages):
        return ("Ansel Travine was born in Mirrow.",), Usage(1, 20, 8)

    def answer(self, question, passages, snippets):
        return "Mirrow", Usage(1, 12, 1)


@pytest.mark.parametrize("cfg", [DynaKragConfig(), DynaKragConfig(sufficiency=False, compression=False),
                                 DynaKragConfig(retrieval_cap=2, max_steps=3)])
def test_exclusion_agrees_with_the_validity_layer_on_every_enumerated_state(cfg):
    """2592 states per config: a reason exactly when the operation is not in A(s), never the generic fallback."""
    for s in enumerated_states():
        valid = set(valid_actions(s, cfg))
        for action in ACTIONS:
            reason = exclusion(s, action, cfg)
            assert (reason is None) == (action in valid), (s, action)
            assert reason != "not executable in this state", (s, action)


def test_the_reasons_name_the_rule():
    """s_0 (no evidence, no gap): the evidence-needing operations say so; after the caps, the caps are named."""
    cfg = DynaKragConfig()
    s0 = initial_state("Where was Ansel Travine born?")
    assert exclusion(s0, "retrieve_more", cfg) is None
    assert exclusion(s0, "gap_query", cfg) == "no gap recorded (an insufficient sufficiency_check records one)"
    assert exclusion(s0, "rewrite_query", cfg) == "no evidence has been retrieved yet"
    assert exclusion(s0, "bridge_entity_expand", cfg) == "no bridge entity in the evidence"
    assert exclusion(s0, "sufficiency_check", cfg) == "no evidence has been retrieved yet"
    assert exclusion(s0, "stop_answer", cfg) == "no evidence yet while another operation is executable"
    assert exclusion(s0, "compress_answer_evidence", cfg) == "terminal: only after stop_answer"
    spent = EvidenceState("q", docs=(DOC_PLAIN,), retrieval_calls=3, history=("retrieve_more",) * 3, probed_at=1)
    assert exclusion(spent, "rewrite_query", cfg) == "the retrieval budget is spent (3/3 calls)"
    assert exclusion(spent, "sufficiency_check", cfg) == "no new evidence since the last sufficiency_check"
    capped = EvidenceState("q", docs=(DOC_PLAIN,), history=("retrieve_more",) * 4)
    assert exclusion(capped, "sufficiency_check", cfg) == "the control-step cap is reached (4/4 steps)"
    with pytest.raises(EnvStateError, match="unknown DynaKrag operation"):
        exclusion(s0, "teleport", cfg)


def test_control_step_and_finish_episode_replay_run_dynakrag(demo, corpus, bm25):
    """The uniform controller on demo-001 (seeded): the step functions give run_dynakrag's trace, state and answer."""
    ctx = make_ctx(corpus, bm25, lm=FixedLM())
    question = demo.questions[0].question
    episode = run_dynakrag(question, ctx, UniformController(13))
    state, steps, reason = initial_state(question), [], None
    while reason is None:
        state, trace, reason = control_step(state, ctx, UniformController(13), len(steps) + 1)
        steps.append(trace)
    state, trace, answer = finish_episode(state, ctx, len(steps) + 1)
    steps += [trace] if trace is not None else []
    assert [t.to_dict() for t in steps] == [t.to_dict() for t in episode.steps]
    assert (state, answer, reason) == (episode.state, episode.answer, episode.stop_reason)
    assert answer == "Mirrow" and state.terminated and state.lm_calls >= 1
