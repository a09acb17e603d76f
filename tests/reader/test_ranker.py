"""The answer ranker (`evorag_core/reader/ranker.py`, `ranker_fit.py`): features computed from the passages, weight
files checked, the conditional-logit fit recovering a known rule, and the span reader ranking by it."""
from __future__ import annotations

import json
import random

import pytest

from evorag_core.config import AnswerConfig, load_config
from evorag_core.errors import ConfigError
from evorag_core.reader.ranker import (FEATURES, CandidateRanker, RankerWeights, YesNoModel, candidate_features,
                                       candidate_type, load_ranker, question_type)
from evorag_core.reader.ranker_fit import RankerExample, YesNoExample, fit_ranker, fit_yes_no
from evorag_core.reader.span import SpanReader, extract_candidates
from evorag_core.types import Passage

MIRROW = Passage("p1", "Mirrow", "Mirrow is a mill town on the Sable River in Velmark Province, founded in 1402.")
TRAVINE = Passage("p2", "Ansel Travine", "Ansel Travine (1821-1893) was an Ostrevian chemist born in Mirrow. He "
                  "invented the Travine lamp.")
OLD = Passage("p3", "Old Bridge", "Old Bridge is a bridge opened in 1750.")
NEW = Passage("p4", "New Bridge", "New Bridge is a bridge opened in 1901.")


def test_question_and_candidate_types():
    assert question_type("Who founded Harwick Polytechnic?", ()) == "who"
    assert question_type("In what year was Mirrow founded?", ()) == "when"
    assert question_type("How many people live in Mirrow?", ()) == "count"
    assert question_type("Which bridge opened first, Old Bridge or New Bridge?", ["Old Bridge", "New Bridge"]) \
        == "either_or"
    assert question_type("Where was Ansel Travine born?", ()) == "where"
    assert candidate_type("12 May 1402") == "date" and candidate_type("1402") == "year"
    assert candidate_type("3,000 people") == "number" and candidate_type("Sable River") == "person"
    assert candidate_type("chemist") == "lower" and candidate_type("Mirrow") == "name"
    assert candidate_type("The Bank of Upper Velmark") == "long_name"


def test_features_of_hand_made_passages():
    q = "On which river is the birthplace of the chemist Ansel Travine?"
    spans = [("Mirrow", 0), ("Sable River", 0), ("Velmark Province", 0)]
    feats = candidate_features(q, [MIRROW, TRAVINE], 300, spans, [-3.0, -2.0, -5.0], [2, 3, 3])
    by = dict(zip([s for s, _ in spans], feats))
    assert by["Mirrow"]["is_title"] == 1.0 and by["Mirrow"]["title_of_src"] == 1.0
    assert by["Sable River"].get("is_title", 0.0) == 0.0
    assert by["Sable River"]["lm_margin"] == 0.0 and by["Mirrow"]["lm_margin"] == -1.0
    assert by["Sable River"]["lm_top"] == 1.0 and by["Velmark Province"]["lm_top"] == pytest.approx(1 / 3)
    assert by["Mirrow"]["n_passages"] > by["Sable River"]["n_passages"]  # Mirrow is named in both passages
    assert by["Sable River"]["src_rank"] == 1.0
    # the question's words (less the candidate's own) in the candidate's sentence and near it
    (sable,) = candidate_features("On which river is the mill town Mirrow?", [MIRROW], 300, [("Sable River", 0)],
                                  [-1.0], [3])
    assert sable["sent_q"] == 1.0 and sable["near_q"] == 1.0  # mill, town, mirrow: all in the sentence
    assert by["Sable River"]["sent_q"] == 0.0  # none of birthplace/chemist/ansel/travine is in its sentence
    assert set().union(*feats) <= set(FEATURES)


def test_either_or_date_comparison_features():
    q = "Which bridge opened first, Old Bridge or New Bridge?"
    spans = [("Old Bridge", 0), ("New Bridge", 1)]
    old, new = candidate_features(q, [OLD, NEW], 300, spans, [-4.0, -3.0], [2, 2], ["Old Bridge", "New Bridge"])
    assert old["opt_earlier"] == 1.0 and new["opt_earlier"] == -1.0  # 1750 < 1901, the question asks "first"
    assert old["opt_first"] == 1.0 and new["opt_first"] == 0.0
    assert old.get("opt_later", 0.0) == 0.0  # the question does not ask "later"


