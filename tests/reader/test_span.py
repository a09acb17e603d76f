"""Grounded short answers (`evorag_core/reader/span.py`, `answers.Reader`): spans of the passages, yes/no by
calibrated label scores, counted refusals. Fast tests use a tiny random model; the slow one the embedded SmolLM2."""
from __future__ import annotations

import json

import pytest
import torch

from tests.paths import DEMO
from evorag_core.reader.answers import Reader
from evorag_core.config import AnswerConfig, PolicyConfig, apply_overrides, load_config
from evorag_core.errors import ConfigError
from evorag_core.policy.agent import LMPolicy
from evorag_core.lm.hf_backend import TransformersBackend
from evorag_core.reader.span import (SpanReader, either_or, extract_candidates, is_numeric_question, is_yes_no,
                                     span_in_passages)
from evorag_core.env.state import AgentView, Hop
from evorag_core.types import Passage
from tests.reader.texts import MIRROW, PASSAGES, QUESTIONS, TRAVINE

def _in_passage_exactly(span: str, passages) -> bool:
    return any(span in p.title or span in p.text for p in passages)


# -- fast: rules, no model -------------------------------------------------------------------------------------

def test_candidates_are_exact_passage_substrings_and_skip_question_words():
    for q in QUESTIONS:
        cands = extract_candidates(q, PASSAGES, 300)
        assert cands, q
        assert all(_in_passage_exactly(s, PASSAGES) for s, _ in cands)
        assert all(s in (PASSAGES[i].title + PASSAGES[i].text) for s, i in cands)  # the source index is right
    river = [s for s, _ in extract_candidates(QUESTIONS[0], PASSAGES, 300)]
    assert "Sable\nRiver" in river or "Sable River" in river  # whitespace inside the run is the passage's own
    assert not any(s.lower() in ("ansel travine", "travine") for s in river)  # named in the question: dropped
    # case folded when dropping: the question shouts the town's name, the title candidate still goes
    assert "Mirrow" not in [s for s, _ in extract_candidates("IN WHAT YEAR WAS MIRROW FOUNDED?", PASSAGES, 300)]
    # a numeric question keeps the candidates with a digit
    assert is_numeric_question(QUESTIONS[1])
    assert {s for s, _ in extract_candidates(QUESTIONS[1], PASSAGES, 300)} >= {"1402"}
    assert all(any(c.isdigit() for c in s) for s, _ in extract_candidates(QUESTIONS[1], PASSAGES, 300))
    # the cut: text past `chars` is not a candidate
    assert "1402" not in [s for s, _ in extract_candidates(QUESTIONS[1], PASSAGES, 20)]


def test_either_or_and_yes_no_detection():
    spans = ["Arthur's Magazine", "First for Women", "Women", "Magazine"]
    q = "Which magazine was started first, Arthur's Magazine or First for Women?"
    assert either_or(q, spans) == ["Arthur's Magazine", "First for Women"]
    assert either_or("Who wrote it?", spans) == []
    assert is_yes_no("Are Pterostyrax and Dregea both native to Asia?")
    assert is_yes_no("did they meet?")
    assert not is_yes_no("Is Arthur's Magazine or First for Women older?", ["Arthur's Magazine", "First for Women"])
    assert not is_yes_no("Which town is older?")
    a = Passage("a", "Arthur's Magazine", "Arthur's Magazine (1844–1846) was an American literary periodical.")
    b = Passage("b", "First for Women", "First for Women is a woman's magazine published in the USA, started in 1989.")
    assert [s for s, _ in extract_candidates(q, [a, b], 300)] == ["Arthur's Magazine", "First for Women"]


def test_answer_config_is_checked_at_load():
    assert load_config().answer.mode in ("span", "free")
    with pytest.raises(ConfigError, match="answer.mode"):
        apply_overrides(load_config(), {"answer.mode": "sentence"})
    with pytest.raises(ConfigError, match="yes_no_calibration"):
        apply_overrides(load_config(), {"answer.yes_no_calibration": "fitted"})
    with pytest.raises(ConfigError):
        AnswerConfig(max_candidates=0)
    assert apply_overrides(load_config(), {"answer.mode": "free"}).answer.mode == "free"


