"""EM/F1 normalization and the paired bootstrap."""
import pytest

from evorag_core.metrics import exact_match, f1_score, normalize_answer, paired_bootstrap, support_recall


def test_normalize():
    assert normalize_answer("The  Eiffel_Tower!") == "eiffel tower"
    assert normalize_answer("An apple, a day") == "apple day"


def test_em_f1_max_over_aliases():
    """'New York City' vs aliases ['NYC', 'New York']: EM 0; F1 vs 'New York' = P 2/3, R 1 -> 0.8."""
    assert exact_match("new york", ["NYC", "New York"]) == 1.0
    assert exact_match("New York City", ["NYC", "New York"]) == 0.0
    assert f1_score("New York City", ["NYC", "New York"]) == pytest.approx(0.8)
    assert f1_score("", ["x"]) == 0.0


def test_support_recall():
    assert support_recall(["a", "b", "c"], ["a", "d"]) == 0.5
    assert support_recall(["a"], []) is None


def test_bootstrap_identical_and_clear_difference():
    same = paired_bootstrap([0.1, 0.5, 0.9], [0.1, 0.5, 0.9])
    assert same.diff == 0.0 and same.p_value == 1.0
    a = [1.0] * 40 + [0.0] * 10
    b = [0.0] * 40 + [0.0] * 10
    res = paired_bootstrap(a, b, resamples=2000, seed=1)
    assert res.diff == pytest.approx(0.8)
    assert res.p_value < 0.01
    assert res.ci_low > 0.6 and res.ci_high <= 0.92
    again = paired_bootstrap(a, b, resamples=2000, seed=1)
    assert again == res  # seeded


def test_bootstrap_rejects_unpaired():
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 2.0])


# -- no verdict on fewer than 20 common questions (issue 24 item 6) -------------------------------------------------

TOO_FEW_2 = "too few common questions (n=2 < 20) to call significance"


def _results(ems: list[float]) -> list:
    from evorag_core.methods.base import QuestionResult

    return [QuestionResult(question_id=f"q{i}", dataset="t", question="?", prediction="a", gold=("a",), em=em, f1=em,
                           steps=1, passages=(), support_recall=0.0, refused=False) for i, em in enumerate(ems)]


def test_two_common_questions_give_no_verdict():
    """Both right on one side, both wrong on the other: the bootstrap's p is 0, and still no verdict."""
    res = paired_bootstrap([1.0, 1.0], [0.0, 0.0])
    assert res.p_value == 0.0 and res.diff == 1.0
    assert res.significant is None and res.verdict == TOO_FEW_2


def test_twenty_five_common_questions_get_a_verdict():
    clear = paired_bootstrap([1.0] * 25, [0.0] * 25)
    assert clear.significant is True and clear.verdict == "significant (p < 0.05)"
    same = paired_bootstrap([1.0, 0.0] * 12 + [1.0], [1.0, 0.0] * 12 + [1.0])
    assert same.p_value == 1.0 and same.significant is False and same.verdict == "not significant (p >= 0.05)"
    assert paired_bootstrap([1.0] * 19, [0.0] * 19).significant is None  # the limit: 20