def test_weight_files_are_checked(tmp_path):
    w = RankerWeights({"lm": 1.0, "is_title": -2.0}, YesNoModel(0.5, -0.5, 0.25), {"note": "test"})
    back = RankerWeights.from_json(w.to_json())
    assert back.weights == w.weights and back.yes_no == w.yes_no
    with pytest.raises(ConfigError, match="does not compute"):
        RankerWeights.from_json(json.dumps({"features": {"no_such_feature": 1.0}}))
    with pytest.raises(ConfigError, match="not a ranker weight file"):
        RankerWeights.from_json("[1, 2]")
    with pytest.raises(ConfigError, match="cannot read"):
        load_ranker(tmp_path / "missing.json")
    assert load_ranker().weights.weights  # the packaged weights load and are not empty
    with pytest.raises(ConfigError):
        load_config(None, {"answer.ranker": "oracle"})


def _synthetic(rng: random.Random, n: int) -> list[RankerExample]:
    """Questions whose correct candidate is the one with is_title = 1 and sent_q high; lm is noise."""
    out = []
    for _ in range(n):
        k = rng.randint(3, 6)
        good = rng.randrange(k)
        feats = []
        for j in range(k):
            feats.append({"lm": rng.gauss(0, 1), "is_title": float(j == good or rng.random() < 0.2),
                          "sent_q": (0.8 if j == good else 0.3) + rng.gauss(0, 0.1)})
        out.append(RankerExample(tuple(feats), tuple(j == good for j in range(k))))
    return out


def test_fit_recovers_the_rule_and_ranks_held_out_questions():
    rng = random.Random(0)
    w = fit_ranker(_synthetic(rng, 200), l2=0.1)
    assert w.weights["sent_q"] > 0 and w.weights["is_title"] > 0
    assert abs(w.weights.get("lm", 0.0)) < w.weights["sent_q"]
    ranker = CandidateRanker(w)
    test = _synthetic(rng, 100)
    hits = sum(e.correct[max(range(len(e.correct)), key=ranker.scores(e.features).__getitem__)] for e in test)
    assert hits >= 90
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_ranker([RankerExample(({"lm": 1.0}, {"lm": 0.0}), (False, False))])


def test_yes_no_fit_learns_the_bias():
    # the model's raw margin says "no" by ~2 nats whatever the truth; truth shifts it by +1 for yes
    rng = random.Random(1)
    data = [YesNoExample(-2.0 + (1.0 if yes else 0.0) + rng.gauss(0, 0.3), -2.0, yes)
            for yes in [True, False] * 60]
    model = fit_yes_no(data, l2=0.01)
    right = sum((model.logit(e.raw, e.content_free) > 0) == e.yes for e in data)
    assert right >= 100  # the raw sign alone would say "no" to all: 60 of 120
    with pytest.raises(ValueError):
        fit_yes_no([YesNoExample(0.0, 0.0, True)])


def test_span_reader_ranks_by_the_learned_weights(tiny_backend, tmp_path):
    """A weight file that only values is_title makes the reader answer a passage title; "lm" ranks by log P."""
    q = "On which river is the birthplace of the chemist Ansel Travine?"
    path = tmp_path / "titles.json"
    path.write_text(RankerWeights({"is_title": 5.0, "title_of_src": 5.0}).to_json())
    reader = SpanReader(tiny_backend, AnswerConfig(ranker="learned", ranker_path=str(path)))
    a = reader.answer(q, [MIRROW, TRAVINE])
    titles = {p.title for p in (MIRROW, TRAVINE)}
    assert a.kind == "span" and a.text in titles
    lm = SpanReader(tiny_backend, AnswerConfig(ranker="lm"))
    b = lm.answer(q, [MIRROW, TRAVINE])
    cands = [s for s, _ in extract_candidates(q, [MIRROW, TRAVINE], 300)]
    scores = lm.span_scores(q, [MIRROW, TRAVINE], cands)
    assert b.text == cands[max(range(len(cands)), key=scores.__getitem__)]
    with pytest.raises(ConfigError):
        SpanReader(tiny_backend, AnswerConfig(ranker_path=str(tmp_path / "none.json")))
