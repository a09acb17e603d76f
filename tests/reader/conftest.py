"""The reader tests' tiny random model (a few hundred kilobytes, built from the tests' own passages)."""
from __future__ import annotations

import pytest
import torch

from evorag_core.config import PolicyConfig
from evorag_core.lm.hf_backend import TransformersBackend
from tests.reader.texts import PASSAGES, QUESTIONS


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    from tests.tiny_model import build_tiny_model

    texts = QUESTIONS + [f"{p.title}: {p.text}" for p in PASSAGES]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", texts, vocab_size=1024)


@pytest.fixture(scope="module")
def tiny_backend(tiny_folder, tmp_path_factory):
    torch.set_num_threads(1)
    return TransformersBackend(PolicyConfig(model=str(tiny_folder), device="cpu"), tmp_path_factory.mktemp("home"))