def test_compare_results_and_the_cli_say_too_few(tmp_path, capsys):
    import json

    from evorag_core.cli.main import main as cli_main
    from evorag_core.evaluation.runner import compare_results

    a, b = _results([1.0, 1.0]), _results([0.0, 0.0])
    out = compare_results(a, b, resamples=500)
    assert out["n"] == 2 and all(out[m]["verdict"] == TOO_FEW_2 and out[m]["significant"] is None
                                 for m in ("em", "f1", "steps"))
    assert compare_results(_results([1.0] * 25), _results([0.0] * 25), resamples=500)["em"]["significant"] is True
    for name, results in (("a", a), ("b", b)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in results))
    assert cli_main(["compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--resamples", "500"]) == 0
    text = capsys.readouterr().out
    assert "common questions: 2" in text and text.count(TOO_FEW_2) == 3 and "significant (p" not in text
    assert cli_main(["compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["em"]["verdict"] == TOO_FEW_2


def test_refusal_accuracy_by_hand():
    """Six questions, unanswerable = (T, T, T, F, F, F), refused = (T, T, F, T, F, F):
    refusals 3, of which correct (refused and unanswerable) 2 -> precision 2/3; unanswerable 3 -> recall 2/3;
    right calls: q1, q2 (refused, unanswerable), q5, q6 (answered, answerable) -> accuracy 4/6."""
    from evorag_core.metrics import refusal_accuracy

    s = refusal_accuracy([True, True, False, True, False, False], [True, True, True, False, False, False])
    assert (s.n, s.unanswerable, s.refused, s.correct_refusals) == (6, 3, 3, 2)
    assert s.precision == pytest.approx(2 / 3) and s.recall == pytest.approx(2 / 3)
    assert s.accuracy == pytest.approx(4 / 6)
    # nothing refused: precision undefined; no unanswerable question: recall undefined
    none = refusal_accuracy([False, False], [False, False])
    assert none.precision is None and none.recall is None and none.accuracy == 1.0
    with pytest.raises(ValueError):
        refusal_accuracy([True], [True, False])


def test_summary_reports_refusal_where_questions_are_marked(tmp_path):
    """evaluate() marks each result with its question's `unanswerable`; summarize() then reports REFUSE's precision
    and recall. Two demo-style questions: q1 unanswerable and refused, q2 answerable and refused ->
    precision 1/2, recall 1/1, accuracy 1/2. compare_results bootstraps the per-question right call."""
    from evorag_core.evaluation.runner import compare_results, evaluate
    from evorag_core.methods.base import QuestionResult
    from evorag_core.types import Question

    qs = [Question("q1", "t", "?", ("a",), type="unanswerable"), Question("q2", "t", "?", ("a",), type="bridge")]

    class Refuser:
        name = label = "refuser"

        def run_question(self, q):
            return QuestionResult(q.id, "t", "?", None, q.answers, 0.0, 0.0, 1, (), None, True)

    summary, results = evaluate(Refuser(), qs, out_path=tmp_path / "r.jsonl")
    assert [r.unanswerable for r in results] == [True, False]
    assert (summary["refusal_precision"], summary["refusal_recall"], summary["refusal_accuracy"]) == (0.5, 1.0, 0.5)
    assert summary["unanswerable"] == 1
    cmp = compare_results(results, results, resamples=100)
    assert cmp["refusal_accuracy"]["diff"] == 0.0


def test_answer_changes_by_hand(tmp_path, capsys):
    """Five questions, A against B:
    q1 same answer up to case and punctuation ("Paris." / "paris") -> not a change;
    q2 changed, A right (F1 1 vs 0), same steps -> better at equal steps;
    q3 changed, A wrong, A took one more step -> worse, not at equal steps;
    q4 yes/no: A "yes" right, B "no" wrong, same steps -> better at equal steps; yes/no right A 1, B 0;
    q5 A refused (no prediction), B answered wrong -> a change with equal F1 (neither better nor worse)."""
    import json

    from evorag_core.cli.main import main as cli_main
    from evorag_core.evaluation.runner import answer_changes, compare_results
    from evorag_core.methods.base import QuestionResult

    def r(qid, pred, gold, f1, steps):
        return QuestionResult(qid, "t", "?", pred, (gold,), float(f1 == 1.0), f1, steps, (), None, pred is None)

    a = [r("q1", "Paris.", "Paris", 1.0, 2), r("q2", "Ada", "Ada", 1.0, 2), r("q3", "Bob", "Carl", 0.0, 3),
         r("q4", "yes", "yes", 1.0, 2), r("q5", None, "Dan", 0.0, 2)]
    b = [r("q1", "paris", "Paris", 1.0, 2), r("q2", "Eve", "Ada", 0.0, 2), r("q3", "Carl", "Carl", 1.0, 2),
         r("q4", "no", "yes", 0.0, 2), r("q5", "Fay", "Dan", 0.0, 2)]
    c = answer_changes(list(zip(a, b)))
    assert (c["n"], c["changed"], c["better"], c["worse"]) == (5, 4, 2, 1)
    assert (c["same_steps_changed"], c["same_steps_better"], c["same_steps_worse"]) == (3, 2, 0)
    assert c["yes_no"] == {"n": 1, "right_a": 1.0, "right_b": 0.0}
    assert compare_results(a, b, resamples=100)["changes"] == c
    for name, results in (("a", a), ("b", b)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(x.to_dict()) + "\n" for x in results))
    assert cli_main(["compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--resamples", "100"]) == 0
    text = capsys.readouterr().out
    assert "answers changed: 4 (A's F1 higher on 2, lower on 1); at equal steps 3 (2 higher, 0 lower)" in text
    assert "yes/no questions: 1, right A 1  B 0" in text


def test_grade_of_an_outcome():
    """'the Sable' vs 'Sable River': tokens {sable} vs {sable, river}: P 1, R 1/2, F1 = 2 * 1 * 0.5 / 1.5 = 2/3, EM 0
    -> partial. A refusal: wrong (0, 0) on an answerable question, correct (1, 1) on an unanswerable one. No gold on
    an answerable question: no grade. A stored outcome's columns give the same verdict (grade_verdict)."""
    from evorag_core.metrics import Grade, grade, grade_verdict

    partial = grade("the Sable", False, ["Sable River"])
    assert (partial.verdict, partial.em, partial.label) == ("partial", 0.0, "partly correct")
    assert partial.f1 == pytest.approx(2 / 3) and grade_verdict(partial.em, partial.f1) == "partial"
    assert grade(None, True, ["Sable River"]) == Grade("wrong", 0.0, 0.0, True, "refused an answerable question")
    assert grade(None, True, ["1845"], answerable=False) == Grade("correct", 1.0, 1.0, False,
                                                                   "refused an unanswerable question")
    assert grade("Mirrow", False, []) is None
    assert (grade_verdict(1.0, 1.0), grade_verdict(0.0, 0.0)) == ("correct", "wrong")