# -- fast: the tiny model ----------------------------------------------------------------------------------------

def test_span_answers_are_passage_substrings(tiny_backend):
    reader = SpanReader(tiny_backend, AnswerConfig())
    for q in QUESTIONS:
        a = reader.answer(q, PASSAGES)
        assert a.kind == "span" and a.text and _in_passage_exactly(a.text, PASSAGES), (q, a)
        assert a.text in (PASSAGES[a.source].title + PASSAGES[a.source].text)
        assert a.source_pid == PASSAGES[a.source].pid  # the source recorded by pid too (the studio marks it)
        assert span_in_passages(" ".join(a.text.upper().split()), PASSAGES, 300)  # case and whitespace folded
        assert a.score == max(reader.last_scores.values())  # the best-scored candidate
    sampled = reader.read(QUESTIONS[0], PASSAGES, temperature=1.0, n=6, seed=3)
    assert len(sampled) == 6 and all(_in_passage_exactly(a.text, PASSAGES) for a in sampled)
    assert reader.kinds["span"] == len(QUESTIONS) + 6 and not reader.refusals


def test_yes_no_is_the_higher_calibrated_score(tiny_backend):
    """The model's yes/no (`answer.yes_no = "model"`; the evidence decider is tested in test_yes_no.py)."""
    q = "Is Mirrow on the Sable River?"
    for calibration in ("none", "content_free", "learned"):  # "learned": the answer ranker's yes/no model
        ranker = "learned" if calibration == "learned" else "lm"
        calibration = "content_free" if calibration == "learned" else calibration
        reader = SpanReader(tiny_backend, AnswerConfig(yes_no_calibration=calibration, ranker=ranker, yes_no="model"))
        margin = reader.yes_no_margin(q, PASSAGES)
        answer = reader.answer(q, PASSAGES)
        assert answer.text == ("yes" if margin > 0 else "no") and answer.source_pid is None  # no source passage
        # a bias that moves the margin across zero flips the answer, either way
        up = SpanReader(tiny_backend, AnswerConfig(yes_no_calibration=calibration, ranker=ranker, yes_no="model",
                                                   yes_bias=abs(margin) + 1))
        down = SpanReader(tiny_backend, AnswerConfig(yes_no_calibration=calibration, ranker=ranker, yes_no="model",
                                                     yes_bias=-abs(margin) - 1))
        assert up.answer(q, PASSAGES).text == "yes" and down.answer(q, PASSAGES).text == "no"
    raw = SpanReader(tiny_backend, AnswerConfig(yes_no_calibration="none", ranker="lm")).yes_no_margin(q, PASSAGES)
    cal = SpanReader(tiny_backend, AnswerConfig(yes_no_calibration="content_free", ranker="lm"))
    assert cal.yes_no_margin(q, PASSAGES) == pytest.approx(raw - cal._content_free_margin(), abs=1e-4)
    learned = SpanReader(tiny_backend, AnswerConfig())  # the default: the ranker's logistic model of both margins
    expected = learned.ranker.yes_logit(raw, learned._content_free_margin())
    assert learned.yes_no_margin(q, PASSAGES) == pytest.approx(expected, abs=1e-4)


def test_refusals_are_counted_with_their_reason(tiny_backend):
    reader = Reader(tiny_backend, AnswerConfig())
    assert reader.answer(QUESTIONS[0], []) == ""
    assert reader.answer("Where is Mirrow?", [Passage("x", "Mirrow", "Mirrow.")]) == ""  # every span is in the question
    assert dict(reader.span.refusals) == {"no_passages": 1, "no_candidates": 1}
    assert reader.span.kinds["refusal"] == 2


