"""Configuration: frozen dataclasses loaded from one TOML file; a typo fails loudly.

`load_config(path, overrides)` reads `configs/default.toml` (or any other file) and applies
`section.key=value` overrides (the CLI's flags end up here). Unknown sections or keys raise
`ConfigError`. Every section checks its values as it is built (from the file, an override or code): the field's
type (floats finite: no NaN or inf), then the rule its `RULES` names (a range or a set of choices); a bad value is a
ConfigError naming the key, the value and what is allowed. Limits that need runtime context (a preference layer
beyond the loaded model's depth, CUDA on a machine without it) are checked where that context exists.
"""
from __future__ import annotations

import dataclasses
import functools
import ipaddress
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields, is_dataclass, make_dataclass, replace
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, get_args, get_origin, get_type_hints

from evorag_core.signal_table import SIGNAL_TABLE, WEIGHT_COLUMNS
from evorag_core.errors import ConfigError
from evorag_core.objectives import OBJECTIVES

__all__ = [
    "ANSWERERS",
    "GAP_SOURCES",
    "QUERY_MODES",
    "QUERY_SCORES",
    "CONTINUATION_TARGETS",
    "RETRIEVERS",
    "Allowed",
    "LEARNING_RATE",
    "check_section",
    "rule_of",
    "PREFILL_DTYPES",
    "POLICY_BACKENDS",
    "TRAIN_DTYPES",
    "EnvConfig",
    "RewardConfig",
    "WeightsConfig",
    "CurriculumConfig",
    "RetrievalConfig",
    "PolicyConfig",
    "JudgeConfig",
    "RolloutConfig",
    "PreferenceConfig",
    "TrainConfig",
    "StudioConfig",
    "DynaKragConfig",
    "R2agConfig",
    "AnswerConfig",
    "ArenaSettings",
    "PromotionConfig",
    "PROMOTION_METHODS",
    "PROMOTION_METRICS",
    "PROMOTION_AGAINST",
    "ANSWER_MODES",
    "YES_NO_CALIBRATIONS",
    "YES_NO_METHODS",
    "ANSWER_RANKERS",
    "Config",
    "load_config",
    "default_config_path",
    "home_dir",
    "db_url",
]

REPO_ROOT = Path(__file__).resolve().parent.parent


# --- what each setting allows ------------------------------------------------------------------------------------
# Every section lists a rule per field in `RULES`; building a section (load_config, an override, or code) checks
# each value's type (floats must be finite) and then its rule, and raises ConfigError naming key, value and rule.


@dataclass(frozen=True)
class Allowed:
    """One setting's rule: `ok(value)` says whether the value is allowed, `what` says so in words; `lo` / `hi`: the
    inclusive numeric bounds an input field can show (None: open on that side, or not expressible as one)."""

    what: str
    ok: Callable[[Any], bool]
    choices: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None


def at_least(lo: float) -> Allowed:
    return Allowed(f">= {lo}", lambda v: v >= lo, lo=lo)


def above(lo: float) -> Allowed:
    return Allowed(f"> {lo}", lambda v: v > lo)


def within(lo: float, hi: float) -> Allowed:
    return Allowed(f"in [{lo}, {hi}]", lambda v: lo <= v <= hi, lo=lo, hi=hi)


def above_up_to(lo: float, hi: float) -> Allowed:
    return Allowed(f"in ({lo}, {hi}]", lambda v: lo < v <= hi, hi=hi)


def one_of(choices: tuple[str, ...]) -> Allowed:
    return Allowed(f"one of {', '.join(choices)}", lambda v: v in choices, tuple(choices))


def matching(pattern: str, what: str) -> Allowed:
    return Allowed(what, lambda v: re.fullmatch(pattern, v) is not None)


def _is_network(value: Any) -> bool:
    try:
        ipaddress.ip_network(value, strict=False)
    except (TypeError, ValueError):
        return False
    return True


POSITIVE = at_least(1)  # counts, sizes and token budgets where 0 means nothing would happen
# A LoRA learning rate: the embedded model's rounds train at 5e-5 to 1e-3, the tests' tiny random model at up to 2e-2;
# at 0.1 and beyond Adam's first steps wreck any adapter (a typo such as 5 for 5e-5 would run a round and register it)
LEARNING_RATE = above_up_to(0, 0.1)
NON_NEGATIVE = at_least(0)
PROBABILITY = within(0, 1)
SEED = NON_NEGATIVE  # numpy refuses negative seeds
TEXT = Allowed("a non-empty string", lambda v: bool(v.strip()))
FLAG = Allowed("true or false", lambda v: True)  # the type check already refused anything else
Rules = Mapping[str, Allowed]

_TYPE_WORDS = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false"}


def _type_ok(value: Any, typ: Any) -> bool:
    if typ is bool:
        return isinstance(value, bool)
    if typ is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if typ is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if typ is str:
        return isinstance(value, str)
    return True


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


@functools.cache
def _section_name(cls: type) -> str:
    return next((name for name, hint in _hints(Config).items() if hint is cls), cls.__name__)


def rule_of(key: str) -> Allowed | None:
    """The rule of setting `section.name` (e.g. "train.lr"); None if it has none. KeyError for an unknown key."""
    section, _, name = key.partition(".")
    hints = _hints(Config)
    if section not in hints or name not in {f.name for f in fields(hints[section])}:
        raise KeyError(f"no setting {key!r}")
    return hints[section].RULES.get(name)


