"""Hand-made passages and questions of the reader tests (the tiny model is built from them)."""
from evorag_core.types import Passage

MIRROW = Passage("p1", "Mirrow", "Mirrow is a mill town on the  Sable\nRiver in Velmark Province, founded in 1402.")
TRAVINE = Passage("p2", "Ansel Travine", "Ansel Travine (1821–1893) was an Ostrevian chemist born in Mirrow. In 1849 "
                  "he invented the Travine lamp, and later became rector of \"Harwick Polytechnic\".")
PASSAGES = [MIRROW, TRAVINE]
QUESTIONS = ["On which river is the birthplace of the chemist Ansel Travine?", "In what year was Mirrow founded?",
             "Who founded Harwick Polytechnic?", "Which lamp did the chemist invent?"]
