"""The hard validity layer: the executable action set A(s) built from the state alone (paper Table 5).

| operation                 | executable when                                                                 |
| ------------------------- | ------------------------------------------------------------------------------- |
| retrieve_more             | control left, retrieval budget left, and the frontier holds an unseen document   |
|                           | (before the first call the ranking is not fetched yet: the frontier is open)     |
| gap_query                 | control left, retrieval budget left, and a non-empty gap has been recorded       |
| rewrite_query             | control left, retrieval budget left, and evidence has been retrieved             |
| bridge_entity_expand      | control left, retrieval budget left, and at least one bridge candidate exists    |
| sufficiency_check         | enabled, control left, evidence exists, and no probe since the evidence changed  |
| stop_answer               | acquisition not terminated, and evidence exists or nothing else is executable    |
| compress_answer_evidence  | enabled, acquisition terminated, not compressed yet, and evidence exists         |

"Control left" = not terminated and fewer than `max_steps` control steps; "retrieval budget left" = fewer than
`retrieval_cap` retrieval calls. Once the step cap is reached only stop_answer remains (max-step finalization).
`check_valid` raises `EnvStateError` for anything else, so an invalid action can never execute.
"""
from __future__ import annotations

from typing import Callable

from evorag_core.config import DynaKragConfig
from evorag_core.errors import EnvStateError
from evorag_core.methods.dynakrag.state import ACQUISITION, ACTIONS, EvidenceState

__all__ = ["RULES", "valid_actions", "is_valid", "check_valid", "exclusion"]

Rule = Callable[[EvidenceState, DynaKragConfig], bool]


def _control_left(s: EvidenceState, cfg: DynaKragConfig) -> bool:
    return not s.terminated and s.steps < cfg.max_steps


def _retrieval_left(s: EvidenceState, cfg: DynaKragConfig) -> bool:
    return _control_left(s, cfg) and s.retrieval_calls < cfg.retrieval_cap


def retrieve_more_ok(s: EvidenceState, cfg: DynaKragConfig) -> bool:
    return _retrieval_left(s, cfg) and s.frontier_unseen() != 0


def gap_query_ok(s: EvidenceState, cfg: DynaKragConfig) -> bool:
    return _retrieval_left(s, cfg) and bool(s.missing.strip())


def rewrite_query_ok(s: EvidenceState, cfg: DynaKragConfig) -> bool:
    return _retrieval_left(s, cfg) and bool(s.docs)


def bridge_ok(s: EvidenceState, cfg: DynaKragConfig) -> bool:
    return _retrieval_left(s, cfg) and bool(s.bridge_candidates)


def sufficiency_ok(s: EvidenceState, cfg: DynaKragConfig) -> bool:
    return cfg.sufficiency and _control_left(s, cfg) and bool(s.docs) and s.probed_at != len(s.docs)


def stop_ok(s: EvidenceState, cfg: DynaKragConfig) -> bool:
    if s.terminated:
        return False
    return bool(s.docs) or not any(RULES[a](s, cfg) for a in ACQUISITION + ("sufficiency_check",))


def compress_ok(s: EvidenceState, cfg: DynaKragConfig) -> bool:
    return cfg.compression and s.terminated and s.snippets is None and bool(s.docs)


RULES: dict[str, Rule] = {
    "retrieve_more": retrieve_more_ok,
    "gap_query": gap_query_ok,
    "rewrite_query": rewrite_query_ok,
    "bridge_entity_expand": bridge_ok,
    "sufficiency_check": sufficiency_ok,
    "stop_answer": stop_ok,
    "compress_answer_evidence": compress_ok,
}


def valid_actions(state: EvidenceState, cfg: DynaKragConfig) -> tuple[str, ...]:
    """A(s), in the fixed order of `ACTIONS`."""
    return tuple(a for a in ACTIONS if RULES[a](state, cfg))


def is_valid(state: EvidenceState, action: str, cfg: DynaKragConfig) -> bool:
    if action not in RULES:
        raise EnvStateError(f"unknown DynaKrag operation {action!r}; expected one of {', '.join(ACTIONS)}")
    return RULES[action](state, cfg)


def _control_reason(s: EvidenceState, cfg: DynaKragConfig) -> str | None:
    if s.terminated:
        return "acquisition has ended (stop_answer was executed)"
    if s.steps >= cfg.max_steps:
        return f"the control-step cap is reached ({s.steps}/{cfg.max_steps} steps)"
    return None


def _retrieval_reason(s: EvidenceState, cfg: DynaKragConfig) -> str | None:
    if (reason := _control_reason(s, cfg)) is not None:
        return reason
    if s.retrieval_calls >= cfg.retrieval_cap:
        return f"the retrieval budget is spent ({s.retrieval_calls}/{cfg.retrieval_cap} calls)"
    return None


def _first(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r is not None), None)


def _why(s: EvidenceState, action: str, cfg: DynaKragConfig) -> str | None:
    """The first condition of `action`'s rule (module table) that `s` fails, in words; None when none fails."""
    no_docs = None if s.docs else "no evidence has been retrieved yet"
    if action == "retrieve_more":
        return _first(_retrieval_reason(s, cfg), None if s.frontier_unseen() != 0
                      else "the frontier (initial ranking) holds no unseen document")
    if action == "gap_query":
        return _first(_retrieval_reason(s, cfg), None if s.missing.strip() else
                      "no gap recorded (an insufficient sufficiency_check records one)")
    if action == "rewrite_query":
        return _first(_retrieval_reason(s, cfg), no_docs)
    if action == "bridge_entity_expand":
        return _first(_retrieval_reason(s, cfg), None if s.bridge_candidates else
                      "no bridge entity in the evidence")
    if action == "sufficiency_check":
        return _first(None if cfg.sufficiency else "sufficiency checks are off (dynakrag.sufficiency = false)",
                      _control_reason(s, cfg), no_docs,
                      None if s.probed_at != len(s.docs) else "no new evidence since the last sufficiency_check")
    if action == "stop_answer":
        if s.terminated:
            return "acquisition has ended (stop_answer was executed)"
        return None if stop_ok(s, cfg) else "no evidence yet while another operation is executable"
    return _first(None if cfg.compression else "compression is off (dynakrag.compression = false)",
                  None if s.terminated else "terminal: only after stop_answer",
                  None if s.snippets is None else "the evidence is compressed already", no_docs)


def exclusion(state: EvidenceState, action: str, cfg: DynaKragConfig) -> str | None:
    """Why `action` is not in A(state), naming the rule it fails (for the studio's greyed operations); None when it
    is executable. Agrees with `RULES` on every state."""
    if action not in RULES:
        raise EnvStateError(f"unknown DynaKrag operation {action!r}; expected one of {', '.join(ACTIONS)}")
    if RULES[action](state, cfg):
        return None
    return _why(state, action, cfg) or "not executable in this state"


def check_valid(state: EvidenceState, action: str, cfg: DynaKragConfig) -> None:
    """Raise `EnvStateError` unless `action` is in A(state)."""
    if not is_valid(state, action, cfg):
        raise EnvStateError(
            f"operation {action!r} is not executable in this state (valid: {', '.join(valid_actions(state, cfg)) or 'none'})"
        )
