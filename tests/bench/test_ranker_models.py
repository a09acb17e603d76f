"""bench.ranker_models: the wh-phrase head noun and its features on hand-made questions, and the cross-validated
comparison on made-up dumped questions where the LM's top candidate is always right (no model is loaded)."""
from __future__ import annotations

import random

import pytest

from bench import ranker_models as rm
from evorag_core.reader.ranker import candidate_features
from evorag_core.types import Passage


@pytest.mark.parametrize("question, head", [
    ("In what 1997 American mystery crime film did Johnny Galecki star?", "film"),
    ("At what venue was the January 2, 2012 game played?", "venue"),
    ("What was the name of the 1996 loose adaptation of Romeo and Juliet?", "adaptation"),
    ("What's the name of the fantasy film starring Sarah Bolger?", "film"),
    ("Which American character actor who starred on Stargate SG-1?", "actor"),
    ("Who directed Jaws?", None),
])
def test_head_noun(question, head):
    assert rm.head_noun(question) == head


def test_head_features_mark_the_span_the_passage_defines_as_the_head():
    row = {"question": "In what 1997 crime film did Johnny Galecki star?",
           "passages": [{"title": "Suicide Kings", "text": "Suicide Kings is a 1997 American crime film. It stars "
                                                           "Johnny Galecki."},
                        {"title": "Jeremy Sisto", "text": "Jeremy Sisto is an American actor."}],
           "candidates": [{"text": "Suicide Kings"}, {"text": "Jeremy Sisto"}]}
    film, actor = rm.head_features(row)
    assert film == {"head_sent": 1.0, "head_def": 1.0, "has_head": 1.0}
    assert actor == {"has_head": 1.0}


def _row(i: int, rng: random.Random) -> dict:
    names = ["Alpha Beta", "Gamma Delta", "Epsilon Zeta"]
    passages = [Passage(f"p{k}", n, f"{n} is a place in a country.") for k, n in enumerate(names)]
    right = rng.randrange(3)
    lm = [-1.0 - rng.random() if k != right else -0.5 for k in range(3)]
    spans = [(n, k) for k, n in enumerate(names)]
    return {"set": "hotpot", "id": f"q{i}", "question": "Which place is it?", "answers": [names[right]],
            "candidates": [{"text": n} for n in names],
            "features": candidate_features("Which place is it?", passages, 300, spans, lm, [3, 3, 3]),
            "correct": [k == right for k in range(3)], "yes_no": {"is": False},
            "passages": [{"title": p.title, "text": p.text} for p in passages]}


def test_cross_validation_ranks_every_model_and_compares_with_linear():
    rng = random.Random(0)
    rows = [_row(i, rng) for i in range(40)]
    for r in rows:
        r["features_head"] = [dict(a, **b) for a, b in zip(r["features"], rm.head_features(r))]
    models = dict(rm.MODELS, gbm=lambda train: rm.fit_gbm(train, max_iter=10),
                  gbm_small=lambda train: rm.fit_gbm(train, max_iter=10, max_depth=3),
                  mlp=lambda train: rm.fit_mlp(train, epochs=20))  # the probe's model classes, fitted briefly
    report = rm.run(rows, models)["all"]
    assert report["n"] == 40 and set(rm.MODELS) <= set(report)
    assert report["linear"]["em"] == 1.0  # the LM's top span is always right: the linear ranker learns that
    assert report["linear_head"]["f1_minus_linear"]["diff"] == pytest.approx(report["linear_head"]["f1"] - 1.0)