def check_section(section: _Checked) -> None:
    """Raise ConfigError for the first field of `section` whose value has the wrong type or breaks its rule."""
    cls = type(section)
    hints, rules = _hints(cls), cls.RULES
    for f in fields(cls):
        value, where = getattr(section, f.name), f"{_section_name(cls)}.{f.name}"
        typ = hints[f.name]
        if not _type_ok(value, typ):
            raise ConfigError(f"{where} must be {_TYPE_WORDS.get(typ, typ)}, got {value!r}")
        rule = rules.get(f.name)
        if rule is not None and not rule.ok(value):
            raise ConfigError(f"{where} must be {rule.what}, got {value!r}")


class _Checked:
    """Mixin of the section dataclasses: values are checked as the section is built."""

    RULES: ClassVar[Rules] = {}

    def __post_init__(self) -> None:
        check_section(self)


@dataclass(frozen=True)
class EnvConfig(_Checked):
    t_max: int = 20
    top_k: int = 5
    corpus: str = "pooled"  # pooled | per-question
    # "pooled" only: also pool the passages of these data files, comma-separated paths (e.g. every shared benchmark
    # file: tens of thousands of passages with every question's distractors, where one retrieval is not enough)
    corpus_from: str = ""

    RULES: ClassVar[Rules] = {"t_max": POSITIVE, "top_k": POSITIVE, "corpus": one_of(("pooled", "per-question")),
                              "corpus_from": Allowed("comma-separated data file paths", lambda v: True)}

    @property
    def corpus_files(self) -> tuple[str, ...]:
        return tuple(f.strip() for f in self.corpus_from.split(",") if f.strip())


@dataclass(frozen=True)
class RewardConfig(_Checked):
    stage: str = "discovery"  # discovery | refinement
    schedule: str = "time-dynamic"  # time-dynamic | two-stage | no-reward
    preset: str = "full"  # full | best2 | best3 | exploration-heavy | efficiency-heavy
    # `act` fires when the search is redundant: -r_dup > threshold (paper-literal: r_dup < 0).
    redundancy_threshold: float = 0.0
    act_progress: float = 0.3  # `act` applies only when p(t) >= this

    RULES: ClassVar[Rules] = {
        "stage": one_of(("discovery", "refinement")),
        "schedule": one_of(("time-dynamic", "two-stage", "no-reward")),
        "preset": one_of(("full", "best2", "best3", "exploration-heavy", "efficiency-heavy")),
        "redundancy_threshold": within(-1, 1),  # compared with a cosine similarity
        "act_progress": PROBABILITY,  # compared with p(t) in [0, 1]
    }


def _weights_config() -> type:
    """The [weights] section: a float field `<weight>_<column>` (e.g. `beta_start`) per signal and Start / Mid / End
    column, defaulting to the signal table's values (the paper's Table 2), so a new row of `SIGNAL_TABLE` is a new
    section field without an edit here."""
    columns = [(f"{row.weight}_{c}", float, field(default=float(getattr(row, c))))
               for row in SIGNAL_TABLE for c in WEIGHT_COLUMNS]
    namespace = {
        "__module__": __name__,
        "__doc__": "The scheduler's Start / Mid / End weight columns (SPEC §3, Table 2): `<weight>_<column>`, e.g. "
                   "`beta_start`, one field per row of `signal_table.SIGNAL_TABLE` and column. Discovery "
                   "interpolates Start -> Mid, Refinement Mid -> End. `evorag tune-weights` writes a [weights] table.",
        "RULES": {name: NON_NEGATIVE for name, _, _ in columns},
    }
    return make_dataclass("WeightsConfig", columns, bases=(_Checked,), frozen=True, namespace=namespace)


WeightsConfig = _weights_config()


@dataclass(frozen=True)
class CurriculumConfig(_Checked):
    ema_alpha: float = 0.5
    epsilon: float = 0.01
    patience: int = 2
    max_rounds: int = 6

    RULES: ClassVar[Rules] = {"ema_alpha": Allowed("in (0, 1]", lambda v: 0 < v <= 1), "epsilon": NON_NEGATIVE,
                              "patience": POSITIVE, "max_rounds": POSITIVE}


@dataclass(frozen=True)
class RetrievalConfig(_Checked):
    bm25_backend: str = "bm25s"  # bm25s | rank-bm25
    bm25_method: str = "lucene"  # lucene | robertson | atire (BM25 idf variant, both backends)
    dense_model: str = "embedded"  # "embedded" (all-MiniLM-L6-v2 from PyPI) or a local path / HF id
    rrf_k: int = 60
    fusion_depth: int = 50  # candidates taken from each retriever before fusion
    max_seq_length: int = 128  # MiniLM was trained at 128; 256 costs ~1.3x the time for equal recall
    dtype: str = "float32"  # float32 | bfloat16
    batch_size: int = 64
    stopwords: str = "en_plus"  # BM25 stopword list: en (33 words) | en_plus (179) | none
    stemmer: bool = True  # BM25: Snowball English stemming (PyStemmer)

    RULES: ClassVar[Rules] = {
        "bm25_backend": one_of(("bm25s", "rank-bm25")),
        "bm25_method": one_of(("lucene", "robertson", "atire")),
        "dense_model": TEXT,
        "rrf_k": NON_NEGATIVE,
        "fusion_depth": POSITIVE,
        "max_seq_length": POSITIVE,
        "dtype": one_of(("float32", "bfloat16")),
        "batch_size": POSITIVE,
        "stopwords": one_of(("en", "en_plus", "none")),
        "stemmer": FLAG,
    }


