"""A step-level PPO round: stored episodes -> GAE advantages -> LoRA + value head update -> registered adapter.

Data: each stored episode replayed into (state, action taken, r̃_t = Σ_k w_k(t) r_t^(k)) steps. A linear value head
(`training.objectives.ppo.loss.ValueHead`) reads the policy's last hidden state at the state's last prompt token. Before the first
update, without gradients: π_old log-probs of every action, V_old(s_t), and V(s_{T+1}) for truncated episodes (0 for
terminated ones); then GAE(γ = train.gamma, λ = train.gae_lambda) per episode gives advantages and value targets.
Advantages are whitened over the round's steps (zero mean, unit std), as TRL's PPO did. Steps a person took in the
studio (`actor = "human"`) carry their reward into the returns but get advantage 0: the policy does not learn their
action as its own (GRPO's groups are the policy's sampled siblings, so it never trains on a human action either).

Loss: clipped policy loss (ε = train.clip_eps) + vf_coef · clipped value loss (train.value_clip), per completion
token then per step (`training.objectives.ppo.loss.ppo_losses`). The value head starts at zero (V ≡ 0), or from the reference
adapter's `value_head.safetensors` when it has one; this round's head is saved beside its adapter.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import torch
from safetensors.torch import load_file, save_file

from evorag_core.config import TrainConfig
from evorag_core.errors import TrainingError

from training.job import AdapterRef, ProgressFn, RoundJob, phase
from training.kl import kl_k3
from training.lora import save_adapter
from training.loop import StepLog, autocast, minibatches, pad_rows, start_policy, train_minibatches, train_mode
from training.objectives.ppo.loss import ValueHead, gae, ppo_losses
from training.processes import SINGLE, Processes
from training.reduce import sequence_mean
from training.rollout_data import Replay
from training.lora_round import LoraSetup, Rollouts, Trained, rollout_meta, run_rollout_round
from training.seqlogp import Encoded, base_lm, completion_token_logps, encode

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedTokenizerBase

    from evorag_core.store import Adapter, Store

__all__ = ["VALUE_HEAD_FILE", "PpoStep", "ppo_steps", "train_ppo", "run"]

VALUE_HEAD_FILE = "value_head.safetensors"
_PLACEHOLDER = "REFUSE"  # any completion: the value reads the last *prompt* token, which never sees it


@dataclass(frozen=True)
class PpoStep:
    episode: int  # index into the replays
    prompt: str
    completion: str
    reward: float
    human: bool = False  # a person chose this action (studio human step): not the policy's to learn


def ppo_steps(replays: Sequence[Replay], render) -> list[PpoStep]:
    return [PpoStep(e, render(s.view), s.completion, s.reward, s.actor == "human")
            for e, r in enumerate(replays) for s in r.steps]


def _prompt_mask(batch: Encoded) -> torch.Tensor:
    mask = torch.zeros_like(batch.attention_mask)
    for b, start in enumerate(batch.starts):
        mask[b, :start] = 1
    return mask


def _forward(policy, head: ValueHead, tokenizer, prompts, completions, cfg: TrainConfig):
    batch = encode(tokenizer, prompts, completions, cfg.max_length)
    logps, hidden = completion_token_logps(policy, batch, with_hidden=True)
    values = head(hidden, _prompt_mask(batch).to(hidden.device))
    return batch, logps, values


def _rollout_stats(policy, head, tokenizer, steps, bootstrap, cfg,
                   processes: Processes = SINGLE) -> tuple[list[torch.Tensor], torch.Tensor, list[float]]:
    """π_old per-token log-probs, V_old per step, and each episode's bootstrap value (0 when it terminated). Under
    several processes each computes its shard of the steps and episodes, then every process gets all of them."""
    mine: list[tuple[int, torch.Tensor, float]] = []
    mine_last: list[tuple[int, float]] = []
    rows = processes.shard(range(len(steps)))
    device = next(policy.parameters()).device
    with torch.no_grad(), autocast(cfg, device):
        for i in range(0, len(rows), cfg.batch_size):
            index = rows[i : i + cfg.batch_size]
            chunk = [steps[j] for j in index]
            batch, lp, v = _forward(policy, head, tokenizer, [s.prompt for s in chunk], [s.completion for s in chunk], cfg)
            mine += [(j, lp[b, :n].cpu(), value) for b, (j, n, value) in
                     enumerate(zip(index, batch.lengths, v.float().cpu().tolist()))]
        for e in processes.shard(range(len(bootstrap))):
            if bootstrap[e] is None:
                mine_last.append((e, 0.0))
                continue
            _, _, v = _forward(policy, head, tokenizer, [bootstrap[e]], [_PLACEHOLDER], cfg)
            mine_last.append((e, float(v[0])))
    scored = sorted(processes.gather(mine), key=lambda row: row[0])
    last = dict(processes.gather(mine_last))
    return [lp for _, lp, _ in scored], torch.tensor([v for _, _, v in scored]), [last[e] for e in range(len(bootstrap))]


def _advantages(steps: Sequence[PpoStep], values: torch.Tensor, last: list[float], cfg: TrainConfig):
    advantages = torch.zeros(len(steps))
    returns = torch.zeros(len(steps))
    for e in sorted({s.episode for s in steps}):
        idx = [i for i, s in enumerate(steps) if s.episode == e]
        a, r = gae([steps[i].reward for i in idx], values[idx], cfg.gamma, cfg.gae_lambda, last_value=last[e])
        advantages[idx], returns[idx] = a, r
    # A person's action (a studio human step) is off-policy: its reward still flows into the earlier steps' returns
    # (GAE above), and the value head learns its state, but it gets no policy advantage: whitening runs over the
    # policy's own steps and the human steps' advantages are 0, so the clipped surrogate has no gradient there.
    own = torch.tensor([not s.human for s in steps], dtype=torch.bool)
    if int(own.sum()) > 1 and float(advantages[own].std()) > 0:
        mine = advantages[own]
        advantages[own] = (mine - mine.mean()) / (mine.std() + 1e-8)
    advantages[~own] = 0.0
    return advantages, returns


_STEP_KEYS = ("loss", "policy_loss", "value_loss", "kl", "clip_frac", "ratio_mean", "approx_kl", "value_clip_frac")


def train_ppo(
    policy: PeftModel, head: ValueHead, tokenizer: PreTrainedTokenizerBase, steps: Sequence[PpoStep],
    bootstrap: Sequence[str | None], cfg: TrainConfig, on_progress: ProgressFn | None = None, *, vf_coef: float = 0.5,
    max_steps: int = 0, processes: Processes = SINGLE,
) -> StepLog:
    """Optimise `policy` (PeftModel) and `head` in place on `steps`. `bootstrap[e]` is the prompt after episode e's
    last step when it was truncated (its value bootstraps GAE), None when it terminated. Under several processes each
    takes its shard of every minibatch, weighted by its share, and the gradients (LoRA and value head) are summed
    once per optimiser step (as `objectives/grpo/round.train_grpo`)."""
    device = next(policy.parameters()).device
    head.to(device)
    old_logps, old_values, last = _rollout_stats(policy, head, tokenizer, steps, bootstrap, cfg, processes)
    advantages, returns = _advantages(steps, old_values, last, cfg)
    batches = minibatches(len(steps), cfg.batch_size, cfg.epochs, cfg.seed)
    total = math.ceil(len(batches) / cfg.grad_accum)
    total = min(total, max_steps) if max_steps else total
    log = StepLog(total, on_progress)

    def loss_of(local: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        chunk = [steps[j] for j in local]
        with autocast(cfg, device):
            batch, logp_new, values = _forward(policy, head, tokenizer, [s.prompt for s in chunk],
                                               [s.completion for s in chunk], cfg)
        mask = batch.completion_mask.to(device)
        logp_old = pad_rows([old_logps[j] for j in local], mask.shape[1]).to(device)
        policy_loss, value_loss, stats = ppo_losses(
            logp_new, logp_old, advantages[local].to(device), values.float(), old_values[local].to(device),
            returns[local].to(device), mask=mask, clip_eps=cfg.clip_eps, value_clip=cfg.value_clip,
        )
        loss = policy_loss + vf_coef * value_loss
        kl_ref = float(sequence_mean(kl_k3(logp_new.detach(), logp_old), mask))  # π_ref = π_old (module docstring)
        return loss, {"loss": float(loss.detach()), "policy_loss": float(policy_loss.detach()),
                      "value_loss": float(value_loss.detach()), "kl": kl_ref, **stats}

    train_mode(policy, cfg)
    params = [p for p in policy.parameters() if p.requires_grad] + list(head.parameters())
    train_minibatches(batches, params, cfg, processes, log, _STEP_KEYS, loss_of)
    policy.eval()
    return log


def _value_head(policy: PeftModel, reference: Adapter | None) -> ValueHead:
    head = ValueHead(base_lm(policy).config.hidden_size)
    saved = Path(reference.path) / VALUE_HEAD_FILE if reference is not None else None
    if saved is not None and saved.is_file():
        state = load_file(str(saved))
        if state.get("linear.weight") is not None and state["linear.weight"].shape == head.linear.weight.shape:
            head.load_state_dict(state)
    return head


def _save(policy: PeftModel, head: ValueHead, out_dir: Path, meta: dict) -> str:
    """The adapter (its checksum returned) and the value head beside it."""
    checksum = save_adapter(policy, out_dir, meta)
    save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}, str(out_dir / VALUE_HEAD_FILE))
    return checksum


@dataclass(frozen=True)
class _Steps:
    replays: list[Replay]
    steps: list[PpoStep]
    bootstrap: list[str | None]


def _prepare(rollouts: Rollouts) -> _Steps:
    render = rollouts.render
    replays = [r for r in rollouts.replays if r.steps]
    if not replays:
        raise TrainingError(f"PPO needs stored episodes with steps; {len(rollouts.episode_ids)} episode(s) read, "
                            "none usable")
    steps = ppo_steps(replays, render)
    bootstrap = [None if r.terminated else render(r.final_view) for r in replays]
    return _Steps(replays, steps, bootstrap)


def _train(setup: LoraSetup[_Steps]) -> Trained:
    job, data = setup.job, setup.data
    policy = start_policy(setup.base.model, job.train, setup.reference, setup.base.model_id)
    head = _value_head(policy, setup.reference)
    setup_s = setup.elapsed()
    steps = data.steps
    log = train_ppo(policy, head, setup.base.tokenizer, steps, data.bootstrap, job.train, setup.on_progress,
                    vf_coef=job.vf_coef, max_steps=job.max_steps, processes=job.processes)
    metrics = {
        "objective": "ppo", "gamma": job.train.gamma, "gae_lambda": job.train.gae_lambda, "vf_coef": job.vf_coef,
        **log.summary(("loss", "policy_loss", "value_loss", "kl", "approx_kl", "clip_frac", "value_clip_frac")),
        "episodes": len(data.replays), "episode_ids": [r.episode_id for r in data.replays], "samples": len(steps),
        "human_steps": sum(s.human for s in steps),
        "mean_step_reward": sum(s.reward for s in steps) / len(steps),
        **setup.round_metrics(setup_s, log.history[-1]["elapsed_s"] if log.history else 0.0),
    }
    phase(setup.on_progress, "save")
    return Trained(job.processes.on_main(_save, policy, head, setup.out_dir, rollout_meta(setup, "ppo", metrics)),
                   metrics)


def run(job: RoundJob, store: Store, on_progress: ProgressFn | None = None) -> AdapterRef:
    """setup -> train -> save -> register (the module docstring; the steps: training.lora_round)."""
    return run_rollout_round(job, store, on_progress, prepare=_prepare, train=_train)
