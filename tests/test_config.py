"""Configuration: defaults mirror configs/default.toml; typos fail loudly; overrides coerce types; every value is
checked against its section's rule when the config loads (file, `--set`, or code), not when first used."""
import math
from dataclasses import fields
from typing import get_type_hints

import pytest

from evorag_core.cli.main import main as cli_main
from evorag_core.config import (
    Config,
    DynaKragConfig,
    EnvConfig,
    PolicyConfig,
    RewardConfig,
    apply_overrides,
    load_config,
)
from evorag_core.errors import ConfigError

SECTIONS = list(get_type_hints(Config).values())
RUN = ["run", "--question", "demo-001", "--policy", "oracle"]  # a demo episode without a language model


def test_default_toml_equals_dataclass_defaults():
    assert load_config() == Config()


def test_unknown_key_and_section(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("[env]\nt_maxx = 3\n")
    with pytest.raises(ConfigError, match="t_maxx"):
        load_config(bad)
    bad.write_text("[envv]\nt_max = 3\n")
    with pytest.raises(ConfigError, match="envv"):
        load_config(bad)
    bad.write_text("[env]\nt_max = 'many'\n")
    with pytest.raises(ConfigError, match="env.t_max"):
        load_config(bad)


def test_overrides():
    cfg = apply_overrides(Config(), {"env.t_max": "7", "reward.stage": "refinement", "train.max_attempts": "3"})
    assert cfg.env.t_max == 7 and cfg.reward.stage == "refinement" and cfg.train.max_attempts == 3
    with pytest.raises(ConfigError):
        apply_overrides(Config(), {"env.nope": 1})
    with pytest.raises(ConfigError):
        apply_overrides(Config(), {"t_max": 1})


def test_crash_recovery_is_on_by_default():
    """A round gets two attempts unless the config says otherwise; 0 attempts would never run it."""
    assert load_config().train.max_attempts == 2
    with pytest.raises(ConfigError, match=r"train.max_attempts must be >= 1, got 0"):
        load_config(overrides={"train.max_attempts": "0"})


# key, TOML literal, the words the error must carry (the key, the value, what is allowed)
BAD_VALUES = [
    ("env.t_max", "-5", r"env\.t_max must be >= 1, got -5"),
    ("env.top_k", "0", r"env\.top_k must be >= 1, got 0"),
    ("env.corpus", "'pooled-ish'", r"env\.corpus must be one of pooled, per-question, got 'pooled-ish'"),
    ("reward.stage", "'bogus'", r"reward\.stage must be one of discovery, refinement, got 'bogus'"),
    ("reward.schedule", "'linear'", r"reward\.schedule must be one of time-dynamic, two-stage, no-reward"),
    ("reward.preset", "'best4'", r"reward\.preset must be one of full, best2"),
    ("reward.redundancy_threshold", "nan", r"reward\.redundancy_threshold must be a finite number, got nan"),
    ("reward.redundancy_threshold", "1.5", r"reward\.redundancy_threshold must be in \[-1, 1\], got 1.5"),
    ("reward.act_progress", "inf", r"reward\.act_progress must be a finite number, got inf"),
    ("reward.act_progress", "-0.1", r"reward\.act_progress must be in \[0, 1\], got -0.1"),
    ("curriculum.ema_alpha", "0.0", r"curriculum\.ema_alpha must be in \(0, 1\], got 0.0"),
    ("retrieval.bm25_backend", "'lucene'", r"retrieval\.bm25_backend must be one of bm25s, rank-bm25"),
    ("retrieval.stopwords", "'fr'", r"retrieval\.stopwords must be one of en, en_plus, none, got 'fr'"),
    ("retrieval.dense_model", "' '", r"retrieval\.dense_model must be a non-empty string"),
    ("policy.answer_with", "'oracle'", r"policy\.answer_with must be one of reader, policy, arena, got 'oracle'"),
    ("policy.prefill_dtype", "'float16'", r"policy\.prefill_dtype must be one of auto, float32, bfloat16"),
    ("policy.backend", "'tgi'", r"policy\.backend must be one of transformers, vllm, openai, got 'tgi'"),
    ("policy.base_url", "'localhost:8000'", r"policy\.base_url must be empty or an http\(s\):// URL"),
    ("policy.api_key_env", "'my key'", r"policy\.api_key_env must be an environment variable name"),
    ("policy.request_timeout_s", "0", r"policy\.request_timeout_s must be > 0, got 0"),
    ("policy.device", "'gpu'", r"policy\.device must be auto, cpu, mps, cuda or cuda:N, got 'gpu'"),
    ("policy.temperature", "-0.5", r"policy\.temperature must be >= 0, got -0.5"),
    ("judge.threshold", "1.2", r"judge\.threshold must be in \[0, 1\], got 1.2"),
    ("rollout.siblings", "1", r"rollout\.siblings must be >= 2, got 1"),
    ("preference.holdout", "1.0", r"preference\.holdout must be in \(0, 1\), got 1.0"),
    ("preference.pooling", "'max'", r"preference\.pooling must be one of mean, last, probe, got 'max'"),
    ("train.lr", "0.0", r"train\.lr must be in \(0, 0.1\], got 0.0"),
    ("train.lr", "5.0", r"train\.lr must be in \(0, 0.1\], got 5.0"),
    ("train.lr", "-inf", r"train\.lr must be a finite number, got -inf"),
    ("train.kl", "'k1'", r"train\.kl must be one of k2, k3, got 'k1'"),
    ("train.lora_dropout", "1.0", r"train\.lora_dropout must be in \[0, 1\), got 1.0"),
    ("studio.port", "70000", r"studio\.port must be in \[1, 65535\], got 70000"),
    ("dynakrag.controller", "'random'", r"dynakrag\.controller must be one of learned, uniform, got 'random'"),
    ("dynakrag.gap_source", "'oracle'", r"dynakrag\.gap_source must be one of uncovered, lm, got 'oracle'"),
    ("dynakrag.initial_retriever", "'splade'", r"dynakrag\.initial_retriever must be one of bm25, dense, rrf"),
    ("r2ag.steering", "'oracle'", r"r2ag\.steering must be one of lm, scripted, got 'oracle'"),
    ("r2ag.max_frontier", "0", r"r2ag\.max_frontier must be >= 1, got 0"),
]


@pytest.mark.parametrize("key, literal, message", BAD_VALUES, ids=[f"{k}={v}" for k, v, _ in BAD_VALUES])
def test_bad_value_in_the_file_fails_at_load(tmp_path, key, literal, message):
    """The same rule fires for the TOML file and for an override (the value as the CLI passes it: a string)."""
    section, name = key.split(".")
    path = tmp_path / "c.toml"
    path.write_text(f"[{section}]\n{name} = {literal}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)
    with pytest.raises(ConfigError, match=message):
        load_config(overrides={key: literal.strip("'")})


def test_bad_values_built_in_code_are_refused_too():
    """A section built in code (or by dataclasses.replace) is checked the same way."""
    with pytest.raises(ConfigError, match=r"env\.t_max must be >= 1, got -5"):
        EnvConfig(t_max=-5)
    with pytest.raises(ConfigError, match=r"reward\.redundancy_threshold must be a finite number, got nan"):
        RewardConfig(redundancy_threshold=math.nan)
    with pytest.raises(ConfigError, match=r"policy\.max_searches must be an integer, got 2.5"):
        PolicyConfig(max_searches=2.5)
    with pytest.raises(ConfigError, match=r"dynakrag\.sufficiency must be true or false, got 1"):
        DynaKragConfig(sufficiency=1)


def test_cli_set_overrides_fail_before_any_work(tmp_path, capsys):
    """`--set` values are checked when the command reads its config: exit 2 with the message, nothing queued."""
    url = f"sqlite:///{tmp_path / 'evorag.db'}"
    assert cli_main(["train", "--objective", "dpo", "--home", str(tmp_path), "--db", url,
                     "--set", "reward.stage=bogus"]) == 2
    assert "reward.stage must be one of discovery, refinement, got 'bogus'" in capsys.readouterr().err
    assert not (tmp_path / "evorag.db").exists()
    assert cli_main([*RUN, "--home", str(tmp_path), "--set", "env.t_max=-5"]) == 2
    assert "env.t_max must be >= 1, got -5" in capsys.readouterr().err
    assert cli_main([*RUN, "--home", str(tmp_path), "--set", "reward.redundancy_threshold=nan"]) == 2
    assert "reward.redundancy_threshold must be a finite number, got nan" in capsys.readouterr().err


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.__name__)
def test_every_setting_has_a_rule(section):
    """A new field needs a rule in its section's RULES (FLAG for a bool); the defaults obey every rule."""
    assert {f.name for f in fields(section)} == set(section.RULES)
    section()  # the defaults pass their own rules


def test_choice_rules_match_the_modules_that_use_them():
    """The choices live beside the settings (config must stay import-light); the modules that dispatch on them
    must accept exactly these."""
    from evorag_core.data.corpus import CORPUS_MODES
    from evorag_core.retrieval.embedding import DTYPES
    from evorag_core.methods.r2ag.method import STEERINGS
    from evorag_core.lm.loading import _DTYPES
    from evorag_core.preference import POOLINGS
    from evorag_core.retrieval.bm25 import BM25_BACKENDS, BM25_METHODS
    from evorag_core.retrieval.tokenize import STOPWORD_LISTS
    from evorag_core.env.scheduler import PRESETS, SCHEDULES, STAGES
    from training.kl import KL_ESTIMATORS
    from evorag_core.methods.registry import METHODS
    from training.job import EVALUATE
    from training.rounds import ROUND_MODULES

    cfg = Config()
    pairs = [
        (cfg.env, "corpus", CORPUS_MODES), (cfg.reward, "stage", STAGES), (cfg.reward, "schedule", SCHEDULES),
        (cfg.reward, "preset", tuple(PRESETS)), (cfg.retrieval, "bm25_backend", BM25_BACKENDS),
        (cfg.retrieval, "bm25_method", BM25_METHODS), (cfg.retrieval, "stopwords", STOPWORD_LISTS),
        (cfg.retrieval, "dtype", DTYPES), (cfg.policy, "dtype", tuple(_DTYPES)),
        (cfg.preference, "pooling", POOLINGS), (cfg.train, "kl", tuple(KL_ESTIMATORS)),
        (cfg.train, "objective", (*(m for m in ROUND_MODULES if m != EVALUATE), "dynakrag")),
        (cfg.r2ag, "steering", STEERINGS),
    ]
    assert set(type(cfg.promotion).RULES["method"].choices) <= set(METHODS)  # the gate evaluates with a method
    for section, name, used in pairs:
        assert set(type(section).RULES[name].choices) == set(used), name


def test_a_config_travels_to_a_child_process_as_set_overrides(tmp_path):
    """The studio starts its worker with `overrides_from(cfg)`: every value that differs from the default file, as
    `--set` text, rebuilds the same config (tuples, booleans, floats and strings alike); the studio's worker command
    carries them (its --model among them)."""
    from app.common.services import Services
    from tests.paths import DEMO
    from evorag_core.config import overrides_from

    cfg = apply_overrides(load_config(), {"policy.model": "/models/mine", "train.lr": 1e-3, "promotion.auto": False,
                                          "studio.data_roots": "/a:/b", "env.t_max": 7})
    sets = overrides_from(cfg)
    assert sets["policy.model"] == "/models/mine" and sets["promotion.auto"] == "false"
    assert apply_overrides(load_config(), sets) == cfg and overrides_from(load_config()) == {}
    svc = Services(cfg, tmp_path, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    try:
        argv = svc.worker_argv()
    finally:
        svc.close()
    assert argv[argv.index("--set", argv.index("worker")):].count("--set") == len(sets)
    assert "policy.model=/models/mine" in argv and "train.lr=0.001" in argv
