"""The package boundaries of issue #23, checked with import-linter (contracts in pyproject.toml): the library outside
`cli/` imports neither `training` nor `app`, the trainer does not import the studio, no import cycles between sibling
packages or modules, and the library's packages form the pipeline's layers."""
from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_library_contract_lists_every_package_but_the_cli():
    """A new package of evorag_core is covered by "imports neither the trainer nor the studio" only if it is listed;
    the list must name every package and module of the library but cli/."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    listed = set(next(c for c in contracts if c["forbidden_modules"] == ["training", "app"])["source_modules"])
    pkg = importlib.import_module("evorag_core")
    present = {f"evorag_core.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)} - {"evorag_core.cli"}
    assert present <= listed, f"not in the contract: {sorted(present - listed)}"


def test_import_contracts_are_kept():
    out = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
                          "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    assert "0 broken" in report and "BROKEN" not in report, report


@pytest.mark.parametrize("package", ["evorag_core", "training", "app"])
def test_every_module_imports_on_its_own(package):
    """Every module of the package imports (a moved module, a stale import path or a missing dependency fails here
    even when no other test loads that module)."""
    pkg = importlib.import_module(package)
    failures = []
    for info in pkgutil.walk_packages(pkg.__path__, f"{package}."):
        if ".migrations." in info.name:  # alembic scripts, run by `store.migrate`, not importable on their own
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:  # report every module that fails, not just the first
            failures.append(f"{info.name}: {exc!r}")
    assert not failures, "\n".join(failures)


def test_the_public_api_resolves_and_import_stays_light():
    """Every name in `evorag_core.__all__` is defined where the package says, and `import evorag_core` alone loads
    neither torch nor any package module (each name is imported on first use)."""
    code = ("import sys, evorag_core; "
            "heavy = sorted(m for m in ('torch', 'transformers', 'gradio', 'evorag_core.env', 'evorag_core.lm') "
            "if m in sys.modules); print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    import evorag_core

    missing = [name for name in evorag_core.__all__ if getattr(evorag_core, name, None) is None]
    assert not missing, missing
    with pytest.raises(AttributeError):
        evorag_core.no_such_name  # noqa: B018


def test_the_command_line_starts_without_torch_or_peft():
    """Building `evorag`'s parser imports every command module; none may import torch, transformers or peft at the
    top (peft alone costs ~4 s of CPU: every command, worker and studio start paid it, `evorag --help` took 5 s).
    They are imported where a command uses them."""
    code = ("import sys; from evorag_core.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'transformers', 'peft', 'gradio', 'sentence_transformers') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_tab_contract_lists_every_tab():
    """A new tab package of the studio is covered by "the tabs do not import each other" only if it is listed."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    listed = set(next(c for c in contracts if c["type"] == "independence")["modules"])
    tabs = importlib.import_module("app.tabs")
    present = {f"app.tabs.{m.name}" for m in pkgutil.iter_modules(tabs.__path__) if m.ispkg}
    assert present == listed, f"not in the contract: {sorted(present - listed)}; not a tab: {sorted(listed - present)}"


def test_no_function_of_the_studio_is_longer_than_80_lines():
    """Issue #45: a long `build_tab` is split into one builder per visual section and its event wiring."""
    import ast

    longest = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 80:
                    longest.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not longest, "\n".join(longest)
