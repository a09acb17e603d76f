"""The multi-head preference model (SPEC §4): a frozen encoder of the trajectory prefix and one linear head per signal.

Encoder. x = (agent prompt at the state, candidate): the candidate is its reply line and, for a SEARCH, the passages
it retrieves rendered as the next prompt would show them ("Found:" + numbered passages, `(again [n] title)` for ones
already shown; `candidate_text`). A sibling's return is decided mostly by what its search finds (`ret` is +-1 per
search; in the 2026-11-24 HotpotQA rollouts `ret` was the largest signal difference of 475 of 634 pairs), which the
query text alone does not show. The observation is a deterministic function of (state, action), so the same x is
computed at inference (`RankedPolicy` previews each SEARCH candidate's results in the environment). With
`PreferenceConfig.observation` off, or for pairs stored before rollouts recorded observations, x is the reply line
alone. Its feature is a hidden state of the policy LM itself (frozen, base weights, LoRA adapters switched off),
pooled over the candidate's tokens (the "completion" below: reply and observation): the prompt is run once per state
(its KV cache is shared by the state's candidates) and each completion is run on top of it, so every completion
token attends to the whole state. Poolings (`PreferenceConfig.layer/pooling`): "mean" over the completion tokens,
"last" (the completion's last token), or "probe": the question is asked again after the candidate (`probe_text`: 'Does
this answer the question "<question>"?') and the hidden states of those probe tokens are averaged. A causal LM's
completion tokens only see the question from far back in the prompt; the probe's tokens see the question and the
candidate's reply and passages together, so their states can carry whether what the candidate retrieved (or answered)
bears on the question, which the answer signal depends on and a mean over ~150 passage tokens dilutes. The probe runs
in the same forward as the completion, after it, so mean/last features are unchanged. The prompt's own positions are
identical for the two sides of a pair and would cancel in f(x+) - f(x-), so they are never pooled. A prompt longer
than 6,000 tokens keeps its last 6,000. Switching the backend's adapter off and on drops the policy's prefix cache, so
with an adapter active each encoded state costs the policy one extra prompt pass. bench/preference.py compares layers
{6, ..., 30} x {mean, last, probe} by grouped cross-validation on the training questions: on 1,850 pooled-corpus
HotpotQA pairs of 192 questions (2026-11-25) probe pooling beat mean pooling at every layer (CV overall accuracy
0.70-0.73 vs 0.66-0.70; last 0.66-0.68); layer 16 with probe is the best and the default. At layer 16 it raised the
ret and ans heads (CV 0.75 -> 0.77, 0.65 -> 0.68) and lowered dup, step and act (0.78 -> 0.70, 0.84 -> 0.79,
0.81 -> 0.77): the probe reads relevance better and the candidate's own surface less.
Features are cached on disk (`FeatureCache`, safetensors) under a key of (model, layer, pooling, prompt,
completion): the encoder is frozen, so retraining never re-runs the LM.

Heads and loss. Features are standardized with the training set's mean/std, optionally passed through a shared
trainable tanh layer (`hidden` > 0), and scored by H linear heads f^(k) (no bias: it cancels in differences);
fitted by full-batch L-BFGS with an L2 penalty `l2` on the weights (`max_iter` iterations).
Each stored rollout pair carries the per-signal returns G^(k) of both branches (rollout.py). Head k's preferred side
is the branch with the larger G^(k); the head is trained only on the pairs where |dG^(k)| >= head_margin (a signal
that is equal on both branches says nothing about which prefix is better on that aspect). With s_k = sign(dG^(k))
and M_k the pairs of head k:
    L = -(1/H) sum_k mean_{i in M_k} log sigma(s_k,i * (f^(k)(x_chosen,i) - f^(k)(x_rejected,i)))
(SPEC §4's -(1/7) sum_k log sigma(f^(k)(x+) - f^(k)(x-)), with x+ chosen per head, averaged over each head's pairs;
a head with no pairs contributes 0). With a frozen encoder and no shared layer the heads are independent logistic
regressions, so a single-signal model's head equals the full model's (the ablation then differs only in what the
overall ranking can use).

Overall preference. score(x) = sum_k c_k f^(k)(x): a logistic regression of the training pairs' overall direction
(the chosen branch has the larger total return) on the head-score differences, by L-BFGS with the same L2. The heads
are fitted on those very pairs, so their in-sample scores are over-confident and a combiner fitted on them trusts
the heads that overfit most (measured: train overall accuracy 0.67, held-out 0.56). So the combiner is stacked:
fitted on out-of-fold head scores (`combine_folds` grouped folds of the training questions; each fold's scores come
from heads fitted without it), then applied to the heads fitted on all training pairs. With `combine_nonnegative`
(default) c >= 0 (c = softplus(u)): every head scores "better on its own signal" and the total return is a
positive-weighted sum of the per-signal returns, so a negative weight can only be noise. It ranks candidate actions
at inference (`rank_candidates`, `RankedPolicy`: best-of-K).

Saved as `model.safetensors` (weights, feature mean/std, combiner) + `config.json` (PreferenceConfig, heads, encoder
model id, feature size, metrics).

The package: `examples` (pairs -> examples), `encoder` (PrefixEncoder, FeatureCache), `model` (PreferenceModel and
its loss), `fit` (fitting, metrics, `train_preference_model`), `ranking` (rank_candidates, RankedPolicy).
"""
from __future__ import annotations

from evorag_core.preference.examples import candidate_text, examples_from_pairs, PreferenceExample, split_examples
from evorag_core.preference.encoder import POOLINGS, encode_examples, FeatureCache, PrefixEncoder, probe_text
from evorag_core.preference.model import preference_loss, PreferenceModel
from evorag_core.preference.fit import evaluate, fit_preference_model, HeadMetrics, metrics_for, PreferenceMetrics, train_preference_model
from evorag_core.preference.ranking import rank_candidates, ranked_policy_from_path, RankedPolicy

__all__ = [
    "POOLINGS",
    "PreferenceExample",
    "candidate_text",
    "probe_text",
    "examples_from_pairs",
    "split_examples",
    "PrefixEncoder",
    "FeatureCache",
    "encode_examples",
    "preference_loss",
    "PreferenceModel",
    "HeadMetrics",
    "PreferenceMetrics",
    "fit_preference_model",
    "evaluate",
    "metrics_for",
    "train_preference_model",
    "rank_candidates",
    "RankedPolicy",
    "ranked_policy_from_path",
]
