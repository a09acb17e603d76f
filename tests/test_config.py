"""Configuration: defaults mirror configs/default.toml; typos fail loudly; overrides coerce types."""
import pytest

from evorag_core.config import Config, apply_overrides, load_config
from evorag_core.errors import ConfigError


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
    cfg = apply_overrides(Config(), {"env.t_max": "7", "reward.stage": "refinement", "train.retry_failed": "true"})
    assert cfg.env.t_max == 7 and cfg.reward.stage == "refinement" and cfg.train.retry_failed is True
    with pytest.raises(ConfigError):
        apply_overrides(Config(), {"env.nope": 1})
    with pytest.raises(ConfigError):
        apply_overrides(Config(), {"t_max": 1})
