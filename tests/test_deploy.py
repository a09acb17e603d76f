"""deploy/compose.yaml, docs/deploy.md and the accelerate configs, checked without Docker (there is none here, so the
compose file was never run): the compose file parses as YAML and names the services the docs promise; every command
in it and every `evorag` / `accelerate launch` command line in docs/deploy.md is accepted by the CLI's own argument
parser (and accelerate's), with its `--set` keys known to the config; its build arguments are the Dockerfile's and
its extras the project's; the accelerate configs load with accelerate's own config reader.
"""
from __future__ import annotations

import re
import shlex
import tomllib

import pytest
import yaml

from tests.paths import REPO
from evorag_core.cli.main import build_parser
from evorag_core.cli.common import config_from_args

COMPOSE = REPO / "deploy" / "compose.yaml"
DOC = REPO / "docs" / "deploy.md"
_DEFAULTED = re.compile(r"\$\{(\w+)(?::-([^}]*)|:\?[^}]*)?\}")


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def _interpolate(text: str) -> str:
    """Compose's ${VAR:-default} -> default, ${VAR:?message} -> VAR (a value must be set there)."""
    return _DEFAULTED.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(1), text)


def _check_evorag(argv: list[str]) -> None:
    """`evorag ARGS` parses with the CLI's parser, and its --set keys exist in the config."""
    args = build_parser().parse_args(argv)
    if hasattr(args, "overrides"):
        config_from_args(args)  # the CLI's own reading of --config/--set: an unknown key raises ConfigError


def _check_accelerate(argv: list[str]) -> None:
    """`accelerate launch ... -m training.worker ARGS`: accelerate's parser takes it, its config file is in the
    repository (the image's working directory), and ARGS parse as `evorag worker ARGS`."""
    from accelerate.commands.launch import launch_command_parser

    assert argv[:2] == ["accelerate", "launch"], argv
    launch = launch_command_parser().parse_args(argv[2:])
    assert launch.module and launch.training_script == "training.worker", argv
    if launch.config_file:
        assert (REPO / launch.config_file).is_file(), launch.config_file
    _check_evorag(["worker", *launch.training_script_args])


def _check(argv: list[str]) -> None:
    if argv[0] == "evorag":
        _check_evorag(argv[1:])
    else:
        _check_accelerate(argv)


def test_compose_has_the_services_and_the_gpu_profile():
    services = _compose()["services"]
    default = {name for name, s in services.items() if not s.get("profiles")}
    gpu = {name for name, s in services.items() if "gpu" in (s.get("profiles") or [])}
    assert default == {"postgres", "studio", "worker"} and gpu == {"vllm", "worker-gpu"}
    for name in ("studio", "worker", "worker-gpu"):
        s = services[name]
        assert s["environment"]["EVORAG_DB_URL"].startswith("postgresql://evorag:")
        assert "@postgres:5432/evorag" in s["environment"]["EVORAG_DB_URL"]
        assert s["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "evorag-data:/data" in s["volumes"] and s["environment"]["EVORAG_HOME"] == "/data/evorag"
    assert "evorag-data:/data" in services["vllm"]["volumes"]  # adapters load from the paths the store records
    devices = [services[n]["deploy"]["resources"]["reservations"]["devices"][0] for n in ("vllm", "worker-gpu")]
    assert all(d["driver"] == "nvidia" for d in devices) and devices[0]["device_ids"] != devices[1]["device_ids"]
    assert "--enable-lora" in services["vllm"]["command"]
    assert services["vllm"]["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    studio = services["studio"]
    assert "--no-worker" in studio["command"] and studio["secrets"][0]["target"] in studio["command"]


def test_compose_commands_parse_with_the_cli():
    services = _compose()["services"]
    checked = []
    for name, s in services.items():
        command = s.get("command")
        if command and command[0] in ("evorag", "accelerate"):
            _check([_interpolate(part) for part in command])
            checked.append(name)
    assert sorted(checked) == ["studio", "worker", "worker-gpu"]


def test_compose_build_arguments_and_extras_exist():
    """Each build argument is an ARG of the Dockerfile; each extra named in EXTRAS is one of pyproject's."""
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    declared = set(re.findall(r"^ARG (\w+)", dockerfile, flags=re.M))
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"])
    for name, s in _compose()["services"].items():
        build = s.get("build")
        if not build:
            continue
        assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == REPO / "Dockerfile"
        assert set(build.get("args", {})) <= declared, name
        named = build.get("args", {}).get("EXTRAS", "").strip("[]")
        assert {e for e in named.split(",") if e} <= extras, name


def _doc_commands() -> list[list[str]]:
    """The `evorag ...` and `accelerate launch ...` command lines of docs/deploy.md's code blocks (continuations
    joined; shell prefixes such as `VAR=value` and trailing `&` dropped)."""
    text = DOC.read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            match = re.search(r"(?:^|do |; )(?:\w+=\S+ )*((?:evorag|accelerate launch) .*?)(?: &| ;|$)", line)
            if match:
                out.append(shlex.split(match.group(1).replace("$i", "0").replace("N -m", "2 -m")))
    return out


def test_the_deploy_docs_commands_parse_with_the_cli():
    """Every studio/worker/users/train/rollout/accelerate command line of docs/deploy.md parses."""
    commands = _doc_commands()
    kinds = {argv[1] for argv in commands}
    assert {"studio", "users", "launch", "rollout"} <= kinds, kinds
    for argv in commands:
        _check(argv)
    assert "not run" in DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["ddp.yaml", "zero2.yaml"])
def test_the_accelerate_configs_load(name):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(REPO / "training" / "accelerate" / name))
    assert config.num_machines == 1 and str(config.distributed_type).endswith(
        {"ddp.yaml": "MULTI_GPU", "zero2.yaml": "DEEPSPEED"}[name])
