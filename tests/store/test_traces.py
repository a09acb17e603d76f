"""The trace browser's query layer on real SQLite (and PostgreSQL when a server starts), evaluation runs recorded
as traces, and the studio's trace handlers.

The seeded store (`seeded`), in insertion order (ids 1..12):
  i  dataset  policy  source   adapter  stage        em   f1    refused  return   question
  1  demo     oracle  studio   -        discovery    1    1.0   no       +2.0     "Who founded Mirrow?"
  2  demo     oracle  eval     -        discovery    0    0.5   no       +0.5     "Where is the Sable River?"
  3  demo     lm:a    eval     a        refinement   0    0.0   yes      -1.0     "What is 100% proof?"
  4  hotpot   lm:a    rollout  a        discovery    1    1.0   no       +1.5     "Who wrote Ansel Travine?"
  5  hotpot   lm:b    rollout  b        refinement   -    -     no       None     "When did MIRROW fall?" (running)
  6..12  demo  script  eval   -        discovery    0    0.2   no       i / 10   "Filler question i"
"""
from __future__ import annotations

import json
from datetime import date, timedelta

import pytest
from sqlalchemy import text

from tests.paths import DEMO, FIXTURES
from evorag_core.cli.main import main as cli_main
from evorag_core.store import NO_ADAPTER, Outcome, Step, TraceFilter, open_store, parse_day
from evorag_core.store.base import utcnow

TINY = FIXTURES / "common_tiny.jsonl"  # 3 questions: q1, q2, q3

ROWS = [
    ("demo", "oracle", "studio", None, "discovery", Outcome("Ansel", 1.0, 1.0, False), 2.0, "Who founded Mirrow?"),
    ("demo", "oracle", "eval", None, "discovery", Outcome("Lake", 0.0, 0.5, False), 0.5, "Where is the Sable River?"),
    ("demo", "lm:a", "eval", "a", "refinement", Outcome(None, 0.0, 0.0, True), -1.0, "What is 100% proof?"),
    ("hotpot", "lm:a", "rollout", "a", "discovery", Outcome("X", 1.0, 1.0, False), 1.5, "Who wrote Ansel Travine?"),
    ("hotpot", "lm:b", "rollout", "b", "refinement", None, None, "When did MIRROW fall?"),
    *[("demo", "script", "eval", None, "discovery", Outcome("f", 0.0, 0.2, False), i / 10, f"Filler question {i}")
      for i in range(6, 13)],
]


def _step(t: int, action: str = "SEARCH", arg: str | None = "q") -> Step:
    return Step(t=t, action=action, argument=arg, passages=("p1",), signals={"ret": 1.0, "step": -1.0},
                weights={"beta": 2.0, "eta": 0.02}, reward=1.98)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request, tmp_path):
    """A real store on SQLite, and on a throwaway PostgreSQL server when one starts (tests/pg_fixture.py)."""
    url = f"sqlite:///{tmp_path / 'traces.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with open_store(url) as s:
        yield s


@pytest.fixture
def seeded(store):
    for i, (ds, pol, src, ad, stage, outcome, ret, q) in enumerate(ROWS, 1):
        store.add_episode(question_id=f"{ds}-{i:03d}", dataset=ds, question=q, policy=pol, stage=stage,
                          schedule="time-dynamic", steps=[_step(1), _step(2, "ANSWER", "x")] if i != 5 else [],
                          status="running" if outcome is None else "finished", total_return=ret, source=src,
                          adapter=ad, data_path=f"/data/{ds}.jsonl", run=f"run-{src}", outcome=outcome)
    store.add_step(5, _step(1))  # the running episode's first step
    store.record_judgment(3, 1, judge="gold", verdict="answerable")
    store.set_override(3, 1, "unanswerable", who="ann")
    store.set_override(1, 2, "answerable", who="bob")
    return store


def ids(page) -> list[int]:
    return [r.id for r in page.rows]


def test_no_filter_lists_every_trace_newest_first_with_its_outcome(seeded):
    page = seeded.search_traces()
    assert page.total == 12 and ids(page) == list(range(12, 0, -1))
    first = page.rows[-1]
    assert (first.source, first.em, first.f1, first.refused, first.answer, first.n_steps) == (
        "studio", 1.0, 1.0, False, "Ansel", 2)
    running = next(r for r in page.rows if r.id == 5)
    assert running.status == "running" and running.n_steps == 1 and running.em is None  # add_step counted it