def test_low_confidence_spans_are_refused_with_the_span_withheld(tiny_backend):
    """`answer.min_confidence`: a span's confidence is its softmax probability over the candidates' scores; below
    the threshold the reader refuses ("low_confidence", counted) and keeps the span it withheld; yes/no is never
    refused on confidence; 0 (the default) changes no answer."""
    q = QUESTIONS[0]
    plain = SpanReader(tiny_backend, AnswerConfig())
    given = plain.answer(q, PASSAGES)
    scores = torch.tensor(list(plain.last_scores.values()), dtype=torch.float64)
    assert given.confidence == pytest.approx(float(torch.softmax(scores, 0).max()), abs=1e-9)
    assert 0 < given.confidence <= 1
    below = SpanReader(tiny_backend, AnswerConfig(min_confidence=min(given.confidence + 1e-6, 0.999999)))
    refused = below.answer(q, PASSAGES)
    assert (refused.text, refused.kind, refused.reason) == ("", "refusal", "low_confidence")
    assert refused.withheld == given.text and refused.confidence == pytest.approx(given.confidence)
    assert refused.source is None and refused.source_pid is None  # nothing was given, nothing to mark
    assert dict(below.refusals) == {"low_confidence": 1} and below.kinds["refusal"] == 1
    at = SpanReader(tiny_backend, AnswerConfig(min_confidence=given.confidence - 1e-9))
    assert at.answer(q, PASSAGES).text == given.text  # at or above the threshold: given
    yes_no = below.answer("Is Mirrow on the Sable River?", PASSAGES)
    assert yes_no.kind == "yes_no" and yes_no.text in ("yes", "no") and 0.5 <= yes_no.confidence <= 1
    with pytest.raises(ConfigError, match="min_confidence"):
        apply_overrides(load_config(), {"answer.min_confidence": 1.5})


def test_agent_refuses_when_the_reader_withholds_its_span(tiny_backend):
    """An ANSWER whose span the reader withholds becomes REFUSE (fallback "low_confidence", counted), with the
    span and its confidence on the decision and in the step's info; the studio's step table shows them."""
    from evorag_core.env.actions import Refuse
    from evorag_core.env.episode import StepRecord
    from app.common.policies import _info
    from app.common.views import steps_table
    from evorag_core.env.episode import EpisodeRecord

    view = AgentView(QUESTIONS[0], (Hop("Ansel Travine", (TRAVINE, MIRROW)),), (), 5, 5)
    cfg = PolicyConfig(model="tiny", max_answer_tokens=6)
    strict = LMPolicy(tiny_backend, cfg, AnswerConfig(min_confidence=0.999999))
    decisions = strict.candidates(view, k=12, temperature=1.0, seed=5)
    withheld = [d for d in decisions if d.fallback == "low_confidence"]
    assert withheld and all(isinstance(d.action, Refuse) for d in withheld)
    assert not any(d.completion.startswith("ANSWER") for d in decisions)
    assert strict.fallback_counts["low_confidence"] == len(withheld)
    d = withheld[0]
    assert _in_passage_exactly(d.withheld["span"], PASSAGES) and 0 < d.withheld["confidence"] < 0.999999
    assert d.answer_source is None
    info = _info(d)
    assert info["withheld"] == d.withheld
    def table(step_info):
        step = StepRecord(t=1, action=d.action, passages=(), signals={}, weights={}, reward=0.0, info=step_info)
        return steps_table(EpisodeRecord("e", "q", "demo", QUESTIONS[0], "discovery", "time_dynamic", "full", 5, 5,
                                         steps=(step,)))

    assert f'low confidence ({d.withheld["confidence"]:.2f})' in table(info) and "withheld" in table(info)
    assert "withheld" not in table({})


def test_free_mode_generates_as_before(tiny_backend):
    from evorag_core.reader.prompt import clean_answer, reader_prompt

    free = Reader(tiny_backend, AnswerConfig(mode="free"), 300, 6)
    assert free.span is None
    expected = tiny_backend.generate(reader_prompt(tiny_backend, QUESTIONS[0], PASSAGES, 300), 6, stop=("\n",))[0]
    assert free.answer(QUESTIONS[0], PASSAGES) == clean_answer(expected.text)
    (read,) = free.read(QUESTIONS[0], PASSAGES)
    assert read.text == clean_answer(expected.text) and read.source_pid is None
    assert read.kind == ("free" if read.text else "refusal")


