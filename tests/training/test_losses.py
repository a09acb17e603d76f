"""Pure objective maths (training.kl, training.objectives.grpo.loss, training.objectives.ppo.loss): hand-computed numbers, no model."""
from __future__ import annotations

import math

import pytest
import torch

from training.objectives.grpo.loss import group_advantages, grpo_loss
from training.kl import kl_estimator, kl_k2, kl_k3
from training.objectives.ppo.loss import ValueHead, gae, ppo_losses
from training.reduce import sequence_mean

T = torch.tensor


def close(a, b, tol=1e-5):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), atol=tol)


# ---- KL estimators ------------------------------------------------------------------------------------------------

def test_kl_k3_by_hand():
    """log r = logp_ref − logp.  logp=−1, ref=−1.1 -> log r=−0.1: e^−0.1 + 0.1 − 1 = 0.0048374;
    logp=−2.5, ref=−2 -> log r=0.5: e^0.5 − 0.5 − 1 = 0.1487213; equal -> 0."""
    got = kl_k3(T([-1.0, -2.5, -3.0]), T([-1.1, -2.0, -3.0]))
    assert close(got, [0.0048374, 0.1487213, 0.0])


def test_kl_k2_by_hand():
    """½ (log r)²: log r = −0.1 -> 0.005; 0.5 -> 0.125; 0 -> 0."""
    got = kl_k2(T([-1.0, -2.5, -3.0]), T([-1.1, -2.0, -3.0]))
    assert close(got, [0.005, 0.125, 0.0])


def test_kl_estimators_are_nonnegative_and_agree_near_zero():
    """Both are ≥ 0; k3 = ½ (log r)² + (log r)³/6 + …, so for |log r| ≲ 3e-3 they agree to 0.2 % (relative).
    (float64: in float32, expm1(x) − x cancels to ~1e-3 relative error at |x| ~ 1e-4.)"""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    assert (kl_k3(a, b) >= 0).all() and (kl_k2(a, b) >= 0).all()
    small, zero = (b * 1e-3).double(), torch.zeros(1000, dtype=torch.float64)
    assert torch.allclose(kl_k3(zero, small), kl_k2(zero, small), rtol=2e-3, atol=0)


def test_kl_estimator_lookup():
    assert kl_estimator("k2") is kl_k2 and kl_estimator("k3") is kl_k3
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_estimator("k1")


# ---- GRPO ----------------------------------------------------------------------------------------------------------

def test_group_advantages_population_std():
    """rewards [1, 2, 3]: μ = 2, population σ = √(2/3) = 0.816497 -> A = [−1.224745, 0, 1.224745]
    (the sample std would be 1 and give ±1)."""
    got = group_advantages(T([1.0, 2.0, 3.0]), eps=0.0)
    assert close(got, [-1.224745, 0.0, 1.224745])


