"""Answer pairs from the store's episodes (training/answer_pairs.py, `evorag pairs answers`) with the tiny random
model: the state an episode answered from is read again and its pairs are queued with source "answer"; evaluation
episodes give none, a question without a gold answer none; the gold comes from the store or the data file; a rerun
adds nothing for the episodes already paired; the CLI does the same and `evorag train --objective dpo --source
answer` selects only them."""
from __future__ import annotations

import json
import subprocess
import sys

from evorag_core.config import AnswerConfig
from evorag_core.pairs.reader_pairs import ANSWER_SOURCE, READER_PAIR
from evorag_core.policy.agent import reader_passages
from evorag_core.reader.span import SpanReader
from evorag_core.store import open_store
from evorag_core.store.records import Step
from evorag_core.types import Dataset, Question
from tests.paths import REPO as ROOT
from tests.reader.texts import MIRROW, PASSAGES, QUESTIONS, TRAVINE
from training.answer_pairs import make_answer_pairs


def _obj(p) -> dict:
    return {"pid": p.pid, "title": p.title, "text": p.text}


def _episode(store, qid: str, *, source: str = "rollout", last: str = "ANSWER") -> int:
    """SEARCH Ansel Travine's page, SEARCH Mirrow's (where the answer is), then `last`."""
    steps = (Step(1, "SEARCH", "Ansel Travine", (_obj(TRAVINE),)), Step(2, "SEARCH", "Mirrow", (_obj(MIRROW),)),
             Step(3, last, "Sable River" if last == "ANSWER" else None))
    return store.add_episode(question_id=qid, dataset="demo", question=QUESTIONS[0], policy="lm", stage="refinement",
                             schedule="time-dynamic", steps=steps, source=source, config={"t_max": 5})


def _data_file(tmp_path):
    path = tmp_path / "file.jsonl"
    row = {"id": "q-file", "dataset": "demo", "question": QUESTIONS[0], "answers": ["Sable River"],
           "passages": [dict(_obj(p), gold=False) for p in PASSAGES]}
    path.write_text(json.dumps(row) + "\n")
    return path


def test_stored_episodes_give_answer_pairs_once(tiny_backend, tmp_path):
    reader = SpanReader(tiny_backend, AnswerConfig(ranker="lm"))
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.add_dataset(Dataset("demo", "demo.jsonl", (Question("q-store", "demo", QUESTIONS[0], ("Sable River",)),)))
        in_store = _episode(store, "q-store")
        _episode(store, "q-store", source="eval")  # an evaluation's episode: its question is a dev question
        from_file = _episode(store, "q-file", source="studio", last="REFUSE")
        _episode(store, "q-nowhere")

        def make():
            return make_answer_pairs(store, reader, lambda v: reader_passages(v, 5), t_max=5,
                                     data=str(_data_file(tmp_path)), max_pairs=2)

        report = make()
        assert (report.episodes, report.already, report.no_gold, report.states) == (3, 0, 1, 2)
        pairs = [store.get_pair(i) for i in report.pair_ids]
        assert {p.metadata["episode_db_id"] for p in pairs} == {in_store, from_file}
        for p in pairs:
            # the state before the last step (t = 3): both hops read, Mirrow's page (linked from the named one) first
            assert p.source == ANSWER_SOURCE and p.status == "queued" and p.metadata["kind"] == READER_PAIR
            assert p.metadata["t"] == 3 and p.metadata["passages"] == [MIRROW.pid, TRAVINE.pid]
            assert " ".join(p.chosen.split()) == "Sable River" and p.metadata["against"] == "random"
        again = make()
        assert (again.already, again.no_gold, again.pair_ids) == (2, 1, ())


def test_episodes_of_several_data_files_are_paired_in_one_run_without_data(tiny_backend, tmp_path):
    """Rollouts store a step's passages as pid strings (from the data file's pooled corpus: here another question's
    passages) and their data file in the row (`data_path`): one run with no `data` reads the episodes of two files,
    each question's gold and passages from its own file."""
    reader = SpanReader(tiny_backend, AnswerConfig(ranker="lm"))
    files = {}
    for name in ("a", "b"):
        files[name] = path = tmp_path / f"{name}.jsonl"
        rows = [{"id": f"q-{name}", "dataset": "demo", "question": QUESTIONS[0], "answers": ["Sable River"],
                 "passages": []},
                {"id": f"other-{name}", "dataset": "demo", "question": "Where?", "answers": ["x"],
                 "passages": [dict(_obj(p), gold=False) for p in PASSAGES]}]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        ids = []
        for name, path in files.items():
            steps = (Step(1, "SEARCH", "Ansel Travine", (TRAVINE.pid,)), Step(2, "SEARCH", "Mirrow", (MIRROW.pid,)),
                     Step(3, "ANSWER", "Sable River"))
            ids.append(store.add_episode(question_id=f"q-{name}", dataset="demo", question=QUESTIONS[0], policy="lm",
                                         stage="refinement", schedule="time-dynamic", steps=steps, source="rollout",
                                         config={"t_max": 5}, data_path=str(path)))
        report = make_answer_pairs(store, reader, lambda v: reader_passages(v, 5), t_max=5)
        assert (report.episodes, report.no_gold, report.states) == (2, 0, 2)
        pairs = [store.get_pair(i) for i in report.pair_ids]
        assert {p.metadata["episode_db_id"] for p in pairs} == set(ids)
        assert all(p.metadata["passages"] == [MIRROW.pid, TRAVINE.pid] for p in pairs)


