"""ARENA's GRPO (seed 004, §3.2–3.3): G sampled replies per question, scored by the ARENA rewards, LoRA update
with a KL penalty to the reference policy — k2 by default, k3 as the ablation — and both KL estimates logged.

One optimiser step takes `questions_per_step` questions (in a seeded order, `epochs` passes). For each question:
1. sample G replies at `temperature` from the current policy (`ArenaGenerator.sample`, one batched decode);
2. reward each (`arena_reward`: format + accuracy + relevance + bonus) and normalise within the group,
   A_i = (r_i − mean) / (std + ε) (`training.objectives.grpo.loss.group_advantages`; population std; the paper's "max" in its
   advantage formula is read as the mean of standard GRPO);
3. per completion token: log π_θ (with gradients), log π_ref (no gradients; the base model, or the adapter the
   round started from) and log π_old = log π_θ detached (one update per batch, the paper's μ = 1), then
   `grpo_loss` with the selected estimator (train.kl, default k2 for this objective). Each step also records the
   mean per-token KL under BOTH estimators (`kl_k2`, `kl_k3`) so the stability claim can be plotted.
Token ids are the sampled ones (no re-tokenisation), plus the end-of-turn token when the reply ended on it.
Prompts are not cut: size them with `passage_chars`. Groups whose rewards are all equal carry no policy gradient
but still contribute their KL term. The replies of a group go through forward/backward `micro_batch` at a time
(gradients accumulate; every reply weighs the same), which bounds activation memory on long prompts.

`run(job, store, on_progress)` is the worker's round (objective `arena-grpo`): setup -> train -> save -> register.
Job keys (`RoundJob`): `data` (a data file whose questions carry their passages; required), `max_steps`, `kl`,
`lr`, `seed`, `epochs`, `train: {...}`, and `arena: {ArenaGrpoConfig fields}`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch

from evorag_core.config import TrainConfig
from evorag_core.errors import TrainingError
from evorag_core.reader.arena.generator import ArenaGenerator, ArenaOutput
from evorag_core.methods.arena.rewards import ArenaReward, arena_reward, gold_reference_ids
from evorag_core.types import Question

from training.objectives.grpo.completions import (encode_group, epoch_order, micro_step, rows, sampling_setup,
                                                 train_completion_round)
from training.job import AdapterRef, ProgressFn, RoundJob
from training.loop import StepLog, accumulate, optimizer_step, train_mode
from training.lora_round import LoraSetup, Trained, run_lora_round
from training.objectives.arena_grpo.config import ArenaGrpoConfig, arena_config_from_job
from training.objectives.grpo.loss import group_advantages
from training.processes import SINGLE, Processes

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedTokenizerBase

    from evorag_core.store import Store

__all__ = ["ArenaGroup", "sample_group", "train_arena_grpo", "run"]

REF_ADAPTER = "arena-ref"  # the frozen copy of the starting adapter, when the round starts from one


@dataclass(frozen=True)
class ArenaGroup:
    question: Question
    outputs: tuple[ArenaOutput, ...]
    rewards: tuple[ArenaReward, ...]
    advantages: tuple[float, ...]


def sample_group(generator: ArenaGenerator, question: Question, group_size: int, seed: int) -> ArenaGroup:
    """G replies to `question` over its own passages, their rewards and group-normalised advantages."""
    if not question.passages:
        raise TrainingError(f"question {question.id} has no passages; ARENA answers from the question's own passages")
    cfg = generator.cfg
    outputs = generator.sample(question.question, question.passages, group_size, cfg.temperature, seed=seed)
    gold_ids = gold_reference_ids([p.pid for p in question.passages], question.gold_pids)
    rewards = tuple(arena_reward(o.parsed, question.answers, gold_ids, accuracy=cfg.accuracy, bonus=cfg.bonus)
                    for o in outputs)
    advantages = group_advantages(torch.tensor([r.total for r in rewards], dtype=torch.float32))
    return ArenaGroup(question, tuple(outputs), rewards, tuple(advantages.tolist()))


def train_arena_grpo(
    policy: PeftModel, tokenizer: PreTrainedTokenizerBase, questions: Sequence[Question], train: TrainConfig,
    cfg: ArenaGrpoConfig, on_progress: ProgressFn | None = None, *, max_steps: int = 0, ref_adapter: str | None = None,
    model_id: str = "policy", processes: Processes = SINGLE,
) -> tuple[StepLog, list[dict[str, Any]]]:
    """Optimise `policy` (a PeftModel whose trainable adapter is "default", modified in place) on `questions`.
    Under several processes each samples and trains on its share of a step's groups (the seeds depend on the step
    and the group, not on the process), the gradients are summed once per step and the logged terms summed.

    The reference is the base model (adapters disabled) or the frozen adapter `ref_adapter`. Returns the per-step
    log (loss, policy_loss, kl (the optimised estimator), kl_k2, kl_k3, reward and its four parts, ...) and a
    sample of the replies (first reply of each group, per step) for inspection."""
    if not questions:
        raise TrainingError("ARENA GRPO needs at least one question")
    backend, params, optimizer = sampling_setup(policy, tokenizer, train.lr, model_id)
    generator = ArenaGenerator(backend, cfg.arena())
    order = epoch_order(len(questions), train.epochs, train.seed)
    steps = [order[i : i + cfg.questions_per_step] for i in range(0, len(order), cfg.questions_per_step)]
    steps = steps[:max_steps] if max_steps else steps
    log = StepLog(len(steps), on_progress)
    samples: list[dict[str, Any]] = []
    for step, index in enumerate(steps):
        policy.eval()
        backend.reset_cache()  # the weights changed: the cached prompt keys/values are stale
        mine = processes.shard(list(enumerate(index)))  # (k, question): this process's groups of the step
        groups = [sample_group(generator, questions[j], cfg.group_size, train.seed + 1000 * step + k)
                  for k, j in mine]
        train_mode(policy, train)
        acc = dict.fromkeys(_STEP_KEYS, 0.0)
        for group in groups:
            full = encode_group(tokenizer, group)
            for start in range(0, cfg.group_size, cfg.micro_batch):
                batch = rows(full, start, start + cfg.micro_batch)
                share = len(batch.lengths) / cfg.group_size / len(index)  # every reply of the step weighs the same
                stats = micro_step(policy, batch, group.advantages[start : start + cfg.micro_batch], train,
                                    ref_adapter, share)
                accumulate(acc, stats, share)
            accumulate(acc, _reward_stats(group), 1 / len(index))
        acc["tokens"] = float(sum(o.tokens for g in groups for o in g.outputs))
        grad_norm = optimizer_step(optimizer, params, processes)
        log.add(**processes.sum_values(acc), grad_norm=grad_norm)
        shown = processes.gather([(k, {"step": step + 1, "question_id": g.question.id, "text": g.outputs[0].text,
                                       "reward": g.rewards[0].to_dict()}) for (k, _), g in zip(mine, groups)])
        samples += [sample for _, sample in sorted(shown, key=lambda row: row[0])]
    policy.eval()
    return log, samples


_STEP_KEYS = ("loss", "policy_loss", "kl", "kl_k2", "kl_k3", "clip_frac", "ratio_mean", "reward", "reward_std",
              "flat_group", "format", "accuracy", "relevance", "bonus", "tokens")


def _reward_stats(group: ArenaGroup) -> dict[str, float]:
    totals = [r.total for r in group.rewards]
    mean = sum(totals) / len(totals)
    out = {"reward": mean, "reward_std": math.sqrt(sum((t - mean) ** 2 for t in totals) / len(totals)),
           "flat_group": float(all(t == totals[0] for t in totals))}
    for part in ("format", "accuracy", "relevance", "bonus"):
        out[part] = sum(getattr(r, part) for r in group.rewards) / len(group.rewards)
    return out


# -- the worker's round ----------------------------------------------------------------------------------------

def _load_questions(job: RoundJob, cfg: ArenaGrpoConfig) -> list[Question]:
    from evorag_core.data.datasets import load_dataset

    if not job.data:
        raise TrainingError(f"round {job.round_id}: arena-grpo needs `data`, a data file whose questions have passages")
    dataset = load_dataset(Path(job.data))
    chosen = [q for q in dataset.questions[cfg.offset :] if q.passages][: cfg.questions]
    if not chosen:
        raise TrainingError(f"round {job.round_id}: no question with passages in {job.data} after offset {cfg.offset}")
    return chosen


@dataclass(frozen=True)
class _Questions:
    cfg: ArenaGrpoConfig
    train: TrainConfig
    questions: list[Question]


def _claim(job: RoundJob) -> _Questions:
    """The settings and the questions, read before the model loads."""
    cfg, train = arena_config_from_job(job)
    return _Questions(cfg, train, _load_questions(job, cfg))


def _train(setup: LoraSetup[_Questions]) -> Trained:
    job, cfg, train, questions = setup.job, setup.data.cfg, setup.data.train, setup.data.questions
    keys = ("loss", "policy_loss", "kl", "kl_k2", "kl_k3", "reward", "format", "accuracy", "relevance", "bonus")

    def fit(policy: PeftModel, ref_adapter: str | None) -> tuple[StepLog, list[dict[str, Any]]]:
        return train_arena_grpo(policy, setup.base.tokenizer, questions, train, cfg, setup.on_progress,
                                max_steps=job.max_steps, ref_adapter=ref_adapter, model_id=setup.base.model_id,
                                processes=job.processes)

    def extra(log: StepLog) -> dict[str, Any]:
        return {**log.summary(keys),  # includes kl_history: {step, kl, kl_k2, kl_k3} per step
                "reward_history": [[h["step"], h["reward"], h["format"], h["accuracy"], h["relevance"]]
                                   for h in log.history],
                "arena": dataclasses.asdict(cfg)}

    return train_completion_round(setup, objective="arena-grpo", ref_name=REF_ADAPTER, train=train,
                                  questions=questions, fit=fit, extra=extra)


def run(job: RoundJob, store: Store, on_progress: ProgressFn | None = None) -> AdapterRef:
    """setup -> train -> save -> register (the module docstring; the steps: training.lora_round)."""
    return run_lora_round(job, store, on_progress, claim=lambda: _claim(job), train=_train)
