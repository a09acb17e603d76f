"""Yes / no from the evidence (`evorag_core/reader/yes_no.py`, `answer.yes_no = "evidence"`) on hand-made passages,
the places it reads (`reader/places.py`), which questions are yes/no (`span.is_yes_no`), and the span reader taking
the decision or falling back to its model."""
from __future__ import annotations

import pytest

from evorag_core.config import AnswerConfig
from evorag_core.metrics import normalize_answer
from evorag_core.reader.places import country_mentions, is_country, language_mentions, state_mentions
from evorag_core.reader.span import SpanReader, is_yes_no
from evorag_core.reader.yes_no import decide_yes_no, question_entities
from evorag_core.types import Passage

LIND = Passage("a", "Ada Lind", "Ada Lind (born 12 May 1950) is an American painter. She studied in Paris, France.")
KERR = Passage("b", "Bo Kerr", "Bo Kerr is a sculptor from Toledo, Ohio, United States.")
MOOR = Passage("c", "Cal Moor (film director)", "Cal Moor (born 1930, Glasgow) is a Scottish film director.")
FIRE = Passage("d", "Fire Lake", "Fire Lake is a 2014 South Korean drama film directed by Dan Oh.")
STONE = Passage("e", "Stone Road (film)", "Stone Road is a 2014 South Korean action film directed by Eve Ha.")
KYOTO = Passage("f", "Kyoto Rain", "Kyoto Rain is a 2016 Japanese drama film directed by Eve Ha.")
OH = Passage("g", "Dan Oh", "Dan Oh (1 March 1960 - 2 June 2001) was a German film director.")
HA = Passage("h", "Eve Ha", "Eve Ha (born 1971) is a German film director and screenwriter.")
HA_FR = Passage("h", "Eve Ha", "Eve Ha (born 1971) is a French film director and screenwriter.")
ELK = Passage("i", "Elk Airport", "Elk Airport is a public airport a mile west of Elk, in Elk County, Nevada.")
FORD = Passage("j", "Ford Airport", "Ford Airport is a commercial airport near Grand Rapids, Michigan.")
FERN = Passage("k", "Fernwort", "Fernwort is a genus of 40 species of flowering plants in the mint family.")
PINE = Passage("l", "Cypress", "Cypress is a conifer tree or shrub of northern temperate regions.")
OLD_U = Passage("m", "Harwick College", "Harwick College is a public college in Boise, Idaho. Founded in 1932, it "
                "became a university in 1965.")
NEW_U = Passage("n", "Lantry Institute", "Lantry Institute is a private research university.")


def _decide(question, passages):
    evidence = decide_yes_no(question, passages)
    return evidence.answer if evidence else None


def test_places_are_read_from_text():
    assert country_mentions("Bo Kerr is a sculptor from Toledo, Ohio, United States.") == ["united states"]
    assert country_mentions("a Scottish director born in England; the US and us") == ["united kingdom",
                                                                                        "united states"]
    assert country_mentions("a South Korean film, then Korean") == ["south korea"]  # the longest name first
    assert country_mentions("near Grand Rapids, Michigan", states=False) == []
    assert state_mentions("Elk County, Nevada and New York") == ["Nevada", "New York"]
    assert language_mentions("to a German libretto, later French") == ["german", "french"]
    assert is_country("the United States") and is_country("Holland")
    assert not is_country("American") and not is_country("Nevada") and not is_country("Mirrow")


def test_both_american_is_yes_and_a_different_nationality_is_no():
    """Lind: "an American painter"; Kerr: "... Ohio, United States" (a US state counts as the US); Moor: Scottish."""
    assert _decide("Are both Ada Lind and Bo Kerr American?", [LIND, KERR]) == "yes"
    assert _decide("Are both Ada Lind and Cal Moor American?", [LIND, MOOR]) == "no"
    evidence = decide_yes_no("Were Ada Lind and Cal Moor of the same nationality?", [LIND, MOOR])
    assert evidence is not None and evidence.answer == "no" and evidence.prop == "nationality"
    assert evidence.values == (("Ada Lind", "united states"), ("Cal Moor", "united kingdom"))
    assert _decide("Are Ada Lind and Bo Kerr of the same nationality?", [KERR, LIND]) == "yes"


