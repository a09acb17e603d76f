"""A new objective is one folder under training/objectives/ and one line in the registry (evorag_core/objectives.py):
every registry entry resolves to its folder's round (and config, when it has settings of its own), every folder is
some entry's, and no other module of the library, the trainer or the studio lists objectives by name."""
from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

from evorag_core.objectives import OBJECTIVES

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ROOT / "training" / "objectives"


def _folder(dotted: str) -> str:
    """`training.objectives.<folder>.<module>[.<Class>]` -> folder."""
    parts = dotted.split(".")
    assert parts[:2] == ["training", "objectives"], dotted
    return parts[2]


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_each_entry_is_a_folder_with_its_round_and_config(name):
    objective = OBJECTIVES[name]
    assert objective.module == f"training.objectives.{_folder(objective.module)}.round"
    assert callable(importlib.import_module(objective.module).run)
    assert (objective.config is None) == (objective.section is None), name  # nested settings <-> a config class
    if objective.config is not None:
        module, _, cls_name = objective.config.rpartition(".")
        assert module == f"training.objectives.{_folder(objective.module)}.config"
        cls = getattr(importlib.import_module(module), cls_name)
        assert dataclasses.is_dataclass(cls) and callable(cls.from_job)
        cls()  # its defaults are valid settings


def test_every_folder_belongs_to_one_entry():
    folders = {p.name for p in FOLDERS.iterdir() if (p / "__init__.py").is_file()}
    named = [_folder(o.module) for o in OBJECTIVES.values()]
    assert sorted(named) == sorted(folders) and len(set(named)) == len(named)


def test_only_the_registry_lists_objectives():
    """No literal tuple, list, set or dict outside the registry names two or more objectives (one name, as in an
    objective's own round or a single special case, is fine)."""
    names = set(OBJECTIVES)
    found = []
    for package in ("evorag_core", "training", "app"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "evorag_core" / "objectives.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
                if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) or not items:
                    continue
                listed = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
                if len(listed) >= 2:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {sorted(listed)}")
    assert not found, "\n".join(found)
