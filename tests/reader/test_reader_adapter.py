"""`answer.adapter`: the reader answers with LoRA weights of its own on the shared backend, and the adapter that was
active before (the policy's, or none) is active again afterwards. Tiny random model and random adapters."""
from __future__ import annotations

import pytest

from evorag_core.config import AnswerConfig, PolicyConfig
from evorag_core.env.state import AgentView, Hop
from evorag_core.errors import AdapterError
from evorag_core.policy.agent import LMPolicy, reader_passages
from evorag_core.reader.answers import Reader
from tests.lora_adapters import random_adapter
from tests.reader.texts import MIRROW, PASSAGES, QUESTIONS, TRAVINE


@pytest.fixture(scope="module")
def adapters(tiny_folder, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return random_adapter(tiny_folder, root / "reader", 1), random_adapter(tiny_folder, root / "policy", 2)


def _scores(reader: Reader) -> dict[str, float]:
    reader.read(QUESTIONS[0], PASSAGES)
    return dict(reader.span.last_scores)


@pytest.mark.parametrize("mode", ["span", "free"])
def test_the_reader_reads_with_its_adapter_and_restores_the_active_one(tiny_backend, adapters, mode):
    """With answer.adapter the reader's answers (and, in span mode, its candidate scores) are those of the backend
    with that adapter active as the whole model; the policy adapter active before is active after; the adapter is
    loaded once however many readers name it."""
    reader_path, policy_path = adapters
    if "policy" not in tiny_backend.list_adapters():
        tiny_backend.load_adapter("policy", policy_path)
    plain = Reader(tiny_backend, AnswerConfig(mode=mode), 300, 6)
    own = Reader(tiny_backend, AnswerConfig(mode=mode, adapter=str(reader_path)), 300, 6)
    again = Reader(tiny_backend, AnswerConfig(mode=mode, adapter=str(reader_path)), 300, 6)
    assert own.adapter == again.adapter and tiny_backend.list_adapters().count(own.adapter) == 1

    tiny_backend.activate(own.adapter)  # the reference: the reader's adapter as the whole model
    want = plain.read(QUESTIONS[0], PASSAGES)[0]
    want_scores = dict(plain.span.last_scores) if mode == "span" else None
    tiny_backend.activate("policy")
    policy_answer = plain.read(QUESTIONS[0], PASSAGES)[0]

    got = own.read(QUESTIONS[0], PASSAGES)[0]
    assert tiny_backend.active_adapter == "policy"
    assert got.text == want.text
    if mode == "span":
        assert own.span.last_scores == pytest.approx(want_scores, abs=1e-3)
        assert own.span.last_scores != pytest.approx(_scores(plain), abs=1e-3)  # the adapter matters: not a no-op
    tiny_backend.activate(None)
    assert own.answer(QUESTIONS[0], PASSAGES) == want.text and tiny_backend.active_adapter is None
    assert policy_answer.kind in ("span", "yes_no", "refusal", "free")


def test_a_missing_or_corrupt_reader_adapter_is_a_clear_error(tiny_backend, adapters, tmp_path):
    with pytest.raises(AdapterError):
        Reader(tiny_backend, AnswerConfig(adapter=str(tmp_path / "nowhere")))
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in adapters[0].iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    (bad / "adapter_model.safetensors").write_bytes(b"\x00garbage" * 100)
    before = tiny_backend.active_adapter
    with pytest.raises(AdapterError):
        Reader(tiny_backend, AnswerConfig(adapter=str(bad)))
    assert tiny_backend.active_adapter == before


def test_the_agent_answers_with_the_reader_adapter_and_decides_with_the_policy_one(tiny_backend, adapters):
    """The agent's ANSWERs are read with the reader's adapter (the candidate scores behind them are those of the
    reader adapter as the whole model, not the policy's); its action distribution is the policy's (here the base
    model's: the same as an agent without a reader adapter), and the policy's weights are active afterwards."""
    reader_path, _ = adapters
    cfg = PolicyConfig(model="tiny", max_answer_tokens=6)
    view = AgentView(QUESTIONS[0], (Hop("Ansel Travine", (TRAVINE, MIRROW)),), (), 5, 5)  # last step: answer
    tiny_backend.activate(None)
    plain = LMPolicy(tiny_backend, cfg, AnswerConfig())
    own = LMPolicy(tiny_backend, cfg, AnswerConfig(adapter=str(reader_path)))
    a = plain.candidates(view, k=12, temperature=1.0, seed=5)
    b = own.candidates(view, k=12, temperature=1.0, seed=5)
    assert tiny_backend.active_adapter is None
    assert [d.choice_probs for d in a] == [pytest.approx(d.choice_probs, abs=1e-4) for d in b]
    assert [d.completion.split(":")[0] for d in a] == [d.completion.split(":")[0] for d in b]
    answers = [d for d in b if d.completion.startswith("ANSWER")]
    assert answers
    policy_scores = dict(plain.reader.span.last_scores)
    agent_scores = dict(own.reader.span.last_scores)
    tiny_backend.activate(own.reader.adapter)
    plain.reader.read(view.question, reader_passages(view, cfg.reader_passages))  # the reader adapter as the
    reference = dict(plain.reader.span.last_scores)  # whole model, on the passages the agent read
    tiny_backend.activate(None)
    assert agent_scores == pytest.approx(reference, abs=1e-3)
    assert agent_scores != pytest.approx(policy_scores, abs=1e-3)
    for d in answers:  # each answer's log-prob is scored under the agent prompt with the policy's weights
        assert d.logprob == pytest.approx(tiny_backend.sequence_logprob(d.prompt, d.completion), abs=1e-3)