def test_a_stopped_run_keeps_its_pairs_and_a_rerun_goes_on(tiny_backend, tmp_path):
    """`stop` true from the start: the first episode is read (a started run reads one) and its pairs stay queued,
    the second is not read; a rerun pairs the second and skips the first."""
    reader = SpanReader(tiny_backend, AnswerConfig(ranker="lm"))
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        first, second = _episode(store, "q-file"), _episode(store, "q-file")
        done: list[int] = []  # progress: 0 first, then each episode read

        def make(stop):
            return make_answer_pairs(store, reader, lambda v: reader_passages(v, 5), t_max=5,
                                     data=str(_data_file(tmp_path)), on_episode=lambda d, n: done.append(d), stop=stop)

        report = make(lambda: True)  # asked after each episode: the first is read, the second not
        assert report.stopped and (report.episodes, report.states) == (1, 1) and report.pair_ids
        assert {store.get_pair(i).metadata["episode_db_id"] for i in report.pair_ids} == {first}
        assert done == [0, 1]
        rest = make(lambda: False)
        assert not rest.stopped and rest.already == 1 and rest.pair_ids
        assert {store.get_pair(i).metadata["episode_db_id"] for i in rest.pair_ids} == {second}


def test_a_pipeline_methods_stored_evaluation_gives_the_pairs_of_its_reader_state(tiny_backend, tmp_path):
    """A fixed-k evaluation's episode (stored by the evaluation recorder from the method's trace, each SEARCH with
    the pids it found) is replayed to the state it answered from, so `--episodes ID` pairs it; a trace whose
    searches record no passages (as before they did) gives that state without passages, so no pair."""
    from evorag_core.evaluation.traces import record_result
    from evorag_core.methods.base import QuestionResult

    reader = SpanReader(tiny_backend, AnswerConfig(ranker="lm"))
    data = str(_data_file(tmp_path))
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        def recorded(search: dict) -> int:
            result = QuestionResult("q-file", "demo", QUESTIONS[0], "Sable River", ("Sable River",), 1.0, 1.0, 1,
                                    (MIRROW.pid, TRAVINE.pid), 1.0, False,
                                    trace=(search, {"action": "ANSWER", "answer": "Sable River"}))
            return record_result(store, result, method="fixed-k", label="fixed-k", run="fixed-k on demo",
                                 data_path=data, stage="refinement", schedule="time-dynamic")

        with_passages = recorded({"action": "SEARCH", "query": QUESTIONS[0], "passages": [MIRROW.pid, TRAVINE.pid]})
        without = recorded({"action": "SEARCH", "query": QUESTIONS[0]})
        report = make_answer_pairs(store, reader, lambda v: reader_passages(v, 5), t_max=5, data=data, max_pairs=1,
                                   episode_ids=[with_passages, without])
        pairs = [store.get_pair(i) for i in report.pair_ids]
        assert (report.states, report.no_passages) == (2, 1)
        assert [p.metadata["episode_db_id"] for p in pairs] == [with_passages]
        assert set(pairs[0].metadata["passages"]) == {MIRROW.pid, TRAVINE.pid}


def test_the_cli_queues_answer_pairs_that_a_dpo_round_can_select(tiny_folder, tmp_path):
    home, db = tmp_path / "home", f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(db) as store:
        _episode(store, "q-file")
    argv = [sys.executable, "-m", "evorag_core.cli.main", "pairs", "answers", "--home", str(home), "--db", db,
            "--data", str(_data_file(tmp_path)), "--set", f"policy.model={tiny_folder}", "--set", "answer.ranker=lm",
            "--json"]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["queued"] >= 1 and (got["episodes"], got["states"], got["source"]) == (1, 1, "answer")
    with open_store(db) as store:
        assert store.count_pairs("source") == {"answer": got["queued"]}
    bad = subprocess.run([*argv[:5], "--max-pairs", "0", "--home", str(home)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert bad.returncode != 0 and "--max-pairs must be at least 1" in bad.stderr
    from evorag_core.cli.main import build_parser

    assert build_parser().parse_args(["train", "--objective", "dpo", "--source", "answer"]).source == "answer"
