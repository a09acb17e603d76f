"""R²AG's step-level GRPO with the progressive "self-evolving" loop (seed 002 Eq. 6, Algorithm 1, Appendix B).

A training state is a pruned tree: the question and the gold passages its kept branches found so far (d̃; the
root state has none). For every state of the current forest:
1. sample G expansions of the state from the current policy (`LMSteering.sample`, one batched decode) at
   `temperature`; retrieve every query of the whole group in one batch (top-k, k = 1);
2. reward each expansion (`methods.r2ag.rewards.expansion_reward`, prior = the state's passages) and normalise within
   the group, A_i = (R_i − mean) / (std + ε) (`training.objectives.grpo.loss.group_advantages`, population std);
3. each expansion also yields its pruned tree: the state's passages plus the new gold it found. Unless that tree is
   complete (all gold and the stop signal: Joint-Hit), it joins the next forest (states de-duplicated per question by
   their passage set, at most `max_states` kept, in sampling order);
4. per token: the clipped objective with asymmetric clipping ε_low = train.clip_eps, ε_high = r2ag.clip_high
   (0.2 / 0.28, DAPO's clip-higher) plus train.kl_coef · KL to the reference (`training.objectives.grpo.loss.grpo_loss`, the
   estimator of train.kl). Groups with std(R) = 0 are left out of the update (Eq. 6: s.t. std > 0; DAPO's dynamic
   sampling); a step whose groups are all flat makes no optimiser step (logged with updated = 0).
One optimiser step takes `states_per_step` states; the forest is rebuilt after every pass (`iterations` passes, the
paper's L_max-I = 5). π_old = π_θ detached (one update per batch, as ARENA's round). The encoding, reference
log-probs, micro-batched backward pass and the round's train step are shared with ARENA
(`training.objectives.grpo.completions`).

`run(job, store, on_progress)` is the worker's round (objective `r2ag-grpo`): setup -> train -> save -> register.
Job keys: `data` (questions with gold passages; their pooled passages are the corpus; required), `max_steps`, `kl`,
`lr`, `seed`, `train: {...}`, and `r2ag: {R2agGrpoConfig fields}`. Retrieval uses the default [retrieval] settings.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import torch

from evorag_core.config import TrainConfig
from evorag_core.errors import TrainingError
from evorag_core.methods.r2ag.rewards import R2agReward, RewardWeights, expansion_reward
from evorag_core.methods.r2ag.steering import LMSteering, Proposal, SteerRequest
from evorag_core.methods.r2ag.tree import retrieve_queries
from evorag_core.types import Passage, Question

from training.objectives.grpo.completions import (encode_group, epoch_order, micro_step, rows, sampling_setup,
                                                 train_completion_round)
from training.job import AdapterRef, ProgressFn, RoundJob
from training.loop import StepLog, accumulate, optimizer_step, train_mode
from training.lora_round import LoraSetup, Trained, run_lora_round
from training.objectives.grpo.loss import group_advantages
from training.objectives.r2ag_grpo.config import R2agGrpoConfig, r2ag_config_from_job
from training.processes import SINGLE, Processes

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedTokenizerBase

    from evorag_core.retrieval.base import Retriever
    from evorag_core.store import Store

__all__ = ["TreeState", "R2agGroup", "sample_group", "train_r2ag_grpo", "run"]

REF_ADAPTER = "r2ag-ref"


@dataclass(frozen=True)
class TreeState:
    question: Question
    gold: frozenset[str]
    context: tuple[str, ...]  # the pruned tree's passages (gold found so far), in order of retrieval
    iteration: int = 0

    @property
    def key(self) -> tuple[str, frozenset[str]]:
        return self.question.id, frozenset(self.context)


@dataclass(frozen=True)
class R2agGroup:
    state: TreeState
    outputs: tuple[Proposal, ...]  # `outputs`: the name ARENA's encoder reads (prompt, token_ids, finish_reason)
    rewards: tuple[R2agReward, ...]
    advantages: tuple[float, ...]
    children: tuple[TreeState, ...]  # the pruned trees that continue (not complete)

    @property
    def flat(self) -> bool:
        return all(r.total == self.rewards[0].total for r in self.rewards)


def sample_group(steering: LMSteering, retriever: Retriever, passages: Mapping[str, Passage], state: TreeState,
                 cfg: R2agGrpoConfig, seed: int, weights: RewardWeights = RewardWeights()) -> R2agGroup:
    """G expansions of `state`, their rewards, advantages and the pruned trees they lead to."""
    request = SteerRequest(state.question.question, tuple(passages[p] for p in state.context if p in passages))
    outputs = steering.sample(request, cfg.group_size, cfg.temperature, seed=seed)
    flat = [q for o in outputs for _, q in o.expansion.queries]
    found = iter(retrieve_queries(retriever, flat, cfg.top_k))
    prior = frozenset(state.context)
    rewards, children = [], []
    for out in outputs:
        got = {"base": [], "predicted": []}
        for kind, _ in out.expansion.queries:
            got[kind].append(next(found))
        e = out.expansion
        reward = expansion_reward(got["base"], got["predicted"], prior, state.gold, stop=e.stop,
                                  has_think=e.has_think, well_formed=e.well_formed, truncated=out.truncated,
                                  weights=weights)
        rewards.append(reward)
        new_gold = tuple(dict.fromkeys(p for pids in [*got["base"], *got["predicted"]] for p in pids
                                       if p in state.gold and p not in prior))
        context = state.context + new_gold
        if not (set(context) >= state.gold and e.stop):
            children.append(TreeState(state.question, state.gold, context, state.iteration + 1))
    advantages = group_advantages(torch.tensor([r.total for r in rewards], dtype=torch.float32))
    return R2agGroup(state, tuple(outputs), tuple(rewards), tuple(advantages.tolist()), tuple(children))


def train_r2ag_grpo(
    policy: PeftModel, tokenizer: PreTrainedTokenizerBase, questions: Sequence[Question],
    gold_for: Callable[[Question], Iterable[str]], retriever: Retriever, passages: Mapping[str, Passage],
    train: TrainConfig, cfg: R2agGrpoConfig, on_progress: ProgressFn | None = None, *, max_steps: int = 0,
    ref_adapter: str | None = None, model_id: str = "policy", processes: Processes = SINGLE,
) -> tuple[StepLog, list[dict[str, Any]]]:
    """Optimise `policy` (a PeftModel whose trainable adapter is "default", modified in place); `gold_for(question)`
    gives a question's gold pids in the corpus of `retriever` / `passages`. Returns the per-step log (loss, kl,
    reward, its parts, forest size, ...) and a sample of replies (the first of each group) for inspection. Under
    several processes each samples and trains on its share of a step's states; the groups are gathered (every
    process builds the same next forest), the gradients summed once per step."""
    forest = [TreeState(q, frozenset(gold_for(q)), ()) for q in questions]
    forest = [s for s in forest if s.gold]
    if not forest:
        raise TrainingError("R2AG GRPO needs at least one question with gold passages")
    backend, params, optimizer = sampling_setup(policy, tokenizer, train.lr, model_id)
    steering = LMSteering(backend, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                          passage_chars=cfg.passage_chars, demo=cfg.demo, max_queries=cfg.max_queries)
    train = dataclasses.replace(train, clip_eps_high=cfg.clip_high)
    expected = sum(math.ceil(min(len(forest), cfg.max_states) / cfg.states_per_step) for _ in range(cfg.iterations))
    log = StepLog(min(max_steps, expected) if max_steps else expected, on_progress)
    samples: list[dict[str, Any]] = []
    for iteration in range(cfg.iterations):
        order = epoch_order(len(forest), 1, train.seed + iteration)
        chunks = [order[i : i + cfg.states_per_step] for i in range(0, len(order), cfg.states_per_step)]
        following: dict[tuple, TreeState] = {}
        for chunk in chunks:
            if max_steps and len(log.history) >= max_steps:
                return _done(policy, log, samples)
            policy.eval()
            backend.reset_cache()  # the weights changed: cached prompt keys/values are stale
            step = len(log.history)
            mine = processes.shard(list(enumerate(chunk)))  # (k, state): this process's groups of the step
            sampled = [(k, sample_group(steering, retriever, passages, forest[j], cfg, train.seed + 1000 * step + k))
                       for k, j in mine]
            groups = [g for _, g in sorted(processes.gather(sampled), key=lambda row: row[0])]  # every group, in order
            for g in groups:
                for child in g.children:
                    following.setdefault(child.key, child)
            acc = _update(policy, tokenizer, [g for g in groups if not g.flat], [g for _, g in sampled if not g.flat],
                          train, cfg, ref_adapter, params, optimizer, processes)
            log.add(**acc, **_reward_stats(groups), iteration=float(iteration + 1), forest=float(len(forest)))
            samples += [{"step": step + 1, "iteration": iteration + 1, "question_id": g.state.question.id,
                         "context": list(g.state.context), "text": g.outputs[0].text,
                         "reward": g.rewards[0].to_dict()} for g in groups]
        forest = list(following.values())[: cfg.max_states]
        if not forest:
            break
    return _done(policy, log, samples)


def _done(policy: PeftModel, log: StepLog, samples: list) -> tuple[StepLog, list]:
    policy.eval()
    return log, samples


_UPDATE_KEYS = ("loss", "policy_loss", "kl", "kl_k2", "kl_k3", "clip_frac", "ratio_mean")


def _update(policy: PeftModel, tokenizer: PreTrainedTokenizerBase, groups: Sequence[R2agGroup],
            mine: Sequence[R2agGroup], train: TrainConfig, cfg: R2agGrpoConfig, ref_adapter: str | None, params: list,
            optimizer: torch.optim.Optimizer, processes: Processes = SINGLE) -> dict[str, float]:
    """One optimiser step over the groups with reward spread (every reply weighs the same); zeros without any.
    `groups`: all of the step's groups with spread (every process's), `mine`: those this process sampled and trains
    on (all of them on one process); the gradients and logged terms are summed over the processes."""
    if not groups:
        return {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "updated": 0.0, "grad_norm": 0.0}
    train_mode(policy, train)
    acc = dict.fromkeys(_UPDATE_KEYS, 0.0)
    total = sum(len(g.outputs) for g in groups)
    for group in mine:
        full = encode_group(tokenizer, group)
        for start in range(0, len(group.outputs), cfg.micro_batch):
            batch = rows(full, start, start + cfg.micro_batch)
            share = len(batch.lengths) / total
            stats = micro_step(policy, batch, group.advantages[start : start + cfg.micro_batch], train, ref_adapter,
                                share)
            accumulate(acc, stats, share)
    grad_norm = optimizer_step(optimizer, params, processes)
    policy.eval()
    return {**processes.sum_values(acc), "updated": float(len(groups)), "grad_norm": grad_norm}


def _reward_stats(groups: Sequence[R2agGroup]) -> dict[str, float]:
    rewards = [r for g in groups for r in g.rewards]
    n = len(rewards)
    return {"reward": sum(r.total for r in rewards) / n, "multi_hit": sum(r.multi_hit for r in rewards) / n,
            "joint_hit": sum(r.joint_hit for r in rewards) / n,
            "average_precision": sum(r.average_precision for r in rewards) / n,
            "format": sum(r.format for r in rewards) / n, "zeroed": sum(bool(r.zeroed) for r in rewards) / n,
            "flat_groups": float(sum(g.flat for g in groups)),
            "tokens": float(sum(o.tokens for g in groups for o in g.outputs))}


# -- the worker's round ----------------------------------------------------------------------------------------

def _load(job: RoundJob, cfg: R2agGrpoConfig):
    from evorag_core.config import RetrievalConfig
    from evorag_core.data.corpus import build_corpus
    from evorag_core.data.datasets import load_dataset
    from evorag_core.retrieval import RetrievalService

    if not job.data:
        raise TrainingError(f"round {job.round_id}: r2ag-grpo needs `data`, a data file whose questions have gold passages")
    dataset = load_dataset(Path(job.data))
    corpus = build_corpus(dataset, "pooled")
    chosen = [q for q in dataset.questions[cfg.offset :] if corpus.gold_for(q)][: cfg.questions]
    if not chosen:
        raise TrainingError(f"round {job.round_id}: no question with gold passages in {job.data} after offset {cfg.offset}")
    retriever = RetrievalService(RetrievalConfig(), job.home).retriever_for(corpus, cfg.retriever)
    return chosen, corpus, retriever


@dataclass(frozen=True)
class _Questions:
    cfg: R2agGrpoConfig
    questions: list[Question]
    corpus: Any
    retriever: Retriever


def _claim(job: RoundJob) -> _Questions:
    """The settings, the questions and their retriever, built before the model loads."""
    cfg = r2ag_config_from_job(job)
    built: list = []  # the main process builds (and persists) the retrieval index first; the others then load it
    job.processes.on_main(lambda: built.append(_load(job, cfg)))
    questions, corpus, retriever = built[0] if built else _load(job, cfg)
    return _Questions(cfg, questions, corpus, retriever)


def _train(setup: LoraSetup[_Questions]) -> Trained:
    job, cfg, questions, corpus = setup.job, setup.data.cfg, setup.data.questions, setup.data.corpus
    train = job.train
    keys = ("loss", "policy_loss", "kl", "reward", "multi_hit", "joint_hit", "average_precision", "format",
            "forest")

    def fit(policy: PeftModel, ref_adapter: str | None) -> tuple[StepLog, list[dict[str, Any]]]:
        return train_r2ag_grpo(policy, setup.base.tokenizer, questions, corpus.gold_for, setup.data.retriever,
                               {p.pid: p for p in corpus.passages}, train, cfg, setup.on_progress,
                               max_steps=job.max_steps, ref_adapter=ref_adapter, model_id=setup.base.model_id,
                               processes=job.processes)

    def extra(log: StepLog) -> dict[str, Any]:
        return {"clip_low": train.clip_eps, "clip_high": cfg.clip_high, **log.summary(keys),
                "reward_history": [[h["step"], h["iteration"], h["reward"], h["forest"]] for h in log.history],
                "r2ag": dataclasses.asdict(cfg)}

    return train_completion_round(setup, objective="r2ag-grpo", ref_name=REF_ADAPTER, train=train,
                                  questions=questions, fit=fit, extra=extra)


def run(job: RoundJob, store: Store, on_progress: ProgressFn | None = None) -> AdapterRef:
    """setup -> train -> save -> register (the module docstring; the steps: training.lora_round)."""
    return run_lora_round(job, store, on_progress, claim=lambda: _claim(job), train=_train)
