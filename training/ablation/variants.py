"""The ablations of the paper as sets of `Variant`s (evorag_core/pairs/rescore.py), each with its reference row:

- `schedules` (Table 4): time-dynamic (reference), two-stage fixed, no reward (answer correctness only);
- `presets` (Table 6): Full (reference), Best-2, Best-3, Exploration-heavy, Efficiency-heavy, all time-dynamic.

Every variant uses the configured Start/Mid/End table (`[weights]`), so an ablation can be run on a tuned table.
"""
from __future__ import annotations

from dataclasses import dataclass

from evorag_core.env.scheduler import PRESETS, SCHEDULES, WeightTable
from evorag_core.errors import ConfigError
from evorag_core.pairs.rescore import Variant

__all__ = ["ABLATIONS", "Ablation", "ablation"]

ABLATIONS: tuple[str, ...] = ("schedules", "presets")


@dataclass(frozen=True)
class Ablation:
    name: str
    variants: tuple[Variant, ...]
    reference: str  # the variant every other row is compared with

    def only(self, names: tuple[str, ...]) -> "Ablation":
        """The same ablation restricted to `names` (the reference is always kept, first)."""
        known = {v.name for v in self.variants}
        unknown = sorted(set(names) - known)
        if unknown:
            raise ConfigError(f"unknown variant(s) {', '.join(unknown)} of ablation {self.name!r} "
                              f"(known: {', '.join(v.name for v in self.variants)})")
        keep = {self.reference, *names}
        return Ablation(self.name, tuple(v for v in self.variants if v.name in keep), self.reference)


def ablation(name: str, table: WeightTable) -> Ablation:
    if name == "schedules":
        return Ablation(name, tuple(Variant(s, schedule=s, table=table) for s in SCHEDULES), "time-dynamic")
    if name == "presets":
        return Ablation(name, tuple(Variant(p, preset=p, table=table) for p in PRESETS), "full")
    raise ConfigError(f"unknown ablation {name!r}; expected one of {', '.join(ABLATIONS)}")
