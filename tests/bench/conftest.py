"""The benches' end-to-end tests run on a tiny random Llama whose vocabulary is built from the demo data."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.paths import DEMO


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    rows = [json.loads(line) for line in DEMO.open(encoding="utf-8")]
    texts = [r["question"] for r in rows] + [f"{p['title']}: {p['text']}" for r in rows for p in r["passages"]]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts, vocab_size=2048)
