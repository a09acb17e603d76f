"""Answer types (`evorag_core/reader/answer_type.py`): the kinds a question asks for, the span reader's type filter,
and no yes/no span for a question that is not yes/no."""
from __future__ import annotations

from evorag_core.config import AnswerConfig
from evorag_core.reader.answer_type import (DATE, DIGITS, LOCATED, NAMES, NUMBER, PLACE, YEAR, NameFacts, by_type,
                                            expected_kinds, fits, is_yes_no_span, name_facts)
from evorag_core.reader.span import SpanReader, extract_candidates
from evorag_core.types import Passage

TRAVINE = Passage("p", "Ansel Travine", "Ansel Travine (12 May 1821 - 1893) was an Ostrevian chemist born in Mirrow. "
                  "In 2016 a statue of him was unveiled; 3,000 people came.")
BOMBER = Passage("q", "Vale Bomber", "The Vale Bomber was a British jet-powered medium bomber. No. 9 Squadron flew it. "
                 "No other bomber was as fast.")


def test_expected_kinds_of_questions():
    assert expected_kinds("When was Ansel Travine born?") == (DATE, YEAR)  # a full date first
    assert expected_kinds("What is the date of death of Ansel Travine?") == (DATE, YEAR)
    assert expected_kinds("In what year was Mirrow founded?") == (YEAR, DATE)
    assert expected_kinds("How many people came?") == (NUMBER, DIGITS)
    assert expected_kinds("Who founded Harwick Polytechnic?") == (NAMES,)
    assert expected_kinds("What is the place of birth of Ansel Travine?") == (LOCATED, PLACE, NAMES)
    assert expected_kinds("Which country is Mirrow in?")[0] == frozenset({"country"})
    assert expected_kinds("Which came first, A or B?", ["A", "B"]) == ()  # the options are the candidates
    assert expected_kinds("What lamp did he invent?") == ()


def test_kinds_of_spans():
    assert fits(DATE, "12 May 1821") and fits(DATE, "3 August 979") and not fits(DATE, "1821")
    assert fits(YEAR, "1821") and fits(NUMBER, "3,000 people") and fits(DIGITS, "No. 9")
    assert fits(NAMES, "Mirrow") and not fits(NAMES, "chemist") and not fits(NAMES, "1821")
    assert is_yes_no_span("No") and is_yes_no_span("yes.") and not is_yes_no_span("No. 9 Squadron")


def test_a_birth_date_question_keeps_the_full_date():
    """Candidates 12 May 1821, 1821, 1893, 2016, 3,000 people: "when ... born" keeps the date alone; a passage with
    no full date keeps the years; "how many" keeps the numbers that are not years or dates."""
    spans = [s for s, _ in extract_candidates("When was Ansel Travine born?", [TRAVINE], 300)]
    assert spans == ["12 May 1821"]
    no_date = Passage("r", "Ansel Travine", "Ansel Travine (1821-1893) was a chemist. In 2016 a statue was unveiled.")
    assert {s for s, _ in extract_candidates("When was Ansel Travine born?", [no_date], 300)} == {"1821", "1893",
                                                                                                  "2016"}
    count = [s for s, _ in extract_candidates("How many people came to see the statue?", [TRAVINE], 300)]
    assert "3,000 people" in count and all(fits(NUMBER, s) for s in count)  # no year, no date
    # without the filter (answer_types = false): every candidate with a digit, as before
    assert len(extract_candidates("When was Ansel Travine born?", [TRAVINE], 300, types=False)) > 1


def test_by_type_falls_back_to_every_span():
    spans = [("chemist", 0), ("lamp", 1)]
    assert by_type("Who invented the lamp?", spans) == spans  # no name among them: all kept
    assert by_type("Who invented the lamp?", [("no", 0), ("Ansel", 1)]) == [("Ansel", 1)]


def test_a_which_question_gets_no_yes_no_span(tiny_backend):
    q = "Which British jet-powered medium bomber did No. 9 Squadron fly?"
    spans = [s for s, _ in extract_candidates(q, [BOMBER], 300)]
    assert spans and not any(is_yes_no_span(s) for s in spans)
    for cfg in (AnswerConfig(), AnswerConfig(answer_types=False)):
        answer = SpanReader(tiny_backend, cfg).answer(q, [BOMBER])
        assert answer.kind == "span" and not is_yes_no_span(answer.text)


def test_a_place_question_keeps_places_not_people():
    """Travine's page opens with life dates (a person); Mirrow follows "born in" (a place); "Swedish" is a
    nationality word, not a place."""
    director = Passage("s", "Lena Oster", "Lena Oster (born 1950) is a director. Her film starred Ansel Travine.")
    facts = name_facts([TRAVINE, director])
    assert facts.persons == {"ansel travine", "lena oster"} and "mirrow" in facts.located
    assert fits(LOCATED, "Mirrow", facts) and not fits(LOCATED, "Ansel Travine", facts)
    assert not fits(PLACE, "Lena Oster", facts) and fits(PLACE, "Harwick", facts) and not fits(PLACE, "Swedish")
    spans = [s for s, _ in extract_candidates("Where was the director's star born?", [director, TRAVINE], 300)]
    assert spans == ["Mirrow"]
    assert by_type("Where was he born?", [("Lena Oster", 0)], facts=NameFacts()) == [("Lena Oster", 0)]