# PolicyConfig.backend: where the policy LM runs - in process (transformers), vLLM's offline engine in process, or an
# OpenAI-compatible completions server reached over HTTP (vLLM / SGLang / llama.cpp's server; docs/serving.md)
POLICY_BACKENDS: tuple[str, ...] = ("transformers", "vllm", "openai")
# PolicyConfig.answer_with: who writes the LM agent's ANSWER text - the reader prompt over the chain's passages,
# the agent prompt's own continuation, or ARENA's cited reply
ANSWERERS: tuple[str, ...] = ("reader", "policy", "arena")
# PolicyConfig.prefill_dtype: the precision of the transformers backend's prompt forwards on an fp32 CPU model;
# "auto" = bfloat16 where the CPU has native bf16 matrix instructions (AVX512-BF16 / AMX), else float32
PREFILL_DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16")
# TrainConfig.dtype: "auto" = bfloat16 where the device multiplies bf16 natively (CUDA >= sm80, CPU AVX512-BF16 / AMX),
# else float32 (training/precision.py has the measurements)
TRAIN_DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16")
# PolicyConfig.query_mode: the SEARCH argument after the first hop - "grounded" = the best-scored of candidates built
# from the passages read (bridge entities + uncovered question words, ...) and the model's own query
# (evorag_core/policy/queries.py); "free" = the model's generated query as is
QUERY_MODES: tuple[str, ...] = ("grounded", "free")
# PolicyConfig.query_score: how grounded candidates are ranked - mean token log-prob under the agent prompt ("mean"),
# or that minus the same under the question-only prompt ("pmi")
QUERY_SCORES: tuple[str, ...] = ("mean", "pmi")
# DynaKrag's recorded gap (what gap_query searches): "uncovered" = the question's content words that no evidence
# passage contains (the LM writes a description only when every word is covered); "lm" = the LM's description
GAP_SOURCES: tuple[str, ...] = ("uncovered", "lm")
# DynaKrag's continuation model target u(s_final) - u(s): "answer" = token F1 of the generator's direct answer from
# the state's documents (the paper: "the answer utility of continuing"); "support" = support recall SR(s)
CONTINUATION_TARGETS: tuple[str, ...] = ("answer", "support")
# DynaKrag's and R2AG's retrievers (a RetrievalService name)
RETRIEVERS: tuple[str, ...] = ("bm25", "dense", "rrf")


