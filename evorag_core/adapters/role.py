"""An adapter's role: what its weights are applied to when it is live, evaluated or rolled out.

- `"policy"`: the policy's adapter. Every LM call of the agent runs with it: the SEARCH / ANSWER decision, the
  queries, and the answer read (unless `answer.adapter` names a reader of its own).
- `"reader"`: the reader's adapter. Only the answer read runs with it (`answer.adapter`); the policy decides on the
  base model.

A round trained on answer pairs (source `answer`: one reader state, the answer nearest the gold preferred) registers
a **reader** adapter; every other round a policy adapter (`role_for_source`). Why: the weights learn to read, and as
the policy's adapter they also move the search decisions they were never trained on. Measured on the same two
adapters of one loop round (docs/answers.md, items 18 and 19): as the policy's adapter they took more steps and
their F1 gain was not shown (p 0.12 / 0.13); in the reader's role, the policy on the base model, see item 19.

The store keeps the role beside the adapter (`adapters.role`, migration 0008). At most one adapter is live, in its
role: a live reader adapter means the base policy plus that reader. `applied` is the one place that turns an adapter
and its role into what a method runs (a config and the policy's adapter), for the gate's evaluation, the CLI's
`--adapter NAME`, and the studio's live policy.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from evorag_core.errors import ConfigError
from evorag_core.store.records import ADAPTER_ROLES as ROLES

if TYPE_CHECKING:
    from evorag_core.config import Config

__all__ = ["ROLES", "POLICY", "READER", "role_for_source", "check_role", "applied", "applied_spec"]

POLICY, READER = ROLES


def role_for_source(source: str | None) -> str:
    """The role of an adapter trained on pairs of `source` (None: every source): reader for answer pairs only."""
    return READER if source == "answer" else POLICY


def check_role(role: str) -> str:
    if role not in ROLES:
        raise ConfigError(f"adapter role {role!r}: expected one of {', '.join(ROLES)}")
    return role


def applied(cfg: Config, folder: str | Path | None, role: str = POLICY) -> tuple[Config, str | None]:
    """(the config, the policy's adapter folder or None) that run the adapter in `folder` in `role`: a policy
    adapter is the policy's (the config unchanged); a reader adapter becomes `answer.adapter` and the policy runs the
    base model. No folder: the base model, the config unchanged."""
    if folder is None:
        return cfg, None
    if check_role(role) == POLICY:
        return cfg, str(folder)
    return replace(cfg, answer=replace(cfg.answer, adapter=str(folder))), None


def applied_spec(cfg: Config, spec: str | Path | None, home: Path) -> tuple[Config, str | None]:
    """`applied` for a user's `--adapter` (a folder, or a name registered in the store): a registered reader adapter
    goes to the reader; a folder given by path, or a policy adapter, stays the policy's (returned as given)."""
    if not spec:
        return cfg, None
    from evorag_core.adapters.resolve import resolve_adapter

    source = resolve_adapter(str(spec), home)
    if source.role == READER:
        return applied(cfg, source.folder, READER)
    return cfg, str(spec)