def test_group_advantages_edge_cases():
    """Identical rewards -> zeros (no division blow-up thanks to ε); two members -> ±1/(1+ε); groups along last dim."""
    assert close(group_advantages(T([0.7, 0.7, 0.7])), [0.0, 0.0, 0.0])
    assert close(group_advantages(T([0.0, 5.0])), [-1.0, 1.0])
    batched = group_advantages(T([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0]]), eps=0.0)
    assert close(batched[0], [-1.224745, 0.0, 1.224745]) and close(batched[1], [0.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        group_advantages(T([]))


def test_grpo_loss_three_candidates_by_hand():
    """Three sibling candidates, per-sequence log-probs, ε_low = ε_high = 0.2, kl_coef 0.1, k3.

    logp_old = ref = [−1, −2, −1.5], logp_new = [−0.9, −2.5, −1.5], A = [1, −1, 0.5]
    ρ = [e^0.1, e^−0.5, 1] = [1.105171, 0.606531, 1]; clip(ρ) = [1.105171, 0.8, 1]
    min(ρA, clip(ρ)A) = [1.105171, min(−0.606531, −0.8) = −0.8, 0.5] -> policy loss −(0.805171)/3 = −0.268390
    candidate 2 is clipped -> clip_frac 1/3; ratio_mean = (1.105171 + 0.606531 + 1)/3 = 0.903901
    k3 with log r = ref − new = [−0.1, 0.5, 0] -> [0.004837, 0.148721, 0] -> mean 0.051186
    loss = −0.268390 + 0.1 · 0.051186 = −0.263272
    """
    old = T([-1.0, -2.0, -1.5])
    new = T([-0.9, -2.5, -1.5], requires_grad=True)
    loss, stats = grpo_loss(new, old, old.clone(), T([1.0, -1.0, 0.5]), kl_coef=0.1, kl="k3")
    assert close(loss, -0.263272)
    assert math.isclose(stats["policy_loss"], -0.268390, abs_tol=1e-5)
    assert math.isclose(stats["kl"], 0.051186, abs_tol=1e-5)
    assert math.isclose(stats["clip_frac"], 1 / 3, abs_tol=1e-6)
    assert math.isclose(stats["ratio_mean"], 0.903901, abs_tol=1e-5)
    loss.backward()
    # The clipped candidate (index 1) gets gradient only from the KL term: d/dnew (0.1/3)(e^(ref−new) + new − ref − 1)
    # = (0.1/3)(1 − e^0.5) = −0.021624.
    assert close(new.grad[1], -0.021624)


def test_grpo_loss_k2_and_asymmetric_clip():
    """k2 on the same three candidates: ½[0.01, 0.25, 0] -> mean 0.043333.
    Asymmetric clip: ρ = e^0.25 = 1.284025, A = 1: ε_high 0.2 caps at 1.2 (loss −1.2), ε_high 0.28 at 1.28 (−1.28)."""
    old = T([-1.0, -2.0, -1.5])
    _, stats = grpo_loss(T([-0.9, -2.5, -1.5]), old, old, T([1.0, -1.0, 0.5]), kl_coef=0.1, kl="k2")
    assert math.isclose(stats["kl"], 0.043333, abs_tol=1e-5)
    one, zero = T([1.0]), T([0.0])
    sym, _ = grpo_loss(T([0.25]), zero, T([0.25]), one, clip_low=0.2, clip_high=0.2)
    asym, _ = grpo_loss(T([0.25]), zero, T([0.25]), one, clip_low=0.2, clip_high=0.28)
    assert close(sym, -1.2) and close(asym, -1.28)


def test_grpo_loss_per_token_with_mask_is_sequence_mean():
    """Two candidates, per-token. logp_old = ref = 0; mask [[1, 1, 0], [1, 0, 0]]; A = [1, −1]; no KL.
    candidate 1 tokens new = [0.1, −0.1, (pad 5.0)]: ρ = [1.105171, 0.904837] -> terms −[1.105171, 0.904837]
      -> sequence mean −1.005004 (the pad, ρ = e^5, is ignored)
    candidate 2 token new = [0.3]: ρ = 1.349859, A = −1 -> min(−1.349859, −1.2) = −1.349859 -> term 1.349859
    loss = (−1.005004 + 1.349859) / 2 = 0.172427  (a token mean would give (−1.105171 − 0.904837 + 1.349859)/3)"""
    new = T([[0.1, -0.1, 5.0], [0.3, 0.0, 0.0]])
    zeros = torch.zeros_like(new)
    mask = T([[1, 1, 0], [1, 0, 0]])
    loss, stats = grpo_loss(new, zeros, zeros, T([1.0, -1.0]), mask=mask, kl_coef=0.0)
    assert close(loss, 0.172427)
    assert math.isclose(stats["ratio_mean"], ((1.105171 + 0.904837) / 2 + 1.349859) / 2, abs_tol=1e-5)


def test_grpo_loss_rejects_bad_shapes():
    z = torch.zeros(3)
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(z, z, z, torch.zeros(2))
    with pytest.raises(ValueError, match="need a mask"):
        grpo_loss(torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2), z)
    with pytest.raises(ValueError, match="unknown KL"):
        grpo_loss(z, z, z, z, kl="k9")


def test_sequence_mean_by_hand():
    """[[1, 2, 9], [4, 9, 9]] with mask [[1, 1, 0], [1, 0, 0]] -> row means 1.5 and 4 -> 2.75."""
    assert close(sequence_mean(T([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]]), T([[1, 1, 0], [1, 0, 0]])), 2.75)


# ---- PPO -----------------------------------------------------------------------------------------------------------