def test_filters_combine_with_and(seeded):
    assert ids(seeded.search_traces(TraceFilter(dataset="demo", policy="oracle"))) == [2, 1]
    assert ids(seeded.search_traces(TraceFilter(dataset="demo", source="eval", outcome="refused"))) == [3]
    assert ids(seeded.search_traces(TraceFilter(adapter="a"))) == [4, 3]
    assert ids(seeded.search_traces(TraceFilter(adapter="a", stage="discovery"))) == [4]
    assert ids(seeded.search_traces(TraceFilter(adapter=NO_ADAPTER, stage="discovery", f1_min=0.5))) == [2, 1]
    assert ids(seeded.search_traces(TraceFilter(run="run-rollout", dataset="demo"))) == []
    assert seeded.search_traces(TraceFilter(dataset="demo", policy="script")).total == 7


def test_outcomes_and_inclusive_ranges(seeded):
    """correct = EM 1 (1, 4); wrong = graded, EM 0 (2, 3, 6..12); ungraded = the running 5.
    F1 in [0.2, 0.5] -> 2 (0.5) and 6..12 (0.2); return in [0.6, 1.0] -> 6..10 (0.6 .. 1.0)."""
    assert ids(seeded.search_traces(TraceFilter(outcome="correct"))) == [4, 1]
    assert seeded.search_traces(TraceFilter(outcome="wrong")).total == 9
    assert ids(seeded.search_traces(TraceFilter(outcome="ungraded"))) == [5]
    assert ids(seeded.search_traces(TraceFilter(outcome="answered", dataset="hotpot"))) == [4]
    assert ids(seeded.search_traces(TraceFilter(f1_min=0.2, f1_max=0.5))) == [12, 11, 10, 9, 8, 7, 6, 2]
    assert ids(seeded.search_traces(TraceFilter(return_min=0.6, return_max=1.0))) == [10, 9, 8, 7, 6]
    assert ids(seeded.search_traces(TraceFilter(return_max=0.0))) == [3]


def test_pagination_totals_and_pages(seeded):
    """12 traces, 5 a page: pages of 5, 5, 2; every id once."""
    pages = [seeded.search_traces(limit=5, offset=o) for o in (0, 5, 10)]
    assert [p.total for p in pages] == [12, 12, 12] and [p.pages for p in pages] == [3, 3, 3]
    assert [p.page for p in pages] == [1, 2, 3] and [len(p.rows) for p in pages] == [5, 5, 2]
    assert sorted(i for p in pages for i in ids(p)) == list(range(1, 13))
    filtered = seeded.search_traces(TraceFilter(policy="script"), limit=3, offset=6)
    assert (filtered.total, filtered.pages, ids(filtered)) == (7, 3, [6])
    with pytest.raises(ValueError, match="1 to 500"):
        seeded.search_traces(limit=0)


def test_text_search_is_case_insensitive_and_literal(seeded):
    assert ids(seeded.search_traces(TraceFilter(text="mirrow"))) == [5, 1]  # "Mirrow" and "MIRROW"
    assert ids(seeded.search_traces(TraceFilter(text="100%"))) == [3]  # % is a character, not a wildcard
    assert seeded.search_traces(TraceFilter(text="_")).total == 0
    assert ids(seeded.search_traces(TraceFilter(text="hotpot-004"))) == [4]  # an exact question id
    assert ids(seeded.search_traces(TraceFilter(text="ansel", dataset="hotpot"))) == [4]


def test_ordering_by_return_and_f1_puts_unknowns_last(seeded):
    assert ids(seeded.search_traces(TraceFilter(order="return-desc")))[:3] == [1, 4, 12]
    assert ids(seeded.search_traces(TraceFilter(order="return-asc")))[0] == 3
    assert ids(seeded.search_traces(TraceFilter(order="return-asc")))[-1] == 5  # NULL return last
    assert ids(seeded.search_traces(TraceFilter(order="f1-desc")))[:2] == [4, 1]  # ties: newest first
    assert ids(seeded.search_traces(TraceFilter(order="oldest")))[:3] == [1, 2, 3]


