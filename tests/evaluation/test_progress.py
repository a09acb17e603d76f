"""`evorag eval` shows a tqdm bar on stderr: questions done / total, running EM/F1 in the postfix, and the ETA
(`evaluation.Progress`, also used by bench/agent.py)."""
from __future__ import annotations

import io
import json

from tests.paths import FIXTURES
from evorag_core.cli.main import main as cli_main
from evorag_core.evaluation.runner import Progress
from evorag_core.methods.base import QuestionResult

TINY = FIXTURES / "common_tiny.jsonl"  # 3 questions: q1, q2, q3


def _last_bar(err: str, desc: str) -> str:
    """The last state the bar wrote (tqdm redraws with carriage returns)."""
    states = [s for s in err.replace("\r", "\n").splitlines() if s.startswith(desc)]
    assert states, err[-2000:]
    return states[-1]


def _result(qid: str, em: float, f1: float) -> QuestionResult:
    return QuestionResult(question_id=qid, dataset="t", question="?", prediction="a", gold=("a",), em=em, f1=f1,
                          steps=1, passages=(), support_recall=0.0, refused=False)


def test_eval_cli_shows_questions_done_running_em_f1_and_eta(tmp_path, capsys):
    """Scripted answers (no language model): q1 and q3 right, q2 wrong -> EM 2/3 = 0.667, F1 0.667 at the end."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"q1": [{"action": "ANSWER", "answer": "Dornbach"}],
                                  "q2": [{"action": "ANSWER", "answer": "the Danube"}],
                                  "q3": [{"action": "ANSWER", "answer": "Ilse Marrow"}]}), encoding="utf-8")
    run = ["eval", "--method", "script", "--script", str(script), "--data", str(TINY), "--home", str(tmp_path)]
    assert cli_main([*run, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["n"] == 3  # stdout stays pure JSON; the bar is on stderr
    final = _last_bar(err, "eval script")
    assert "3/3" in final and "100%" in final and "EM 0.667 F1 0.667" in final, final
    assert "<00:00" in final  # the ETA field (nothing left)

    assert cli_main([*run, "--no-progress", "--json"]) == 0
    assert "eval script" not in capsys.readouterr().err


def test_resumed_questions_count_as_done_but_not_in_the_rate():
    """Two results resumed from an earlier run and one new: the bar ends at 3/3 with the running EM of all three;
    its rate counts only the new question (tqdm's `initial`)."""
    buf = io.StringIO()
    bar = Progress(3, stream=buf, desc="t")
    earlier = [_result("a", 1.0, 1.0), _result("b", 0.0, 0.5)]
    bar(_result("c", 1.0, 1.0), [*earlier, _result("c", 1.0, 1.0)])
    assert bar.bar.initial == 2 and bar.bar.n == 3
    final = _last_bar(buf.getvalue(), "t")
    assert "3/3" in final and "EM 0.667 F1 0.833" in final, final


def test_a_fully_resumed_run_closes_the_bar_when_left():
    buf = io.StringIO()
    with Progress(2, stream=buf, desc="t"):
        pass  # evaluate() found every question done and never called the bar
    assert buf.getvalue().endswith("\n") and "0/2" in _last_bar(buf.getvalue(), "t")  # closed: final line ended