def test_agent_answers_with_passage_spans(tiny_backend):
    """At the last step only ANSWER / REFUSE are allowed; every sampled ANSWER is a span of the reader's passages
    and its log-prob is re-scored under the agent prompt."""
    policy = LMPolicy(tiny_backend, PolicyConfig(model="tiny", max_answer_tokens=6), AnswerConfig())
    view = AgentView(QUESTIONS[0], (Hop("Ansel Travine", (TRAVINE, MIRROW)),), (), 5, 5)
    decisions = policy.candidates(view, k=12, temperature=1.0, seed=5)
    answers = [d for d in decisions if d.completion.startswith("ANSWER")]
    assert answers
    by_pid = {p.pid: p for p in PASSAGES}
    for d in answers:
        assert _in_passage_exactly(d.action.answer, PASSAGES)
        source = by_pid[d.answer_source]  # the span's source passage travels with the decision
        assert " ".join(d.action.answer.split()) in " ".join(f"{source.title} {source.text}".split())
        assert d.logprob == pytest.approx(tiny_backend.sequence_logprob(d.prompt, d.completion), abs=1e-3)


# -- slow: the embedded model on the demo questions ---------------------------------------------------------------

@pytest.mark.slow
def test_embedded_model_answers_demo_questions_with_passage_spans(session_home):
    from evorag_core.data.datasets import load_dataset

    rows = {json.loads(line)["id"]: json.loads(line) for line in DEMO.open(encoding="utf-8")}
    questions = [q for q in load_dataset(DEMO).questions if q.type == "bridge"][:5]
    assert len(questions) == 5
    torch.set_num_threads(1)
    backend = TransformersBackend(PolicyConfig(device="cpu"), session_home)
    reader = Reader(backend, AnswerConfig())
    for q in questions:
        # the gold answer is a span of the question's passages (the demo file's known spans)
        assert span_in_passages(q.answers[0], q.passages, 300), rows[q.id]["answers"]
        answer = reader.answer(q.question, q.passages)
        assert answer and (answer in ("yes", "no") or _in_passage_exactly(answer, q.passages)), (q.question, answer)


def test_a_word_cut_by_the_passage_limit_is_no_candidate():
    """The reader sees 40 characters: "Her best-known role is Paige Matthews" is cut inside "Matthews"; the cut word
    ("Paige Ma") is no candidate, the whole words before it are."""
    from evorag_core.reader.span import extract_candidates

    p = Passage("p", "Rose McGowan", "Her best-known role is Paige Matthews in Charmed.")
    spans = [s for s, _ in extract_candidates("Which role is Rose McGowan best known for?", [p], 30)]
    assert "Paige Ma" not in spans and not any(s.endswith("Ma") for s in spans)
    assert "Paige" in spans
    assert "Paige Matthews" in [s for s, _ in extract_candidates("Which role is Rose McGowan best known for?", [p], 40)]


def test_reversed_passage_order_puts_the_first_passage_nearest_the_question(tiny_backend):
    """`answer.passage_order = "reversed"`: the reader prompt lists the passages last to first (the first one just
    before the question) while the span's source index still counts in the given order."""
    from evorag_core.config import AnswerConfig
    from evorag_core.reader.span import SpanReader, span_prompt

    passages = [Passage("a", "Alpha Town", "Alpha Town lies on the river Wend."),
                Passage("b", "Beta Hill", "Beta Hill rises above the plain.")]
    given = span_prompt(tiny_backend, "Which river?", passages, 300, True)
    shown = span_prompt(tiny_backend, "Which river?", passages, 300, True, "reversed")
    assert given.index("Alpha Town") < given.index("Beta Hill")
    assert shown.index("Beta Hill") < shown.index("Alpha Town") < shown.index("Which river?")
    reader = SpanReader(tiny_backend, AnswerConfig(passage_order="reversed", ranker="lm"))
    assert reader.prompt("Which river?", passages) == shown  # every score of the reader is read under this prompt
    ans = reader.answer("Which river does Alpha Town lie on?", passages)
    assert ans.text and passages[ans.source].text.find(ans.text) >= 0  # the source indexes the given order
    with pytest.raises(Exception, match="passage_order"):
        AnswerConfig(passage_order="shuffled")
