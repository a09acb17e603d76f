"""Fixtures the trainer's tests share: a tiny random Llama whose tokenizer was trained on the demo questions (one per
module; tests/training/test_worker.py keeps its own, built without the demo texts)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.paths import DEMO


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    texts = [json.loads(line)["question"] for line in DEMO.open(encoding="utf-8")][:20]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts)