def test_gae_three_steps_by_hand():
    """γ = 0.9, λ = 0.8 (γλ = 0.72), rewards [1, 0, 2], values [0.5, 1.0, 1.5], terminal (last value 0):
    δ3 = 2 + 0 − 1.5 = 0.5                  A3 = 0.5
    δ2 = 0 + 0.9·1.5 − 1.0 = 0.35           A2 = 0.35 + 0.72·0.5 = 0.71
    δ1 = 1 + 0.9·1.0 − 0.5 = 1.4            A1 = 1.4 + 0.72·0.71 = 1.9112
    returns = A + V = [2.4112, 1.71, 2.0]"""
    adv, ret = gae([1.0, 0.0, 2.0], [0.5, 1.0, 1.5], gamma=0.9, lam=0.8)
    assert close(adv, [1.9112, 0.71, 0.5]) and close(ret, [2.4112, 1.71, 2.0])


def test_gae_truncated_episode_bootstraps_and_lambda_one_is_monte_carlo():
    """Truncated, last_value 1: δ3 = 2 + 0.9 − 1.5 = 1.4 -> A3 = 1.4.
    With γ = λ = 1 and V = 0, A_t is the reward-to-go: [3, 2, 2]."""
    adv, _ = gae([1.0, 0.0, 2.0], [0.5, 1.0, 1.5], gamma=0.9, lam=0.8, last_value=1.0)
    assert close(adv[2], 1.4)
    adv, ret = gae([1.0, 0.0, 2.0], [0.0, 0.0, 0.0], gamma=1.0, lam=1.0)
    assert close(adv, [3.0, 2.0, 2.0]) and close(ret, [3.0, 2.0, 2.0])
    with pytest.raises(ValueError):
        gae([1.0, 2.0], [0.0], 0.9, 0.8)


def test_ppo_losses_by_hand():
    """Two steps, ε = 0.2, value clip 0.2.
    policy: ρ = [e^0.3 = 1.349859, e^−0.3 = 0.740818], A = [2, 1]
      step 1: min(2.699718, 1.2·2 = 2.4) = 2.4 (clipped); step 2: min(0.740818, 0.8·1 = 0.8) = 0.740818 (clipped
      bound not active: the unclipped term is smaller) -> policy loss −(2.4 + 0.740818)/2 = −1.570409; clip_frac 0.5
    value: V_old = [1, 0], V_new = [1.5, 0.1], R = [2, 0]
      step 1: (1.5 − 2)² = 0.25; clipped V = 1 + 0.2 = 1.2 -> (1.2 − 2)² = 0.64 -> max 0.64
      step 2: 0.01; clipped V = 0.1 (inside) -> 0.01 -> ½ mean(0.64, 0.01) = 0.1625"""
    pol, val, stats = ppo_losses(
        T([0.3, -0.3]), T([0.0, 0.0]), T([2.0, 1.0]), T([1.5, 0.1]), T([1.0, 0.0]), T([2.0, 0.0]),
        clip_eps=0.2, value_clip=0.2,
    )
    assert close(pol, -1.570409) and close(val, 0.1625)
    assert stats["clip_frac"] == 0.5 and stats["value_clip_frac"] == 0.5
    _, val_plain, _ = ppo_losses(
        T([0.3, -0.3]), T([0.0, 0.0]), T([2.0, 1.0]), T([1.5, 0.1]), T([1.0, 0.0]), T([2.0, 0.0]), value_clip=0.0
    )
    assert close(val_plain, 0.5 * (0.25 + 0.01) / 2)


def test_value_head_reads_last_attended_token():
    """Zero-initialised -> V ≡ 0. With w = 1 on feature 0, V is that feature at the last position whose mask is 1:
    right-padded row [1, 1, 0] -> position 1; left-padded row [0, 1, 1] -> position 2; no mask -> last position."""
    head = ValueHead(hidden_size=2)
    h = T([[[1.0, 0.0], [2.0, 0.0], [9.0, 0.0]], [[7.0, 0.0], [8.0, 0.0], [3.0, 0.0]]])
    assert close(head(h), [0.0, 0.0])
    with torch.no_grad():
        head.linear.weight.copy_(T([[1.0, 0.0]]))
    assert close(head(h, T([[1, 1, 0], [0, 1, 1]])), [2.0, 3.0])
    assert close(head(h), [9.0, 3.0])
    values = head(h.to(torch.bfloat16), T([[1, 1, 0], [0, 1, 1]]))
    assert values.dtype == torch.float32
