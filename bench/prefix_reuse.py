"""How many prompt tokens a rollout worker runs again, and what other prefix-pool policies would run (a replay).

    python -m bench.prefix_reuse --data ../shared/benchmarks/hotpotqa_dev300.jsonl --limit 8 \
        --set policy.passage_chars=120 --out bench/results/prefix_reuse.json

1. Record: one in-process worker runs `evorag rollout` (refinement stage, T_max 5, one thread, a fresh SQLite
   database); every prompt the backend prefills (`TransformersBackend._prefill`) is recorded with the tokens it
   actually ran (cache misses) and its seconds.
2. Unbounded: the tokens those prefills would run if every earlier prompt's states were kept (each prompt's longest
   common prefix with any earlier prompt is free).
3. Replay: the recorded prompts through pools of S slots that crop a cache as `PrefixPool` does ("crop"), or that
   copy the shared prefix into another slot when a crop would drop at least C tokens ("copy C"): tokens run, tokens
   copied, and the most tokens the slots hold at once (times the model's key/value bytes per token). The replay
   leaves out tokens a decode appends to a cache and next-token memo hits, so compare its rows with its own
   "crop, 3 slots" row, not with the recorded count.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from evorag_core.lm.half_decode import cpu_model
from evorag_core.lm.kv_cache import PrefixCache, PrefixPool, common_prefix_length, growing_cache

POLICIES = [(slots, copy) for slots in (3, 6, 12) for copy in (None, 64)]  # (slots, copy threshold or None: crop)


@dataclass(frozen=True)
class Replay:
    slots: int
    copy_min: int | None  # None: crop as PrefixPool does
    tokens_run: int
    tokens_copied: int
    peak_tokens_held: int


class CopyingPool(PrefixPool):
    """`PrefixPool`, except that a prompt which would crop at least `copy_min` tokens off the cache it shares with
    gets a copy of the shared prefix in a slot of its own (freeing the least recently used other slot if needed)."""

    def __init__(self, num_layers: int, slots: int, copy_min: int) -> None:
        if slots < 2:
            raise ValueError("copying needs at least two slots")
        super().__init__(num_layers, slots)
        self.copy_min, self.copied = copy_min, 0

    def select(self, ids: list[int]) -> PrefixCache:
        lcp, best = max(((common_prefix_length(e.ids, ids), e) for e in self.entries), key=lambda p: p[0],
                        default=(0, None))
        if best is None or lcp == 0 or len(best.ids) - lcp < self.copy_min:
            return super().select(ids)
        if 2 * lcp < min(len(ids), len(best.ids)):  # PrefixPool would not reuse `best` either
            return super().select(ids)
        if len(self.entries) >= self.slots:
            self.discard(next(e for e in reversed(self.entries) if e is not best))
        copy = PrefixCache(growing_cache(self.num_layers), list(best.ids[:lcp]))
        self.copied += lcp
        self.entries.insert(0, copy)
        return copy


def unbounded_tokens(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens the prefills of `prompts` run when every earlier prompt's states are kept: a prompt seen whole before
    is free; otherwise its tokens after the longest prefix it shares with an earlier prompt, at least its last one
    (the backend runs it for the next-token log-probs)."""
    seen: list[np.ndarray] = []
    total = 0
    for ids in prompts:
        a = np.asarray(ids)
        best, whole = 0, False
        for b in seen:
            m = min(len(a), len(b))
            differ = np.flatnonzero(a[:m] != b[:m])
            shared = int(differ[0]) if differ.size else m
            best, whole = max(best, shared), whole or (shared == len(a) == len(b))
        total += 0 if whole else len(a) - min(best, len(a) - 1)
        seen.append(a)
    return total


def replay(prompts: Sequence[Sequence[int]], slots: int, copy_min: int | None) -> Replay:
    """The prompts' prefills through a pool (see the module docstring); a prompt held whole costs nothing."""
    pool = PrefixPool(1, slots) if copy_min is None else CopyingPool(1, slots, copy_min)
    run = peak = 0
    for ids in map(list, prompts):
        entry = pool.select(ids)
        lcp = common_prefix_length(entry.ids, ids)
        if lcp == len(ids) == len(entry.ids):
            continue
        start = min(lcp, len(ids) - 1)
        entry.crop_to(start)
        entry.ids.extend(ids[start:])
        run += len(ids) - start
        peak = max(peak, sum(len(e.ids) for e in pool.entries))
    return Replay(slots, copy_min, run, getattr(pool, "copied", 0), peak)


def record(cli_args: list[str]) -> tuple[list[list[int]], int, float, float]:
    """Run `evorag rollout cli_args` in this process; (prompts, tokens run, prefill seconds, total seconds)."""
    from evorag_core.cli.main import main as evorag
    from evorag_core.lm import hf_backend

    prompts: list[list[int]] = []
    totals = {"run": 0, "seconds": 0.0}
    original = hf_backend.TransformersBackend._prefill

    def prefill(self, prompt_ids):
        before, start = self.prompt_tokens, time.perf_counter()
        out = original(self, prompt_ids)
        totals["seconds"] += time.perf_counter() - start
        totals["run"] += self.prompt_tokens - before
        prompts.append(list(prompt_ids))
        return out

    hf_backend.TransformersBackend._prefill = prefill
    start = time.perf_counter()
    try:
        code = evorag(["rollout", *cli_args])
    finally:
        hf_backend.TransformersBackend._prefill = original
    if code:
        raise SystemExit(f"evorag rollout failed with exit code {code}")
    return prompts, totals["run"], totals["seconds"], time.perf_counter() - start


def kv_bytes_per_token(home: str | None) -> int:
    """fp32 keys and values of every layer for one token of the embedded policy model."""
    from evorag_core.config import PolicyConfig, home_dir
    from evorag_core.lm.loading import load_model

    model, _, _ = load_model(PolicyConfig().model, Path(home) if home else home_dir())
    cfg = model.config.get_text_config()
    head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head * 4


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--home", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        cli = ["--data", args.data, "--limit", str(args.limit), "--stage", "refinement", "--t-max", "5",
               "--workers", "1", "--threads", "1", "--db", f"sqlite:///{tmp}/rollouts.db"]
        cli += [*(["--home", args.home] if args.home else []), *(x for s in args.set for x in ("--set", s))]
        prompts, ran, prefill_s, total_s = record(cli)
    per_token = kv_bytes_per_token(args.home)
    replays = [replay(prompts, slots, copy) for slots, copy in POLICIES]
    base = next(r for r in replays if r.slots == 3 and r.copy_min is None)
    result = {
        "what": __doc__.split("\n\n")[0], "machine": cpu_model(),
        "rollout_args": cli[: cli.index("--db")] + cli[cli.index("--db") + 2:],
        "prefills": len(prompts), "prompt_tokens": sum(map(len, prompts)), "tokens_run": ran,
        "prefill_seconds": round(prefill_s, 1), "rollout_seconds": round(total_s, 1),
        "unbounded_tokens_run": unbounded_tokens(prompts), "kv_bytes_per_token": per_token,
        "replays": [{**asdict(r), "vs_crop_3": round(r.tokens_run / base.tokens_run - 1, 3),
                     "peak_mb": round(r.peak_tokens_held * per_token / 2 ** 20)} for r in replays],
    }
    result["unbounded_saving"] = round(1 - result["unbounded_tokens_run"] / ran, 3)
    print(json.dumps(result, indent=1))
    args.out.write_text(json.dumps(result, indent=1))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