@dataclass(frozen=True)
class PolicyConfig(_Checked):
    backend: str = "transformers"  # one of POLICY_BACKENDS (lm/backends.py)
    model: str = "embedded"  # "embedded" (SmolLM2-135M-Instruct from PyPI) or a local path / HF id
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "float32"
    max_query_tokens: int = 32
    max_answer_tokens: int = 24
    temperature: float = 0.8
    siblings: int = 4
    passage_chars: int = 300  # each passage is cut to this many characters in the prompt
    seed: int = 0
    threads: int = 0  # torch CPU threads set when the backend loads; 0 = leave torch's default
    constrain_actions: bool = True  # mask actions that are no-ops or premature (see evorag_core/policy/agent.py)
    max_searches: int = 4  # with constrain_actions: SEARCH/BACKTRACK masked after this many searches (0 = none)
    answer_with: str = "reader"  # ANSWER text, one of ANSWERERS (see evorag_core/policy/agent.py)
    arena_tokens: int = 192  # answer_with="arena": token budget of the cited reply (relevance + analysis + answer)
    reader_passages: int = 5  # passages the reader sees (as fixed-k's): the hops' rankings interleaved
    first_query: str = "question"  # the greedy first SEARCH: "question" (the question itself) | "generate"
    query_mode: str = "grounded"  # later SEARCH arguments, one of QUERY_MODES (see evorag_core/policy/queries.py)
    query_score: str = "pmi"  # grounded candidates ranked by, one of QUERY_SCORES (pmi: +0.067 full support on dev)
    # the hop planner (evorag_core/policy/hops.py): nats added to SEARCH's label score while the evidence lacks a hop
    # (and the greedy query is the plan's), to ANSWER's once it holds every hop; 0 = off (the LM alone decides)
    hop_gate: float = 4.0
    half_decode_rows: int = 4  # fp32 CPU models: inputs of <= this many rows use fp16 weight copies (0 = off)
    prefill_dtype: str = "auto"  # fp32 CPU models: bf16 weight copies for prompt forwards? one of PREFILL_DTYPES
    shared_prefix_siblings: bool = True  # CPU: batched siblings share the prompt's KV cache (cascade attention)
    # backend = "openai" (lm/openai_backend.py, docs/serving.md): an OpenAI-compatible completions server
    base_url: str = ""  # e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang, llama.cpp's server)
    served_model: str = ""  # the server's name of the base model ("" = the first model its /models lists)
    api_key_env: str = "EVORAG_POLICY_API_KEY"  # environment variable holding the server's API key (unset: none)
    request_timeout_s: float = 120.0  # every HTTP request's timeout

    RULES: ClassVar[Rules] = {
        "backend": one_of(POLICY_BACKENDS),
        "model": TEXT,
        "device": matching(r"auto|cpu|mps|cuda(:\d+)?", "auto, cpu, mps, cuda or cuda:N"),
        "dtype": one_of(("float32", "bfloat16", "float16")),
        "max_query_tokens": POSITIVE,
        "max_answer_tokens": POSITIVE,
        "temperature": NON_NEGATIVE,  # 0 = greedy
        "siblings": POSITIVE,
        "passage_chars": NON_NEGATIVE,  # ARENA's prompt reads 0 as the full text
        "seed": SEED,
        "threads": NON_NEGATIVE,
        "constrain_actions": FLAG,
        "max_searches": NON_NEGATIVE,
        "answer_with": one_of(ANSWERERS),
        "arena_tokens": POSITIVE,
        "reader_passages": NON_NEGATIVE,  # 0 = every passage of the chain
        "first_query": one_of(("question", "generate")),
        "half_decode_rows": NON_NEGATIVE,
        "prefill_dtype": one_of(PREFILL_DTYPES),
        "shared_prefix_siblings": FLAG,
        "query_mode": one_of(QUERY_MODES),
        "query_score": one_of(QUERY_SCORES),
        "hop_gate": NON_NEGATIVE,
        "base_url": matching(r"(https?://\S+)?", "empty or an http(s):// URL"),
        "served_model": Allowed("a string", lambda v: True),
        "api_key_env": matching(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name"),
        "request_timeout_s": above(0),
    }


@dataclass(frozen=True)
class JudgeConfig(_Checked):
    kind: str = "gold"  # gold | llm
    threshold: float = 0.5  # llm judge: P(yes) / (P(yes)+P(no)) >= threshold -> enough evidence

    RULES: ClassVar[Rules] = {"kind": one_of(("gold", "llm")), "threshold": PROBABILITY}


@dataclass(frozen=True)
class RolloutConfig(_Checked):
    """Sibling-branch rollouts (evorag_core/pairs/rollout.py explains each bound and its default)."""

    siblings: int = 4  # K candidates sampled per branch state
    temperature: float = 1.0  # sampling temperature of the siblings
    t_max: int = 5  # the rollout episodes' T_max (0 = env.t_max)
    max_states: int = 3  # branch states per episode (evenly spread over the main trajectory)
    max_branch_steps: int = 0  # steps after the candidate before a branch is cut (0 = to the episode's end)
    policy_margin: float = 0.2  # |dR| a pair needs for policy training (DPO)
    preference_margin: float = 0.3  # |dR| a pair needs for the preference model
    balance_ratio: float = 1.0  # greedy-chosen vs greedy-rejected pairs: majority <= ratio * minority + 1 (0 = off)
    seed: int = 0

    RULES: ClassVar[Rules] = {
        "siblings": at_least(2),  # a pair needs two different candidates
        "temperature": above(0),  # greedy siblings would all be the same completion
        "t_max": NON_NEGATIVE,
        "max_states": POSITIVE,
        "max_branch_steps": NON_NEGATIVE,
        "policy_margin": NON_NEGATIVE,
        "preference_margin": NON_NEGATIVE,
        "balance_ratio": NON_NEGATIVE,
        "seed": SEED,
    }


@dataclass(frozen=True)
class PreferenceConfig(_Checked):
    """The multi-head preference model (evorag_core/preference/)."""

    layer: int = 16  # hidden-state layer of the frozen policy LM (0 = embeddings, 30 = last for SmolLM2-135M)
    pooling: str = "probe"  # mean (over the completion) | last (its last token) | probe (the question asked after it)
    hidden: int = 0  # a shared trainable tanh layer of this width under the heads (0 = linear heads on the features)
    head_margin: float = 0.001  # a head is trained on the pairs whose per-signal returns differ by at least this
    l2: float = 0.1  # L2 penalty on the head (and shared layer) weights, added to the mean pairwise loss
    max_iter: int = 200  # full-batch L-BFGS iterations
    holdout: float = 0.2  # share of questions held out for evaluation
    seed: int = 0
    combine_folds: int = 5  # the combiner is fitted on out-of-fold head scores over this many question groups (0: in-sample)
    combine_nonnegative: bool = True  # combiner weights >= 0 (each head scores "better on its signal")
    observation: bool = True  # x = the reply line + what a SEARCH candidate retrieved (else the reply line alone)

    RULES: ClassVar[Rules] = {
        "layer": NON_NEGATIVE,  # the upper bound depends on the model: checked when it loads
        "pooling": one_of(("mean", "last", "probe")),
        "hidden": NON_NEGATIVE,
        "head_margin": NON_NEGATIVE,
        "l2": NON_NEGATIVE,
        "max_iter": POSITIVE,
        "holdout": Allowed("in (0, 1)", lambda v: 0 < v < 1),
        "seed": SEED,
        "combine_folds": NON_NEGATIVE,
        "combine_nonnegative": FLAG,
        "observation": FLAG,
    }


@dataclass(frozen=True)
class TrainConfig(_Checked):
    objective: str = "dpo"  # dpo | grpo | ppo
    epochs: int = 1
    lr: float = 5e-5
    beta: float = 0.1
    kl: str = "k3"  # k2 | k3
    kl_coef: float = 0.05
    clip_eps: float = 0.2  # PPO ratio clip; GRPO's lower clip
    clip_eps_high: float = 0.2  # GRPO's upper clip (R2AG uses 0.28; 0.2 = symmetric)
    value_clip: float = 0.2  # PPO value-function clip (0 disables it)
    gamma: float = 1.0
    gae_lambda: float = 0.95
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    max_length: int = 512
    batch_size: int = 4
    grad_accum: int = 1  # gradient accumulation steps (effective batch = batch_size * grad_accum)
    dtype: str = "float32"  # one of TRAIN_DTYPES (bfloat16: bf16 autocast, the weights stay as loaded)
    # recompute each layer's activations in the backward pass: the studio + worker peak of a DPO round 4.0 -> 2.9 GB
    # for ~40 % more training time (bench/results/memory.json, runs current / gradient_checkpointing)
    gradient_checkpointing: bool = True
    seed: int = 0
    lease_seconds: int = 60
    max_attempts: int = 2  # a round whose worker died (lease expired) is queued again until this many claims

    RULES: ClassVar[Rules] = {
        "objective": one_of(tuple(OBJECTIVES)),
        "epochs": POSITIVE,
        "lr": LEARNING_RATE,
        "beta": above(0),
        "kl": one_of(("k2", "k3")),
        "kl_coef": NON_NEGATIVE,
        "clip_eps": NON_NEGATIVE,
        "clip_eps_high": NON_NEGATIVE,
        "value_clip": NON_NEGATIVE,
        "gamma": PROBABILITY,
        "gae_lambda": PROBABILITY,
        "lora_r": POSITIVE,
        "lora_alpha": POSITIVE,
        "lora_dropout": Allowed("in [0, 1)", lambda v: 0 <= v < 1),
        "max_length": POSITIVE,
        "batch_size": POSITIVE,
        "grad_accum": POSITIVE,
        "dtype": one_of(TRAIN_DTYPES),
        "gradient_checkpointing": FLAG,
        "seed": SEED,
        "lease_seconds": POSITIVE,
        "max_attempts": POSITIVE,
    }


@dataclass(frozen=True)
class StudioConfig(_Checked):
    host: str = "127.0.0.1"
    port: int = 7860
    start_worker: bool = True
    prepare_next: bool = True  # compute the next greedy LM decision while the person reads a step (app/common/session.py)
    data_roots: tuple[str, ...] = ()  # folders the studio may read data files from, besides data/ and uploads
    max_question_chars: int = 2000  # longest text typed in the studio (a question, a query, an answer, a name)
    trusted_proxies: tuple[str, ...] = ()  # reverse proxies (IPs or networks) whose X-Forwarded-For is honoured
    worker_restart_s: float = 1.0  # a dead worker is restarted after this, doubled while it keeps dying
    worker_restart_max_s: float = 60.0  # ... up to this
    max_upload_mb: float = 50.0  # largest data file the studio accepts as an upload
    upload_max_age_hours: float = 168.0  # uploads not used for this long are deleted (at start and on each upload)
    timer_fast_s: float = 2.0  # an open page polls the server this often while a round or evaluation runs ...
    timer_slow_s: float = 5.0  # ... and this often while nothing does (app/common/page_timers.py)

    RULES: ClassVar[Rules] = {
        "host": TEXT, "port": within(1, 65535), "start_worker": FLAG, "prepare_next": FLAG,
        "worker_restart_s": above(0), "worker_restart_max_s": above(0), "max_upload_mb": above(0),
        "upload_max_age_hours": above(0), "timer_fast_s": above(0), "timer_slow_s": above(0),
        "data_roots": Allowed("a list of non-empty folder paths",
                              lambda v: isinstance(v, tuple) and all(isinstance(r, str) and r.strip() for r in v)),
        "max_question_chars": POSITIVE,
        "trusted_proxies": Allowed("a list of IP addresses or networks (e.g. 10.0.0.5, 10.0.0.0/24)",
                                   lambda v: isinstance(v, tuple) and all(_is_network(a) for a in v)),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.timer_slow_s < self.timer_fast_s:
            raise ConfigError(f"studio.timer_slow_s ({self.timer_slow_s}) must be at least studio.timer_fast_s "
                              f"({self.timer_fast_s}): the idle rate is the slower one")


@dataclass(frozen=True)
class AnnotateConfig(_Checked):
    """The annotation queue (evorag_core/store/annotations.py, the studio's Annotate tab)."""

    annotators_per_item: int = 1  # N: each item goes to this many annotators (agreement needs 2 or more)
    lease_seconds: float = 600.0  # an item shown to an annotator is theirs this long; then it is offered again
    guidelines: str = ""  # markdown shown in the Annotate tab's guidelines panel ("" : the built-in guidelines)

    RULES: ClassVar[Rules] = {"annotators_per_item": within(1, 50), "lease_seconds": POSITIVE, "guidelines": Allowed("a markdown string", lambda v: True)}


@dataclass(frozen=True)
class DynaKragConfig(_Checked):
    """DynaKrag evidence control (SPEC §7); ablations are flags here (`--set dynakrag.KEY=VALUE`)."""

    docs_per_op: int = 3  # new documents added by one retrieval operation
    max_steps: int = 4  # acquisition + sufficiency steps before forced finalization
    retrieval_cap: int = 3  # retrieval operations per question (the first retrieve_more included)
    max_context_docs: int = 12  # documents kept in the final answer context
    frontier_depth: int = 30  # depth of the initial ranking that retrieve_more walks
    initial_retriever: str = "rrf"  # bm25 | dense | rrf: the initial ranking
    targeted_retriever: str = "dense"  # bm25 | dense | rrf: gap / rewrite / bridge queries
    controller: str = "learned"  # learned | uniform (the uniform-valid ablation)
    sufficiency: bool = True  # false: the no-sufficiency-check ablation
    compression: bool = True  # false: no terminal compress_answer_evidence
    continuation: bool = True  # learned controller: the continuation model may suppress stop_answer
    continuation_threshold: float = 0.02  # suppress stop when the predicted gain of continuing exceeds this
    continuation_target: str = "answer"  # what that gain is measured in, one of CONTINUATION_TARGETS
    cost_weight: float = 0.0  # lambda in argmax v(s,a) - lambda c(s,a)
    model_dir: str = "dynakrag"  # trained controller folder, relative to the home folder unless absolute
    sufficiency_threshold: float = 0.5  # P(yes) / (P(yes) + P(no)) at or above this: sufficient
    gap_source: str = "uncovered"  # what an insufficient probe records for gap_query, one of GAP_SOURCES
    passage_chars: int = 300  # each passage is cut to this many characters in LM prompts
    gap_tokens: int = 24
    max_snippets: int = 8
    compress_tokens: int = 256
    answer_tokens: int = 48
    train_rollouts: int = 2  # exploration rollouts per training question
    n_estimators: int = 300
    min_samples_leaf: int = 8
    seed: int = 13

    RULES: ClassVar[Rules] = {
        "docs_per_op": POSITIVE,
        "max_steps": NON_NEGATIVE,  # 0 (either cap): stop_answer at once, from no evidence
        "retrieval_cap": NON_NEGATIVE,
        "max_context_docs": POSITIVE,
        "frontier_depth": POSITIVE,
        "initial_retriever": one_of(RETRIEVERS),
        "targeted_retriever": one_of(RETRIEVERS),
        "controller": one_of(("learned", "uniform")),
        "sufficiency": FLAG,
        "compression": FLAG,
        "continuation": FLAG,
        "continuation_threshold": NON_NEGATIVE,
        "continuation_target": one_of(CONTINUATION_TARGETS),
        "cost_weight": NON_NEGATIVE,
        "model_dir": TEXT,
        "sufficiency_threshold": PROBABILITY,
        "gap_source": one_of(GAP_SOURCES),
        "passage_chars": POSITIVE,
        "gap_tokens": POSITIVE,
        "max_snippets": POSITIVE,
        "compress_tokens": POSITIVE,
        "answer_tokens": POSITIVE,
        "train_rollouts": POSITIVE,
        "n_estimators": POSITIVE,
        "min_samples_leaf": POSITIVE,
        "seed": SEED,
    }


@dataclass(frozen=True)
class R2agConfig(_Checked):
    """R²AG retrieval tree (SPEC §7, seed 002); rewards use the paper's coefficients (`--set r2ag.KEY=VALUE`)."""

    steering: str = "lm"  # lm | scripted (deterministic entity/title heuristic, no LM)
    max_iterations: int = 5  # L_max: tree expansions per question
    top_t_base: int = 4  # base branches of an expansion that are expanded further
    top_t_predicted: int = 2  # predicted (anticipatory) branches expanded further
    top_k: int = 1  # passages retrieved per intermediate query
    max_queries: int = 6  # queries of each kind read from one expansion (the rest are dropped, counted)
    max_frontier: int = 4  # branches expanded per iteration (breadth bound; tree order)
    retriever: str = "rrf"  # bm25 | dense | rrf
    temperature: float = 0.0  # steering decode at inference (0: greedy)
    max_new_tokens: int = 160
    passage_chars: int = 300  # each context passage is cut to this many characters in the prompt
    demo: bool = True  # one worked example turn in the steering prompt
    answer_docs: int = 10  # passages of the tree (breadth-first) given to the answer generator
    alpha: float = 0.2  # Multi-Hit@Top-1
    beta: float = 0.3  # Joint-Hit@Top-1
    gamma: float = 0.2  # Top-t/x average precision
    ell: float = 1.25  # weight of predicted-query hits in R_MH
    omega: float = 1.0  # format reward weight
    format_per_query: float = 0.01  # R_f per well-formed base/predicted segment after a think block
    format_max: float = 0.02  # cap of omega * R_f

    RULES: ClassVar[Rules] = {
        "steering": one_of(("lm", "scripted")),
        "max_iterations": POSITIVE,
        "top_t_base": NON_NEGATIVE,
        "top_t_predicted": NON_NEGATIVE,
        "top_k": POSITIVE,
        "max_queries": POSITIVE,
        "max_frontier": POSITIVE,
        "retriever": one_of(RETRIEVERS),
        "temperature": NON_NEGATIVE,  # 0 = greedy
        "max_new_tokens": POSITIVE,
        "passage_chars": NON_NEGATIVE,  # 0 = the full text
        "demo": FLAG,
        "answer_docs": POSITIVE,
        "alpha": NON_NEGATIVE,
        "beta": NON_NEGATIVE,
        "gamma": NON_NEGATIVE,
        "ell": NON_NEGATIVE,
        "omega": NON_NEGATIVE,
        "format_per_query": NON_NEGATIVE,
        "format_max": NON_NEGATIVE,
    }


# AnswerConfig.mode: "span" = a span of the reader's passages, yes/no, or a refusal (evorag_core/reader/span.py);
# "free" = the reader's greedy generation, cleaned (evorag_core/reader/answers.py)
ANSWER_MODES: tuple[str, ...] = ("span", "free")
YES_NO_CALIBRATIONS: tuple[str, ...] = ("none", "content_free")
YES_NO_METHODS: tuple[str, ...] = ("evidence", "model")
ANSWER_RANKERS: tuple[str, ...] = ("learned", "lm")
PASSAGE_ORDERS: tuple[str, ...] = ("retrieval", "reversed")


@dataclass(frozen=True)
class AnswerConfig(_Checked):
    """The reader every method answers with (evorag_core/reader/answers.py, reader/span.py)."""

    mode: str = "span"  # one of ANSWER_MODES
    passage_chars: int = 0  # span mode: passage cut in the reader prompt (0 = the method's own, e.g. policy.passage_chars)
    length_alpha: float = 0.0  # span score = log P(span + end) / (tokens + 1) ** length_alpha
    yes_no_calibration: str = "content_free"  # one of YES_NO_CALIBRATIONS
    yes_bias: float = 0.0  # added to the (calibrated) log P(yes) - log P(no)
    yes_no: str = "evidence"  # one of YES_NO_METHODS: read from the entities' passages (reader/yes_no.py), else the model
    answer_types: bool = True  # span mode: keep the candidates of the question's expected answer type (reader/answer_type.py)
    demos: bool = True  # span mode: two short-answer demonstrations as earlier chat turns of the reader prompt
    passage_order: str = "retrieval"  # one of PASSAGE_ORDERS; "reversed": the first passage last, nearest the question
    max_words: int = 8  # longest candidate span, in words
    max_candidates: int = 64  # candidates scored per answer (in passage order)
    ranker: str = "learned"  # one of ANSWER_RANKERS: "learned" (reader/ranker.py) or "lm" (log P alone)
    ranker_path: str = ""  # the learned ranker's weight file ("" = the packaged reader/ranker.json)
    adapter: str = ""  # a LoRA adapter folder the reader answers with ("" = the policy's weights, adapter or not)
    min_confidence: float = 0.0  # span mode: refuse ("low_confidence") a span whose probability under the ranking is below this

    RULES: ClassVar[Rules] = {
        "mode": one_of(ANSWER_MODES),
        "min_confidence": within(0, 1),
        "adapter": Allowed("a LoRA adapter folder, or empty", lambda v: isinstance(v, str)),
        "ranker": one_of(ANSWER_RANKERS),
        "ranker_path": Allowed("a path to a ranker weight file, or empty", lambda v: isinstance(v, str)),
        "passage_chars": NON_NEGATIVE,
        "length_alpha": NON_NEGATIVE,
        "yes_no_calibration": one_of(YES_NO_CALIBRATIONS),
        "yes_bias": Allowed("any finite number", lambda v: True),
        "yes_no": one_of(YES_NO_METHODS),
        "answer_types": FLAG,
        "demos": FLAG,
        "passage_order": one_of(PASSAGE_ORDERS),
        "max_words": POSITIVE,
        "max_candidates": POSITIVE,
    }


@dataclass(frozen=True)
class ArenaSettings(_Checked):
    """The `arena` method's settings (`[arena]`; its prompt and decoding are `reader.arena.prompt.ArenaConfig`)."""

    answer_span: bool = False  # the final answer is the shared reader's ([answer]) over the references ARENA selected

    RULES: ClassVar[Rules] = {"answer_span": FLAG}


# PromotionConfig: which methods can evaluate an adapter (the agent's policy, or the fixed-k pipeline's reader),
# which per-question score decides, and what a candidate is compared with
PROMOTION_METHODS: tuple[str, ...] = ("agent", "fixed-k")
PROMOTION_METRICS: tuple[str, ...] = ("f1", "em")
PROMOTION_AGAINST: tuple[str, ...] = ("live", "base")


@dataclass(frozen=True)
class PromotionConfig(_Checked):
    """Gated promotion (evorag_core/promotion/, docs/promotion.md): a new adapter is evaluated against the live one
    on a fixed held-out slice, and goes live only if the rule (`promotion.rule.decide`) passes."""

    evaluate: bool = True  # a round that registers an adapter queues its evaluation (false: only on request)
    auto: bool = True  # an adapter whose evaluation passes is activated (hot swap); false: it waits, staged
    data: str = "data/demo/demo.jsonl"  # the dev data file (relative paths: to the repository)
    questions: str = ""  # "START:STOP" slice of its questions ("" = all of them)
    method: str = "agent"  # one of PROMOTION_METHODS
    metric: str = "f1"  # one of PROMOTION_METRICS: the per-question score the rule reads
    against: str = "live"  # one of PROMOTION_AGAINST: the live adapter (the base model when none is live), or the base
    alpha: float = 0.05  # the paired bootstrap's p must be below this for "better"
    min_n: int = 30  # fewer evaluated questions than this: no verdict (the adapter stays staged)
    resamples: int = 10_000  # paired-bootstrap resamples
    workers: int = 1  # evaluation processes (each loads the model once; evaluation/pool.py)

    RULES: ClassVar[Rules] = {
        "evaluate": FLAG, "auto": FLAG, "data": TEXT,
        "questions": matching(r"(\d*:\d+)?", "empty or START:STOP (e.g. 0:100)"),
        "method": one_of(PROMOTION_METHODS), "metric": one_of(PROMOTION_METRICS),
        "against": one_of(PROMOTION_AGAINST), "alpha": within(0.0001, 0.5), "min_n": POSITIVE,
        "resamples": at_least(100), "workers": POSITIVE,
    }

    @property
    def question_slice(self) -> tuple[int, int | None]:
        """(start, stop) of `questions`; stop None = to the end."""
        if not self.questions:
            return 0, None
        start, _, stop = self.questions.partition(":")
        return int(start or 0), int(stop)


@dataclass(frozen=True)
class Config:
    env: EnvConfig = field(default_factory=EnvConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    preference: PreferenceConfig = field(default_factory=PreferenceConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    studio: StudioConfig = field(default_factory=StudioConfig)
    annotate: AnnotateConfig = field(default_factory=AnnotateConfig)
    dynakrag: DynaKragConfig = field(default_factory=DynaKragConfig)
    r2ag: R2agConfig = field(default_factory=R2agConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    arena: ArenaSettings = field(default_factory=ArenaSettings)
    promotion: PromotionConfig = field(default_factory=PromotionConfig)


def default_config_path() -> Path:
    return REPO_ROOT / "configs" / "default.toml"


def home_dir() -> Path:
    """EVORAG_HOME (default ./.evorag): indexes, caches, the database and adapters live here."""
    return Path(os.environ.get("EVORAG_HOME", ".evorag")).resolve()


def cache_dir(home: Path) -> Path:
    """Where derived, content-addressed files live: the dequantized embedded model (`models/`), passage embeddings
    (`embeddings/`) and retrieval indexes (`indexes/`). EVORAG_CACHE_DIR when set, so that several homes (projects, a
    test run's many) build each once; else the home itself. Every entry is keyed by its inputs' hash and written to a
    temporary name and renamed, so homes and processes can share the folder."""
    shared = os.environ.get("EVORAG_CACHE_DIR")
    return Path(shared).expanduser().resolve() if shared else Path(home)


def db_url() -> str:
    """EVORAG_DB_URL, default a SQLite file in the home folder."""
    return os.environ.get("EVORAG_DB_URL") or f"sqlite:///{home_dir() / 'evorag.db'}"


def _coerce(value: Any, typ: Any, where: str) -> Any:
    origin = get_origin(typ)
    if origin is not None and type(None) in get_args(typ):  # Optional[X]
        if value is None:
            return None
        typ = next(a for a in get_args(typ) if a is not type(None))
    if origin is tuple:  # tuple[str, ...]: a TOML list, or one --set string of os.pathsep-separated items
        items = [v for v in value.split(os.pathsep) if v] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
            raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
        return tuple(items)
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if typ is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if typ is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def _build_section(cls: type, raw: Mapping[str, Any], section: str) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"[{section}] must be a table")
    hints = get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ConfigError(f"unknown key(s) in [{section}]: {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    return cls(**{k: _coerce(v, hints[k], f"{section}.{k}") for k, v in raw.items()})


def config_from_dict(raw: Mapping[str, Any]) -> Config:
    hints = get_type_hints(Config)
    unknown = sorted(set(raw) - set(hints))
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(unknown)} (known: {', '.join(sorted(hints))})")
    return Config(**{name: _build_section(hints[name], raw[name], name) for name in raw})


def apply_overrides(cfg: Config, overrides: Mapping[str, Any]) -> Config:
    """Apply `{"section.key": value}` overrides; unknown names raise ConfigError."""
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        if not key or not hasattr(cfg, section) or not is_dataclass(getattr(cfg, section)):
            raise ConfigError(f"override {dotted!r}: expected SECTION.KEY with a known section")
        sub = getattr(cfg, section)
        hints = get_type_hints(type(sub))
        if key not in hints:
            raise ConfigError(f"override {dotted!r}: unknown key {key!r} in [{section}]")
        sub = replace(sub, **{key: _coerce(value, hints[key], dotted)})
        cfg = replace(cfg, **{section: sub})
    return cfg


def load_config(path: Path | str | None = None, overrides: Mapping[str, Any] | None = None) -> Config:
    path = Path(path) if path is not None else default_config_path()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    cfg = config_from_dict(raw)
    return apply_overrides(cfg, overrides or {})


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def overrides_from(cfg: Config, base: Config | None = None) -> dict[str, str]:
    """`{"section.key": text}` of every value where `cfg` differs from `base` (default: `load_config()`), as `--set`
    takes them: `apply_overrides(base, overrides_from(cfg, base)) == cfg`. How a process started by another (the
    studio's worker) gets the same settings as its parent, `--config` file and `--set` values included."""
    base = base if base is not None else load_config()
    out: dict[str, str] = {}
    for name in get_type_hints(Config):
        mine, theirs = dataclasses.asdict(getattr(cfg, name)), dataclasses.asdict(getattr(base, name))
        for key, value in mine.items():
            if value == theirs[key]:
                continue
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, tuple):
                text = os.pathsep.join(value)
            else:
                text = repr(value) if isinstance(value, float) else str(value)
            out[f"{name}.{key}"] = text
    return out