def test_annotator_and_date_filters(seeded):
    assert ids(seeded.search_traces(TraceFilter(annotator="ann"))) == [3]
    assert ids(seeded.search_traces(TraceFilter(annotator="bob"))) == [1]
    assert seeded.search_traces(TraceFilter(annotator="gold")).total == 0  # a judge is not an annotator
    today = utcnow().date()
    assert seeded.search_traces(TraceFilter(date_from=today, date_to=today)).total == 12
    assert seeded.search_traces(TraceFilter(date_to=today - timedelta(days=1))).total == 0
    assert seeded.search_traces(TraceFilter(date_from=today + timedelta(days=1))).total == 0


def test_facets_list_the_distinct_values(seeded):
    f = seeded.trace_facets()
    assert f.datasets == ("demo", "hotpot") and f.policies == ("lm:a", "lm:b", "oracle", "script")
    assert f.adapters == ("a", "b") and f.annotators == ("ann", "bob")
    assert set(f.runs) == {"run-studio", "run-eval", "run-rollout"}


def test_malformed_filters_are_refused_with_a_readable_message():
    with pytest.raises(ValueError, match="order must be one of"):
        TraceFilter(order="sideways")
    with pytest.raises(ValueError, match="the F1 range is empty"):
        TraceFilter(f1_min=0.8, f1_max=0.2)
    with pytest.raises(ValueError, match="outcome must be one of"):
        TraceFilter(outcome="great")
    with pytest.raises(ValueError, match="write it as YYYY-MM-DD"):
        parse_day("25/11/2026")
    assert parse_day(" 2026-11-25 ") == date(2026, 11, 25) and parse_day("") is None


def test_the_filter_columns_are_indexed(store):
    """SQLite answers the filters by index, not by a full scan of episodes."""
    if store.dialect != "sqlite":
        pytest.skip("EXPLAIN QUERY PLAN is SQLite's; PostgreSQL picks plans by table size")
    with store.engine.connect() as conn:
        for where in ("policy = 'x'", "run = 'x'", "adapter = 'x'", "total_return > 1", "f1 >= 0.5",
                      "created_at >= '2026-01-01'", "source = 'eval'"):
            plan = " ".join(str(r[-1]) for r in conn.execute(text(f"EXPLAIN QUERY PLAN SELECT id FROM episodes "
                                                                    f"WHERE {where}")))
            assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, (where, plan)


# --- evaluation runs become traces -----------------------------------------------------------------------------


