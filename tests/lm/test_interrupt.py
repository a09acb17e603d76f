"""`interruptible`: a generation stops before its next token once the caller's event is set (the studio's Stop),
raising GenerationInterrupted, and the backend is usable again at once; a backend without the hook runs to the end."""
from __future__ import annotations

import threading

import pytest
import torch

from evorag_core.config import PolicyConfig
from evorag_core.errors import GenerationInterrupted
from evorag_core.lm.base import interruptible


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    from evorag_core.lm.hf_backend import TransformersBackend
    from tests.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    tiny = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    return TransformersBackend(PolicyConfig(model=str(tiny), device="cpu", threads=1), tmp_path_factory.mktemp("home"))


def test_a_set_event_stops_the_decode_and_the_next_call_is_unaffected(backend):
    prompt = backend.chat_prompt("You write.", "Write a long story.")
    expected = backend.generate(prompt, 12, temperature=0.0, ignore_eos=True)[0]
    stop = threading.Event()
    stop.set()
    before = backend.tokens_generated
    with interruptible(backend, stop), pytest.raises(GenerationInterrupted):
        backend.generate(prompt, 400, temperature=0.0, ignore_eos=True)
    assert backend.tokens_generated == before  # nothing of the stopped call is counted or returned
    again = backend.generate(prompt, 12, temperature=0.0, ignore_eos=True)[0]  # outside: no interrupt
    assert again.token_ids == expected.token_ids


def test_an_event_set_mid_decode_stops_it_early(backend):
    """The event is set from another thread after a short while: the 1800-token call (the model allows 2048
    positions) ends long before its end."""
    prompt = backend.chat_prompt("You write.", "Write a very long story.")
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    with interruptible(backend, stop), pytest.raises(GenerationInterrupted):
        backend.generate(prompt, 1800, temperature=0.0, ignore_eos=True)
    timer.join()


def test_a_backend_without_the_hook_runs_calls_to_their_end():
    class Plain:
        pass

    with interruptible(Plain(), threading.Event()):
        pass
