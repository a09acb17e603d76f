"""A DPO round: claimed preference pairs -> TRL DPO on LoRA (`trainer.train_dpo`) -> registered adapter.

The round claims up to `job.pairs` of the oldest queued pairs (optionally of one source/stage) for itself; the
worker's `finish_round` then consumes them on success or releases them on failure, and an expired lease releases
them too. The reference (and starting point) is the previous round's adapter, or the base model for the first
round (`job.reference`). With `job.max_steps` the round claims only as many pairs as that many steps use
(`claim_size`: TRL's trainer runs whole epochs). With `job.holdout` > 0 that share of the claimed pairs' states is
held out of training and scored afterwards (pair accuracy = share with implicit reward margin > 0). Pairs that cannot be trained on (empty
or identical completions) are counted in `skipped_pairs`; they are consumed with the others. Prompts too long for
train.max_length are cut by `seqlogp.fit_text` first (the system prompt and the current turn survive, the
demonstration in between is cut), so TRL's own fitting leaves them as they are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evorag_core.errors import DatasetFormatError, TrainingError

from training.objectives.dpo.data import PairExample, split_pairs
from training.job import AdapterRef, ProgressFn, RoundJob
from training.lora_round import Base, LoraSetup, Trained, run_lora_round
from training.seqlogp import fit_text

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from evorag_core.store import Store

__all__ = ["run", "pair_examples", "claim_size"]

_DPO_LOGGED = ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
               "logps/chosen", "logps/rejected")


def pair_examples(pairs: list[Any], tokenizer: PreTrainedTokenizerBase | None = None,
                  max_length: int = 0) -> tuple[list[PairExample], list[int]]:
    """(trainable examples, ids of pairs that are not trainable). With a tokenizer, prompts too long for
    `max_length` lose their middle by `seqlogp.fit_text` (the current turn survives; see seqlogp)."""
    good: list[PairExample] = []
    bad: list[int] = []
    for p in pairs:
        try:
            prompt = p.prompt
            if tokenizer is not None:
                longest = max(len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in (p.chosen, p.rejected))
                prompt = fit_text(tokenizer, prompt, max_length - longest - 3)
            good.append(PairExample(prompt, p.chosen, p.rejected))
        except (DatasetFormatError, ValueError):
            bad.append(p.id)
    return good, bad


def claim_size(job: RoundJob) -> int:
    """`job.pairs`, or fewer with `job.max_steps`: just enough training pairs for max_steps optimiser steps over
    train.epochs epochs (plus the held-out share), so the round claims no pair it would not train on."""
    if not job.max_steps:
        return job.pairs
    per_step = job.train.batch_size * job.train.grad_accum
    needed = math.ceil(job.max_steps * per_step / job.train.epochs / (1.0 - job.holdout))
    return max(1, min(job.pairs, needed))


def _forward_progress(on_progress: ProgressFn | None) -> ProgressFn | None:
    if on_progress is None:
        return None

    def forward(entry: dict[str, Any]) -> None:
        if "phase" in entry and "step" not in entry:
            on_progress(entry)
        elif "loss" in entry:
            on_progress({"step": entry.get("step"), "total": entry.get("max_steps"), "loss": entry["loss"],
                         "elapsed_s": entry.get("elapsed_s"), "margin": entry.get("rewards/margins"),
                         "accuracy": entry.get("rewards/accuracies")})

    return forward


def run(job: RoundJob, store: Store, on_progress: ProgressFn | None = None) -> AdapterRef:
    """setup -> train -> save -> register (see the module docstring; the steps: training.lora_round)."""
    from training.objectives.dpo.trainer import log_phase

    ref = run_lora_round(job, store, on_progress, claim=lambda: _claim(job, store),
                         prepare=lambda claimed, base: _prepare(job, claimed, base), train=_train)
    log_phase("done")
    return ref


def _claim(job: RoundJob, store: Store) -> list[Any]:
    """The main process claims the pairs (broadcast to the others: every process trains on them)."""
    from training.objectives.dpo.trainer import log_phase

    claimed = job.processes.on_main(store.claim_pairs, job.round_id, claim_size(job), source=job.source,
                                    stage=job.stage, after=job.pairs_after)
    if not claimed:
        raise TrainingError(f"no queued pairs (filters source={job.source}, stage={job.stage}, "
                            f"after pair {job.pairs_after}); "
                            "add pairs by rollouts or annotation first")
    log_phase("load")
    return claimed


@dataclass(frozen=True)
class _Pairs:
    claimed: list[Any]
    train: list[PairExample]
    heldout: list[PairExample]
    skipped: list[int]


def _prepare(job: RoundJob, claimed: list[Any], base: Base) -> _Pairs:
    examples, skipped = pair_examples(claimed, base.tokenizer, job.train.max_length)
    if not examples:
        raise TrainingError(f"none of the {len(claimed)} claimed pairs is trainable (empty or identical sides)")
    train, heldout = split_pairs(examples, job.holdout, job.train.seed) if job.holdout > 0 else (examples, [])
    return _Pairs(claimed, train, heldout, skipped)


def _train(setup: LoraSetup[_Pairs]) -> Trained:
    from training.objectives.dpo.trainer import train_dpo

    job, pairs, reference = setup.job, setup.data, setup.reference
    setup_s = setup.elapsed()
    pair_ids = [p.id for p in pairs.claimed]
    result = train_dpo(
        pairs.train, setup.base.model, setup.base.tokenizer, job.train, setup.out_dir,
        reference.path if reference is not None else None, _forward_progress(setup.on_progress),
        heldout=pairs.heldout, base_model_id=setup.base.model_id,
        meta={"round_id": job.round_id, "objective": "dpo", "pair_ids": pair_ids}, processes=job.processes,
    )
    steps = [h for h in result.history if "loss" in h]
    metrics: dict[str, Any] = {
        "objective": "dpo", "beta": job.train.beta, "steps": result.steps, "pairs": len(pairs.claimed),
        "pair_ids": pair_ids, "skipped_pairs": len(pairs.skipped), "n_train": result.n_train,
        "n_heldout": result.n_heldout, "truncated_prompts": result.truncated, "dropped_pairs": result.dropped,
        "first_loss": result.metrics.get("first_loss"), "final_loss": result.metrics.get("loss"),
        "train_loss": result.metrics.get("train_loss"),
        **{f"final_{k.replace('/', '_')}": result.metrics[k] for k in _DPO_LOGGED[1:] if k in result.metrics},
        "heldout_accuracy": result.heldout_accuracy, "heldout_margin": result.heldout_margin,
        "loss_history": [[h["step"], h["loss"]] for h in steps],
        "margin_history": [[h["step"], h.get("rewards/margins")] for h in steps],
        "accuracy_history": [[h["step"], h.get("rewards/accuracies")] for h in steps],
        "step_history": [{k: v for k, v in (("step", h["step"]), ("loss", h["loss"]), ("margin", h.get("rewards/margins")),
                                            ("accuracy", h.get("rewards/accuracies"))) if v is not None} for h in steps],
        "seconds_per_step": result.seconds_per_step, **setup.round_metrics(setup_s, result.wall_seconds),
    }
    return Trained(result.checksum, {k: v for k, v in metrics.items() if v is not None})