@pytest.mark.slow  # builds the tiny file's retrieval index (minutes on a loaded machine)
def test_evorag_eval_stores_each_question_as_a_trace(tmp_path, capsys):
    """Scripted answers on the tiny file: q1 right, q2 wrong, q3 refused -> three eval traces with EM/F1."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"q1": [{"action": "ANSWER", "answer": "Dornbach"}],
                                  "q2": [{"action": "ANSWER", "answer": "the Danube"}],
                                  "q3": [{"action": "REFUSE"}]}), encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'eval.db'}"
    assert cli_main(["eval", "--method", "script", "--script", str(script), "--data", str(TINY), "--home",
                     str(tmp_path), "--db", db, "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["stored_episodes"] == 3 and summary["run"].startswith("script on ")
    with open_store(db) as s:
        page = s.search_traces(TraceFilter(source="eval", run=summary["run"], order="oldest"))
        assert [(r.question_id, r.em, r.refused, r.policy, r.n_steps) for r in page.rows] == [
            ("q1", 1.0, False, "script", 1), ("q2", 0.0, False, "script", 1), ("q3", 0.0, True, "script", 1)]
        assert page.rows[0].data_path == str(TINY.resolve()) or page.rows[0].data_path.endswith("common_tiny.jsonl")
        ep = s.get_episode(page.rows[2].id)
        assert ep.steps[0].action == "REFUSE" and ep.steps[0].signals  # the environment's signals are kept
        assert ep.config["gold"] and ep.config["method"] == "script"
    assert cli_main(["eval", "--method", "script", "--script", str(script), "--data", str(TINY), "--home",
                     str(tmp_path), "--db", db, "--json", "--no-progress", "--no-store"]) == 0
    assert "stored_episodes" not in json.loads(capsys.readouterr().out)
    with open_store(db) as s:
        assert s.search_traces().total == 3


def test_a_pipeline_methods_trace_is_stored_as_steps(tmp_path):
    """A result without an environment episode: one step per trace entry, the raw trace in the config."""
    from evorag_core.evaluation.traces import record_result
    from evorag_core.methods.base import QuestionResult

    res = QuestionResult(question_id="q9", dataset="d", question="Who?", prediction="Ann", gold=("Ann",), em=1.0,
                         f1=1.0, steps=2, passages=("p1",), support_recall=1.0, refused=False,
                         trace=({"action": "retrieve", "query": "who", "passages": ["p1", "p2"]},
                                {"action": "ANSWER", "answer": "Ann"}))
    with open_store(f"sqlite:///{tmp_path / 'p.db'}") as s:
        eid = record_result(s, res, method="bm25", label="BM25 + reader", run="r", data_path=None,
                            stage="discovery", schedule="time-dynamic")
        ep = s.get_episode(eid)
        assert [(st.action, st.argument, st.passages) for st in ep.steps] == [
            ("RETRIEVE", "who", ("p1", "p2")), ("ANSWER", "Ann", ())]
        assert ep.config["trace"][0]["query"] == "who" and (ep.em, ep.answer, ep.n_steps) == (1.0, "Ann", 2)


def test_eval_runs_are_summarised_in_sql_oldest_first(seeded):
    """Runs of source 'eval' only: run-eval holds ids 2, 3 and 6..12 (9 episodes). EM: all 0; F1: (0.5 + 0 + 7 *
    0.2) / 9 = 1.9 / 9; refused: 1 of 9; steps: 2 each (no config "steps" here). The studio and rollout runs are not
    evaluation runs."""
    seeded.add_episode(question_id="x", dataset="demo", question="Later?", policy="oracle", stage="discovery",
                       schedule="time-dynamic", steps=[_step(1)], source="eval", run="run-later",
                       config={"steps": 5, "seconds": 1.5, "support_recall": 0.5},
                       outcome=Outcome("y", 1.0, 1.0, False))
    first, later = seeded.eval_runs()
    assert (first.run, first.n, first.em, first.refusal_rate, first.avg_steps) == ("run-eval", 9, 0.0,
                                                                                    pytest.approx(1 / 9), 2.0)
    assert first.f1 == pytest.approx(1.9 / 9) and first.support_recall is None and first.dataset == "demo"
    assert (later.run, later.n, later.avg_steps, later.seconds, later.support_recall) == ("run-later", 1, 5.0, 1.5,
                                                                                          0.5)
    assert [r.run for r in seeded.eval_runs(limit=1)] == ["run-later"]  # the newest runs


def test_a_stored_run_reads_back_as_results_for_the_bootstrap(tmp_path, capsys):
    """`evorag eval` stores a run; `load_run` gives back its results (what the Evaluate tab of a restarted studio
    compares and opens): q1 right, q2 wrong, q3 refused, in question order, with their episodes' ids."""
    from evorag_core.evaluation.runner import compare_results
    from evorag_core.evaluation.traces import load_run

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"q1": [{"action": "ANSWER", "answer": "Dornbach"}],
                                  "q2": [{"action": "ANSWER", "answer": "the Danube"}],
                                  "q3": [{"action": "REFUSE"}]}), encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'eval.db'}"
    assert cli_main(["eval", "--method", "script", "--script", str(script), "--data", str(TINY), "--home",
                     str(tmp_path), "--db", db, "--json", "--no-progress"]) == 0
    name = json.loads(capsys.readouterr().out)["run"]
    with open_store(db) as s:
        run = load_run(s, name)
        (listed,) = s.eval_runs()
        with pytest.raises(KeyError, match="no stored evaluation run"):
            load_run(s, "no such run")
    assert (listed.run, listed.n, listed.em, listed.avg_steps) == (name, 3, pytest.approx(1 / 3), 1.0)
    assert [(r.question_id, r.em, r.refused, r.steps) for r in run.results] == [
        ("q1", 1.0, False, 1), ("q2", 0.0, False, 1), ("q3", 0.0, True, 1)]
    assert run.results[0].prediction == "Dornbach" and run.results[0].gold and run.label == "script"
    assert sorted(run.episode_ids) == ["q1", "q2", "q3"] and run.data_path.endswith("common_tiny.jsonl")
    assert compare_results(run.results, run.results, resamples=100)["em"]["diff"] == 0.0