def test_same_country_comparisons_read_each_entity_or_its_director():
    """Films: the film's own country; "the directors ... same country": each film's director's page."""
    assert _decide("Are Fire Lake and Stone Road from the same country?", [FIRE, STONE]) == "yes"
    assert _decide("Are Fire Lake and Kyoto Rain from the same country?", [FIRE, KYOTO]) == "no"
    q = "Do both films Fire Lake and Stone Road have the directors from the same country?"
    assert _decide(q, [FIRE, OH, STONE, HA]) == "yes"  # German and German
    assert _decide(q, [FIRE, OH, STONE, HA_FR]) == "no"  # German and French (both films South Korean)
    assert _decide("Were Fire Lake and Stone Road released in the same year?", [FIRE, STONE]) == "yes"
    assert _decide("Were Fire Lake and Kyoto Rain released in the same year?", [FIRE, KYOTO]) == "no"


def test_located_in_a_state_words_and_years():
    assert _decide("Are both Elk Airport and Ford Airport located in Michigan?", [ELK, FORD]) == "no"
    assert _decide("Is Ford Airport located in Michigan?", [FORD]) == "yes"
    assert _decide("Are both Cypress and Fernwort genera?", [PINE, FERN]) == "no"  # "genera" folded to "genus"
    assert _decide("Is Fernwort a genus?", [FERN]) == "yes"
    # Harwick: first year 1932 < 1950 (True); Lantry: no year (None); no entity says False -> yes
    assert _decide("Were Harwick College and Lantry Institute both founded before 1950?", [OLD_U, NEW_U]) == "yes"
    assert _decide("Was Harwick College founded after 1950?", [OLD_U]) == "no"


def test_no_decision_without_evidence():
    assert decide_yes_no("Are Zed Quay and Yul Brim both American?", [LIND, KERR]) is None  # no entity named
    assert decide_yes_no("Are Ada Lind and Bo Kerr of the same genre?", [LIND, KERR]) is None  # a "same X" not read
    # a value missing on one side: no "same" decision
    assert decide_yes_no("Are Ada Lind and Harwick College of the same nationality?", [LIND, NEW_U]) is None


def test_entities_are_titles_named_in_the_question():
    assert question_entities("Are both Ada Lind and Cal Moor American?", [MOOR, KERR, LIND]) == [2, 0]
    # two pages with one plain title: the qualifier another entity has ("(film)") wins
    album = Passage("x", "Stone Road (album)", "Stone Road is a 2011 album by an American singer.")
    film = Passage("y", "Fire Lake (film)", FIRE.text)
    assert question_entities("Were Fire Lake and Stone Road released in the same year?", [album, film, STONE]) == [1, 2]


def test_which_who_what_and_choice_questions_are_never_yes_no():
    for q in ("Which British first-generation jet-powered medium bomber was designed first?",
              "Who directed Fire Lake?", "What is the nationality of Ada Lind?", "When was Ada Lind born?",
              "Is Baiyin or Xinghua a county-level city?", "Did Franki Valli sing with Hellogoodbye or The Four Seasons?",
              "Is the bowler a left-hand or right-hand batsman?"):
        assert not is_yes_no(q), q
    for q in ("Are both Ada Lind and Bo Kerr American?", "Were Fire Lake and Stone Road released in the same year?",
              "Do both films have the directors from the same country?", "Is Ford Airport located in Michigan?"):
        assert is_yes_no(q), q


def test_is_yes_no_on_the_shared_questions(benchmarks):
    """Every question detected as yes/no in the shared dev files has a yes/no gold answer (HotpotQA 39, 2Wiki 18)."""
    from evorag_core.data.datasets import load_dataset

    for name in ("hotpotqa_dev300.jsonl", "2wiki_dev182.jsonl", "musique_dev146.jsonl"):
        for q in load_dataset(benchmarks / name).questions:
            if is_yes_no(q.question):
                assert any(normalize_answer(a) in ("yes", "no") for a in q.answers), q.question


@pytest.mark.parametrize("question, expected", [("Are both Ada Lind and Bo Kerr American?", "yes"),
                                                ("Are both Ada Lind and Cal Moor American?", "no")])
def test_span_reader_answers_from_the_evidence(tiny_backend, question, expected):
    passages = [LIND, KERR, MOOR]
    reader = SpanReader(tiny_backend, AnswerConfig())  # the default: yes_no = "evidence"
    answer = reader.answer(question, passages)
    assert answer.kind == "yes_no" and answer.text == expected and answer.source_pid is None
    model = SpanReader(tiny_backend, AnswerConfig(yes_no="model"))
    margin = model.yes_no_margin(question, passages)
    assert model.answer(question, passages).text == ("yes" if margin > 0 else "no")


def test_span_reader_falls_back_to_its_model_without_evidence(tiny_backend):
    question = "Are Zed Quay and Yul Brim both American?"  # no passage names them
    evidence = SpanReader(tiny_backend, AnswerConfig())
    margin = evidence.yes_no_margin(question, [LIND, KERR])
    assert evidence.answer(question, [LIND, KERR]).text == ("yes" if margin > 0 else "no")