# --- the studio's handlers over the query layer ------------------------------------------------------------------


@pytest.fixture
def svc(tmp_path):
    from app.common.services import Services
    from evorag_core.config import load_config

    services = Services(load_config(), tmp_path, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    yield services
    services.close()


def _signals(value: float) -> dict[str, float]:
    from evorag_core.env.signals import SIGNAL_NAMES

    return {k: value for k in SIGNAL_NAMES}


def test_open_trace_draws_steps_passages_and_links_and_explains_bad_ids(svc):
    from app.tabs.traces.handlers import open_trace
    from evorag_core.data.datasets import load_dataset

    q = load_dataset(DEMO).get("demo-001")
    pid = q.passages[0].pid
    steps = [Step(t=1, action="SEARCH", argument="Sable", passages=(pid,), signals=_signals(0.5),
                  weights={"beta": 2.0}, reward=1.0),
             Step(t=2, action="ANSWER", argument="Sable River", signals=_signals(1.0), weights={"beta": 2.0},
                  reward=1.5)]
    eid = svc.store().add_episode(question_id=q.id, dataset="demo", question=q.question, policy="oracle",
                                  stage="discovery", schedule="time-dynamic", steps=steps, total_return=2.5,
                                  source="studio", data_path=str(DEMO), outcome=Outcome("Sable River", 1.0, 1.0, False))
    view = open_trace(svc, f" {eid} ", base="http://studio.example/")
    assert view.link == f"http://studio.example/?episode={eid}"
    assert view.steps.count("<tr") == 3 and 'id="evo-trace-steps"' in view.steps  # header + 2 steps
    assert q.passages[0].title in view.passages and "t = 1: SEARCH" in view.passages
    assert f"gold answer: {', '.join(q.answers)}" in view.head and "correct · EM 1 · F1 1.00" in view.head
    assert "question=demo-001" in view.head and f'data-episode="{eid}"' in view.head
    with pytest.raises(KeyError, match="there is no trace #999"):
        open_trace(svc, 999)
    for bad in ("abc", "1.5", "-3", ""):
        with pytest.raises(ValueError, match="is not a trace id"):
            open_trace(svc, bad)


def test_list_traces_pages_and_says_why_nothing_matches(svc):
    from app.tabs.traces.handlers import list_traces, trace_filter

    for i in range(30):
        svc.store().add_episode(question_id=f"q{i}", dataset="demo", question=f"question {i}", policy="oracle",
                                stage="discovery", schedule="time-dynamic", source="eval", total_return=float(i))
    view = list_traces(svc, trace_filter(), 2)
    assert (view.page, view.pages, len(view.rows)) == (2, 2, 5) and "traces 26–30 of 30" in view.summary
    assert view.ids == [5, 4, 3, 2, 1] and view.rows[0][0] == 5
    assert list_traces(svc, trace_filter(), 9).page == 2  # past the end: the last page
    none = list_traces(svc, trace_filter(source="rollout", text="zebra"))
    assert none.rows == [] and "No trace matches source=rollout, text=zebra" in none.summary


def test_the_filter_form_names_the_bad_field():
    from app.tabs.traces.handlers import trace_filter

    assert trace_filter("all", "", None, "all", f1_min=" 0.5 ").f1_min == 0.5
    empty = trace_filter("all", "all", "all", "all", "all", "all", "all", "", " ", "", "", "all", "", "", "", "newest")
    assert empty.active() == {}  # the form's untouched state filters nothing
    for kwargs, message in (({"f1_min": "lots"}, "lowest F1 'lots' is not a number"),
                            ({"f1_max": 3}, "highest F1 must be between 0 and 1"),
                            ({"date_from": "yesterday"}, "'from' date 'yesterday' is not a date"),
                            ({"return_min": 2, "return_max": 1}, "the return range is empty")):
        with pytest.raises(ValueError, match=message):
            trace_filter(**kwargs)
