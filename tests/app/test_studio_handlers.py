"""The studio's handlers without a browser: real demo data, real retrieval indexes, a real SQLite store.

Weights used in the hand-computed expectations (SPEC Table 2, discovery = Start -> Mid, T_max = 20):
t = 1: beta = 2.0, rho = 0.5, eta = 0.02;  t = 2: p = 1/19, rho = 0.5, eta = 0.02 + 0.03/19 = 0.021579.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import gradio as gr
import pytest

from tests.paths import DEMO
from app.common import views, pickers, policies
from app.common.services import Services
from app.common.session import EpisodeSettings
from app.common.wiring import annotator_name, error_message, guard
from app.tabs.episode import handlers as episode_handlers
from app.tabs.evaluate import handlers as evaluate_handlers
from app.tabs.pairs import handlers as pairs_handlers
from app.tabs.training import handlers as training_handlers
from evorag_core.config import load_config
from evorag_core.errors import ActionParseError, AdapterError, ConfigError, EnvStateError
from evorag_core.env.signals import SIGNAL_NAMES
from evorag_core.store import NewPair

ETA_2 = 0.02 + 0.03 / 19


@pytest.fixture(scope="module")
def svc(session_home, tmp_path_factory) -> Services:
    db = tmp_path_factory.mktemp("studio_db") / "studio.db"
    services = Services(load_config(), session_home, data_path=DEMO, db_url=f"sqlite:///{db}")
    yield services
    services.close()


def _settings(**kw) -> EpisodeSettings:
    return EpisodeSettings(**{"policy": "oracle", **kw})


def test_load_data_lists_the_demo_questions(svc):
    info = pickers.load_data(svc, str(DEMO))
    assert info.questions[0][1] == "demo-001"
    assert len(info.questions) == 52
    assert info.summary.startswith("demo: 52 questions, 210 distinct passages searched "
                                   "(494 listed with the questions)")
    assert any(label.endswith("demo.jsonl") for label, _ in pickers.data_choices(svc))


def test_three_oracle_steps_show_signals_weights_and_return(svc):
    """demo-001 with the oracle: SEARCH, SEARCH, ANSWER.
    t = 1: SEARCH hits gold -> ret = +1, step = -1: R_1 = 2.0 * 1 + 0.02 * (-1) = 1.98."""
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001"))
    assert "No steps yet" in view.steps
    keys = []
    for _ in range(3):
        view, sess = episode_handlers.step_episode(sess)
        keys.append(view.weights_key)
    rec = sess.record
    assert [type(s.action).__name__ for s in rec.steps] == ["Search", "Search", "Answer"]
    # the page redraws the chart only when its key changes: the answer keeps the marked step (t = 3) but adds markers
    assert len(set(keys)) == 3
    assert rec.steps[0].reward == pytest.approx(1.98)
    assert rec.answer == "Sable River" and rec.done
    assert view.steps.count("<tr") == 4  # header + 3 steps
    assert f"{rec.total_return:+.3f}" in view.steps and f"{rec.total_return:+.3f}" in view.status
    assert all(f'title="{views.SIGNAL_LABELS[k]}">{k}<' in view.steps for k in SIGNAL_NAMES)
    # weight chart: seven lines over t = 1..20, the three steps' own weights as markers, the current step marked
    lines = [tr for tr in view.weights.data if tr.mode == "lines"]
    marks = [tr for tr in view.weights.data if tr.mode == "markers"]
    assert len(lines) == 7 and list(lines[0].x) == list(range(1, 21))
    assert len(marks) == 7 and all(list(m.x) == [1, 2, 3] for m in marks)
    assert view.weights.layout.shapes[0].x0 == 3
    # contributions: seven stacked bar series + R_t; per step the bars sum to R_t
    bars = [tr for tr in view.contributions.data if tr.type == "bar"]
    assert len(bars) == 7
    for i, step in enumerate(rec.steps):
        assert sum(tr.y[i] for tr in bars) == pytest.approx(step.reward)
    assert "Evidence in the active chain" in view.passages  # ANSWER retrieves nothing: the chain is shown
    with pytest.raises(EnvStateError):
        episode_handlers.step_episode(sess)


def test_step_passages_are_numbered_and_gold_is_marked(svc):
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001"))
    view, sess = episode_handlers.step_episode(sess)
    assert "[1] " in view.passages and "[5] " in view.passages
    assert view.passages.count('class="badge gold"') == 1  # 'Ansel Travine' is the one gold passage retrieved
    assert "Passages retrieved at t = 1" in view.passages


def test_refusal_override_recomputes_signal_and_return_and_is_stored(svc):
    """Script: SEARCH 'Ansel Travine', REFUSE on demo-001 (2 gold passages, 1 retrieved -> unanswerable).
    Judge: ref = +1 -> R_2 = 0.5 - eta(2) = 0.478421. Override 'answerable': ref = -1 -> R_2 = -0.521579,
    the return drops by exactly 2 * rho = 1.0."""
    script = json.dumps([{"action": "SEARCH", "query": "Ansel Travine"}, {"action": "REFUSE"}])
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001", policy="script", script=script))
    view, sess = episode_handlers.run_to_end(sess)
    assert view.judged_steps == [2]
    assert "unanswerable" in view.verdicts and ">gold<" in view.verdicts
    before = sess.record.total_return
    assert sess.record.steps[1].reward == pytest.approx(0.5 - ETA_2)

    view, sess = episode_handlers.override_verdict(sess, 2, "answerable", "tester")
    step = sess.record.steps[1]
    assert step.signals["ref"] == -1.0
    assert step.reward == pytest.approx(-0.5 - ETA_2)
    assert sess.record.total_return == pytest.approx(before - 1.0)
    assert ">human<" in view.verdicts and "tester" in view.verdicts and "badge human" in view.steps

    store = svc.store()
    assert store.effective_verdict(sess.db_id, 2) == "answerable"
    assert [j.who for j in store.judgments(sess.db_id) if j.is_override] == ["tester"]
    assert store.get_episode(sess.db_id).total_return == pytest.approx(before - 1.0)
    # the stored step follows too (the trace's row and its header agree with this page)
    stored = store.get_episode(sess.db_id)
    assert stored.steps[1].signals["ref"] == -1.0 and stored.steps[1].reward == pytest.approx(step.reward)
    assert sum(s.reward for s in stored.steps) == pytest.approx(stored.total_return)


def test_override_needs_a_judged_step(svc):
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001"))
    view, sess = episode_handlers.step_episode(sess)
    with pytest.raises(ValueError, match="no judge verdict"):
        episode_handlers.override_verdict(sess, 1, "answerable", "x")
    with pytest.raises(ValueError, match="answerable"):
        episode_handlers.override_verdict(sess, 1, "maybe", "x")


def test_episode_is_mirrored_to_the_store(svc):
    """Unanswerable demo-004: the oracle refuses at t = 1; R_1 = 0.5 * (+1) + 0.02 * (-1) = 0.48."""
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-004"))
    view, sess = episode_handlers.run_to_end(sess)
    ep = svc.store().get_episode(sess.db_id)
    assert ep.status == "finished" and ep.question_id == "demo-004"
    assert [s.action for s in ep.steps] == ["REFUSE"]
    assert ep.steps[0].judge_verdict == "unanswerable"
    assert ep.total_return == pytest.approx(0.48)
    # the Traces tab's columns: a studio session, refused an unanswerable question = correct (EM 1), one step
    assert (ep.source, ep.refused, ep.answer, ep.em, ep.f1, ep.n_steps) == ("studio", True, None, 1.0, 1.0, 1)
    assert ep.data_path == str(DEMO.resolve()) and ep.adapter is None


def test_free_question_has_no_gold_so_no_retrieval_bonus(svc):
    script = json.dumps([{"action": "SEARCH", "query": "Sable River"}, {"action": "ANSWER", "answer": "x"}])
    view, sess = episode_handlers.start_episode(
        svc, _settings(policy="script", script=script, free_question="Which river flows through Mirrow?"))
    assert sess.question.id.startswith("free-") and "unknown (free question)" in view.status
    view, sess = episode_handlers.run_to_end(sess)
    assert [s.signals["ret"] for s in sess.record.steps] == [0.0, 0.0]
    assert sess.record.steps[1].signals["ans"] == 0.0
    assert "badge gold" not in episode_handlers.episode_view(sess).passages
    # a blank typed question: the picked question is asked, and the message says so
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-002", free_question="   "))
    assert sess.question.id == "demo-002" and "typed question was blank" in view.message


def test_passage_text_from_an_uploaded_file_is_escaped(svc, tmp_path):
    evil = {
        "id": "x1", "dataset": "evil", "question": "Who wrote <b>bold</b>?", "answers": ["<img src=x onerror=alert(1)>"],
        "passages": [
            {"pid": "evil:x1:0", "title": "<script>alert('t')</script>", "text": "<img src=x onerror=alert(2)> & co",
             "gold": True},
            {"pid": "evil:x1:1", "title": "Other", "text": "plain text", "gold": False},
        ],
    }
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps(evil) + "\n", encoding="utf-8")
    info = pickers.upload_data(svc, str(path))
    kept = Path(info.path)
    assert info.questions[0][1] == "x1" and kept.name == "evil.jsonl" and kept.is_file()
    assert kept.parent.parent == (svc.home / "uploads").resolve()  # uploads/<content hash>/evil.jsonl
    view, sess = episode_handlers.start_episode(svc, _settings(data_path=info.path, question_id="x1"))
    view, sess = episode_handlers.run_to_end(sess)
    html_out = view.status + view.steps + view.passages + episode_handlers.episode_view(sess).passages
    for raw in ("<script>", "<img", "<b>bold"):
        assert raw not in html_out
    assert "&lt;script&gt;" in episode_handlers.episode_view(sess).passages
    assert "&lt;b&gt;bold&lt;/b&gt;" in view.status


def test_readable_errors_for_bad_input(svc, tmp_path):
    with pytest.raises(ValueError, match="press Reset"):
        episode_handlers.step_episode(None)
    with pytest.raises(ActionParseError, match="not valid JSON"):
        episode_handlers.start_episode(svc, _settings(policy="script", script="[{"))
    with pytest.raises(KeyError, match="nope"):
        episode_handlers.start_episode(svc, _settings(question_id="nope"))
    with pytest.raises(ConfigError, match="unknown stage"):
        episode_handlers.start_episode(svc, _settings(stage="middle"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n', encoding="utf-8")
    with pytest.raises(Exception) as info:
        pickers.upload_data(svc, str(bad))  # a typed path outside the studio's data folders is refused
    assert "bad.jsonl" in str(info.value)


def test_siblings_need_a_language_model_policy(svc):
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001"))
    with pytest.raises(policies.FeatureUnavailable, match="language-model policy"):
        episode_handlers.sample_siblings(sess, 4, 0.8, 0)


def test_guard_turns_errors_into_readable_page_messages(caplog):
    """Outside a running page gr.Warning becomes a Python warning; the outputs are left as they are (gr.skip())."""

    def boom_value():
        raise ValueError("bad <input>")

    def boom_bug():
        raise ZeroDivisionError("division by zero")

    with pytest.warns(UserWarning, match="bad &lt;input&gt;"):
        assert guard(boom_value, 2)() == (gr.skip(), gr.skip())
    with pytest.warns(UserWarning) as seen:
        assert guard(boom_bug, 1)() == gr.skip()
    msg = str(seen[0].message)
    assert "internal error (ZeroDivisionError)" in msg and "Traceback" not in msg
    assert "ZeroDivisionError" in caplog.text  # the traceback goes to the server log
    assert guard(boom_value, 1, quiet=True)() == gr.skip()  # timer ticks: no toast
    assert error_message(KeyError("no pair 3")) == "no pair 3"


def test_pairs_filters_counts_edit_discard_restore(svc):
    store = svc.store()
    a = store.add_pair("state A", "SEARCH: a", "SEARCH: b", source="human", annotator="ann", stage="discovery")
    b = store.add_pair("state B", "ANSWER: x", "REFUSE", source="rollout", stage="refinement", margin=0.5)
    view = pairs_handlers.pairs_view(svc, source="human", status="all", annotator="ann", stage="all")
    assert [pid for _, pid in view.ids] == [a]
    assert 'id="evo-pair-total">1<' in view.counts
    view = pairs_handlers.pairs_view(svc, "all", "all", "", "all")
    assert {a, b} <= {pid for _, pid in view.ids}
    prompt, *fields = pairs_handlers.pair_fields(svc, a)
    assert fields == ["SEARCH: a", "SEARCH: b", "discovery"]
    assert 'data-format="raw"' in prompt and "state A" in prompt  # not ChatML: shown as it is
    assert "saved" in pairs_handlers.edit_pair(svc, a, "SEARCH: b", "SEARCH: a", "refinement")
    assert store.get_pair(a).chosen == "SEARCH: b" and store.get_pair(a).stage == "refinement"
    with pytest.raises(ValueError, match="differ"):
        pairs_handlers.edit_pair(svc, a, "same", "same", "")
    with pytest.raises(ValueError, match="the chosen completion has 1,000,000 characters; texts typed in the "
                                         "studio are at most 2,000"):  # #44 item 7: was stored
        pairs_handlers.edit_pair(svc, a, "SEARCH: " + "x" * 999_992, "SEARCH: a", "")
    with pytest.raises(ValueError, match="the stage is one of discovery, refinement, or empty"):
        pairs_handlers.edit_pair(svc, a, "SEARCH: b", "SEARCH: a", "bogus-stage")
    assert store.get_pair(a).chosen == "SEARCH: b" and store.get_pair(a).stage == "refinement"
    assert "discarded" in pairs_handlers.discard_pair(svc, b)
    assert store.get_pair(b).status == "discarded"
    assert b in [pid for _, pid in pairs_handlers.pairs_view(svc, "all", "discarded", "", "all").ids]
    assert "queued again" in pairs_handlers.restore_pair(svc, b)
    assert store.get_pair(b).status == "queued"


def test_training_round_progress_history_and_adapter_activation(svc, tmp_path):
    """The studio side of a round: enqueue -> (a worker claims it and reports progress) -> succeeded -> the
    registered adapter is listed with its metrics; Activate verifies it first."""
    store = svc.store()
    store.add_pairs([NewPair(f"state {i}", "SEARCH: a", "ANSWER: b", source="human") for i in range(8)])
    msg, rid = training_handlers.launch_round(svc, "dpo", 8, 1, 5e-5, "k2", "human", "all")
    assert f"Round #{rid} queued" in msg
    r = store.get_round(rid)
    assert r.status == "queued" and r.config["pairs"] == 8 and r.config["source"] == "human"
    assert "kl" not in r.config and "episodes" not in r.config  # DPO's job holds only the keys DPO reads
    with pytest.raises(ValueError, match="objective"):
        training_handlers.launch_round(svc, "sft", 8, 1, 5e-5, "k2")

    # stand-in for the worker process: the same store calls it makes; `page`: what one browser page has seen
    assert store.claim_round("test-worker", 60).id == rid
    page = training_handlers.ChartHistory()
    store.heartbeat(rid, "test-worker", {"step": 1, "total": 4, "loss": 0.69, "elapsed_s": 1.0, "phase": "train"})
    view = training_handlers.training_view(svc, now=store.get_round(rid).heartbeat_at, history=page)
    assert "running · training" in view.progress and "step 1/4" in view.progress and "ETA 3 s" in view.progress
    store.heartbeat(rid, "test-worker", {"step": 2, "total": 4, "loss": 0.61, "eta": 1.5})
    view = training_handlers.training_view(svc, history=page)
    assert list(view.loss.data[0].y) == [0.69, 0.61]
    store.finish_round(rid, metrics={"loss": 0.55, "margin_accuracy": 0.75}, worker_id="test-worker")
    name = f"round{rid}-dpo"
    store.register_adapter(name, str(tmp_path), base_model="embedded", round_id=rid, objective="dpo",
                           metrics={"margin_accuracy": 0.75})
    view = training_handlers.training_view(svc)
    assert "succeeded" in view.progress and name in view.adapters and "margin_accuracy" in view.adapters
    assert view.live == "base model"
    assert ("LM · adapter " + name, "lm:" + name) in pickers.policy_options(svc)

    # the stand-in registered an empty folder: Activate verifies and refuses it (a real adapter going live, and
    # refusals of garbled ones: tests/app/test_studio_activation.py)
    with pytest.raises(AdapterError, match="missing adapter_model.safetensors.*the base model stays live"):
        training_handlers.activate_adapter(svc, name)
    assert training_handlers.training_view(svc).live == "base model"
    assert 'id="evo-live-adapter">base model<' in training_handlers.header_status(svc)
    training_handlers.use_base_model(svc)
    assert training_handlers.training_view(svc).live == "base model"


def test_training_view_plots_kl_per_step_for_both_estimators(svc):
    """An arena-grpo round (k2 optimised, k3 logged beside it): while it runs, each heartbeat's kl_k2/kl_k3 adds a
    point; once finished, the recorded kl_history replaces what the UI saw. A DPO round logs no KL: the figure says
    so instead of plotting nothing."""
    store = svc.store()
    page = training_handlers.ChartHistory()  # what one browser page has seen
    rid = store.enqueue_round("arena-grpo", {"objective": "arena-grpo", "kl": "k2"})
    assert store.claim_round("test-worker", 60).id == rid
    for step, k2, k3 in ((1, 0.0, 0.0), (2, 0.004, 0.0041)):
        store.heartbeat(rid, "test-worker", {"step": step, "total": 3, "loss": 0.1, "kl": k2, "kl_k2": k2,
                                             "kl_k3": k3})
        view = training_handlers.training_view(svc, history=page)
    names = [trace.name for trace in view.kl.data]
    assert names == ["k2 = ½(log r)²", "k3 = r − log r − 1"]  # "kl" repeats k2 here and is left out
    assert list(view.kl.data[0].y) == [0.0, 0.004] and list(view.kl.data[1].y) == [0.0, 0.0041]
    history = [{"step": 1, "kl": 0.0, "kl_k2": 0.0, "kl_k3": 0.0}, {"step": 2, "kl": 0.004, "kl_k2": 0.004,
               "kl_k3": 0.0041}, {"step": 3, "kl": 0.009, "kl_k2": 0.009, "kl_k3": 0.0095}]
    store.finish_round(rid, metrics={"kl_history": history}, worker_id="test-worker")
    view = training_handlers.training_view(svc)
    assert list(view.kl.data[1].x) == [1, 2, 3] and list(view.kl.data[1].y) == [0.0, 0.0041, 0.0095]
    assert view.kl_visible
    store.add_pair("state", "SEARCH: a", "ANSWER: b")
    training_handlers.launch_round(svc, "dpo", 8, 1, 5e-5, "k3")
    view = training_handlers.training_view(svc)
    assert not view.kl.data and "no per-step KL" in str(view.kl.layout.annotations[0].text)
    assert not view.kl_visible  # the page hides the empty KL panel for DPO


def test_evaluate_slice_bootstrap_and_drill_down(svc):
    """Oracle on demo[0:4]: demo-001..003 answered (EM 1), demo-004 unanswerable -> REFUSE (EM 0): EM = 0.75.
    A script that refuses at once scores EM 0 everywhere: A - B = +0.75 on EM."""
    seen = []
    runs, run = evaluate_handlers.run_eval(svc, {}, str(DEMO), "oracle", "", 0, 4, lambda d, t, r: seen.append((d, t)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert run.summary["n"] == 4 and run.summary["em"] == pytest.approx(0.75)
    runs, run_b = evaluate_handlers.run_eval(svc, runs, str(DEMO), "script", '[{"action": "REFUSE"}]', 0, 4)
    assert run_b.summary["em"] == 0.0 and run_b.summary["avg_steps"] == 1.0
    summary = evaluate_handlers.eval_summary(svc, runs)
    assert run.name in summary and run_b.name in summary
    boot = evaluate_handlers.compare_runs(svc, runs, run.name, run_b.name, resamples=500)
    assert "4 common questions" in boot and "<td>+0.7500</td>" in boot
    assert boot.count("too few common questions (n=4 &lt; 20) to call significance") == 3  # no verdict on 4
    with pytest.raises(ValueError, match="different"):
        evaluate_handlers.compare_runs(svc, runs, run.name, run.name)
    head, steps, fig = evaluate_handlers.drill_down(svc, runs, run.name, "demo-002")
    assert "prediction: <b>Sable River</b>" in head and "EM 1" in head
    assert steps.count("<tr") >= 3 and len(fig.data) == 8
    trace = run.episode_ids["demo-002"]  # every evaluated question is a stored trace, drawn as the Traces tab does
    assert f"?episode={trace}" in head and 'id="evo-trace-steps"' in steps and "t = 1: SEARCH" in steps
    row = svc.store().get_episode(trace)
    assert (row.source, row.em, row.answer, row.data_path) == ("eval", 1.0, "Sable River", str(DEMO.resolve()))
    assert evaluate_handlers.eval_questions(svc, runs, run.name)[0][0].startswith("✓ demo-001")
    with pytest.raises(ValueError, match="holds no question"):
        evaluate_handlers.run_eval(svc, runs, str(DEMO), "oracle", "", 100, 5)


def test_a_restarted_studio_lists_compares_and_opens_the_earlier_runs(svc):
    """Issue #46 item 7: the runs were kept in the page only and vanished on restart, their traces stayed stored. A
    new Services on the same database, with an empty page, lists both runs from the store (oracle EM 0.75, refusing
    script EM 0 on demo[0:4]), bootstraps them (+0.75) and opens a question's stored trace."""
    _, run = evaluate_handlers.run_eval(svc, {}, str(DEMO), "oracle", "", 0, 4)
    _, run_b = evaluate_handlers.run_eval(svc, {}, str(DEMO), "script", '[{"action": "REFUSE"}]', 0, 4)
    assert run.name.startswith("oracle on demo · ")  # the store's run name
    _, again = evaluate_handlers.run_eval(svc, {}, str(DEMO), "oracle", "", 0, 1)
    assert again.name != run.name  # two runs within a second are two runs (run names have 1 s resolution)
    free = evaluate_handlers._free_run_name(svc.store(), run.name)  # "(2)", or "(3)" when `again` fell in run's second
    stored = {r.run for r in svc.store().eval_runs()}
    assert re.fullmatch(rf"{re.escape(run.name)} \(\d+\)", free) and free not in stored and run.name in stored
    restarted = Services(load_config(), svc.home, data_path=DEMO, db_url=svc.db_url)
    try:
        names = evaluate_handlers.run_names(restarted, {})
        assert names[-3:] == [run.name, run_b.name, again.name]
        summary = evaluate_handlers.eval_summary(restarted, {})
        row = re.search(rf"<tr><td>{re.escape(views.esc(run.name))}</td>(.*?)</tr>", summary).group(1)
        assert re.findall(r'<td class="num">([^<]*)</td>', row)[:3] == ["4", "0.75", "0.75"]  # n, EM, F1
        boot = evaluate_handlers.compare_runs(restarted, {}, run.name, run_b.name, resamples=500)
        assert "4 common questions" in boot and "<td>+0.7500</td>" in boot
        assert evaluate_handlers.eval_questions(restarted, {}, run.name)[0][0].startswith("✓ demo-001")
        head, steps, _ = evaluate_handlers.drill_down(restarted, {}, run.name, "demo-002")
        assert f"?episode={run.episode_ids['demo-002']}" in head and "t = 1: SEARCH" in steps
    finally:
        restarted.close()


def test_annotator_is_the_logged_in_user_when_there_is_one():
    """Else the typed name, up to studio.max_question_chars (2,000): a 1 MB name was stored before #44 item 7."""
    class Req:
        username = "alice"

    assert annotator_name("typed name", Req(), 2000) == "alice"
    assert annotator_name(" typed name ", None, 2000) == "typed name"
    assert annotator_name("x" * 2000, None, 2000) == "x" * 2000
    with pytest.raises(ValueError, match="the annotator name has 1,000,000 characters; texts typed in the studio "
                                         "are at most 2,000 characters long"):
        annotator_name("x" * 1_000_000, None, 2000)


def test_run_streams_one_view_per_step_and_refuses_a_finished_episode(svc):
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001"))
    seen = [v.steps.count("<tr") - 1 for v, _ in episode_handlers.run_steps(sess)]
    assert seen == [1, 2, 3]
    with pytest.raises(ValueError, match="ended"):
        next(episode_handlers.run_steps(sess))


def test_guard_keeps_generators_streaming_and_catches_their_errors():
    def gen():
        yield 1
        raise ValueError("stopped <here>")

    it = guard(gen, 2)()
    assert next(it) == 1
    with pytest.warns(UserWarning, match="stopped &lt;here&gt;"):
        assert next(it) == (gr.skip(), gr.skip())
    assert next(it, "end") == "end"


def test_studio_command_is_registered():
    from evorag_core.cli.main import build_parser

    args = build_parser().parse_args(["studio", "--port", "7999", "--no-worker", "--auth", "users.toml"])
    assert args.port == 7999 and args.no_worker and args.auth == "users.toml"


@pytest.mark.slow
def test_lm_siblings_scored_and_queued_as_a_human_pair(svc):
    """The embedded LM at t = 1 of demo-001: only SEARCH is allowed (no evidence yet, empty chain), so every
    candidate is a SEARCH; with horizon 0 its branch return is its own R_1 = 2.0 * ret + 0.02 * (-1), i.e.
    1.98 (gold retrieved) or -2.02. The queued pair is human, by the annotator, with the LM's ChatML prompt."""
    pytest.importorskip("evorag_core.policy")
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001", policy="lm:base"))
    assert sess.policy.adapter is None and "(base)" in sess.policy.label
    view, sess = episode_handlers.sample_siblings(sess, 4, 1.5, 0)
    assert len(sess.candidates) == 4 and {c["action"] for c in sess.candidates} == {"SEARCH"}
    assert all(c["logprob"] < 0 and c["completion"].startswith("SEARCH: ") for c in sess.candidates)
    view, sess = episode_handlers.score_siblings(sess, 0)
    for c in sess.candidates:
        assert c["branch_steps"] == 1
        assert c["branch_return"] == pytest.approx(1.98) or c["branch_return"] == pytest.approx(-2.02)
    assert "branch return" in view.candidates and len(view.candidate_choices) == 4
    completions = [c["completion"] for c in sess.candidates]
    j = next((j for j in range(1, 4) if completions[j] != completions[0]), None)
    if j is None:
        pytest.skip("the four sampled candidates were identical")
    msg, pid = episode_handlers.queue_pair(sess, svc, 1, j + 1, "ann-lm")
    pair = svc.store().get_pair(pid)
    assert pair.source == "human" and pair.annotator == "ann-lm" and pair.stage == "discovery"
    assert pair.chosen == completions[0] and pair.rejected == completions[j]
    assert pair.prompt.endswith("<|im_start|>assistant\n") and "Ansel Travine" in pair.prompt
    assert pair.metadata["t"] == 1 and pair.metadata["question_id"] == "demo-001"
    # a pair against its branch returns (or a tie) is kept, and the message says the returns disagree
    disagree = pair.margin is not None and pair.margin <= 0
    assert ("the branch returns do not agree" in msg) == disagree, (msg, pair.margin)
    with pytest.raises(ValueError, match="different"):
        episode_handlers.queue_pair(sess, svc, 1, 1, "ann-lm")
    view, sess = episode_handlers.step_episode(sess)  # the step taken after sampling carries the siblings into the store
    assert sess.record.steps[0].info["completion"].startswith("SEARCH")
    stored = svc.store().get_episode(sess.db_id).steps[0]
    assert len(stored.siblings) == 4 and stored.siblings[0].branch_return is not None


def _result(qid: str, trace=(), extras=None):
    from evorag_core.methods.base import QuestionResult

    return QuestionResult(qid, "demo", "q <i>?</i>", "Sable River", ("Sable River",), 1.0, 1.0, len(trace), (), None,
                          False, tuple(trace), extras=extras or {})


def test_drill_down_shows_dynakrag_and_arena_traces(svc):
    """Other `evorag eval` methods are offered, and their traces open in the drill-down (escaped)."""
    assert ("eval · dynakrag", "eval:dynakrag") in evaluate_handlers.eval_method_options(svc)
    dyn = _result("d1", [{"step": 1, "valid": ["retrieve_more", "stop_answer"], "scores": {"retrieve_more": 0.25},
                          "chosen": "retrieve_more", "query": "<b>x</b>", "state": {"docs": []}}])
    ids = [p.pid for p in svc.runtime(str(DEMO)).dataset.get("demo-001").passages[:2]]
    arena = _result("a1", extras={"arena": {"text": "<relevance>[1]</relevance><analysis>See [1].</analysis>"
                                                    "<answer>Sable River</answer>", "references": ids,
                                            "gold_ids": [1]}})
    runs = {"r": evaluate_handlers.EvalRun("r", "m", "demo", {}, [dyn, arena], str(DEMO))}
    head, body, _ = evaluate_handlers.drill_down(svc, runs, "r", "d1")
    assert "retrieve_more (0.250)" in body and "&lt;b&gt;x&lt;/b&gt;" in body and "<b>x</b>" not in body
    assert "q &lt;i&gt;?&lt;/i&gt;" in head
    head, body, _ = evaluate_handlers.drill_down(svc, runs, "r", "a1")
    assert "Answer: Sable River" in body and "well-formed" in body and "[2]" in body


def test_one_action_at_a_time_per_episode(svc):
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001"))
    with sess.exclusive():
        with pytest.raises(ValueError, match="busy"):
            episode_handlers.step_episode(sess)
    view, sess = episode_handlers.step_episode(sess)
    assert len(sess.record.steps) == 1


class _ArenaAnswer:
    """An EpisodePolicy that answers with a fixed ARENA reply over the active chain's reader passages, recorded
    exactly as LMPolicy(answer_with="arena") records it (`ArenaOutput.details()`)."""

    name = "arena-test"

    def __init__(self, text: str):
        self.text = text

    def begin(self, question) -> None:
        pass

    def act(self, view):
        from evorag_core.env.actions import Answer
        from evorag_core.reader.arena.generator import ArenaGenerator
        from evorag_core.policy.agent import reader_passages

        refs = tuple(reader_passages(view, 5))
        reply = ArenaGenerator.output("prompt", refs, self.text)
        return Answer(reply.answer), {"completion": f"ANSWER: {reply.answer}", "arena": reply.details()}


def test_arena_answer_step_shows_citations_relevance_and_rewards(svc):
    """demo-001: the oracle searches twice, then an ARENA reply answers (`--answerer arena`). The breakdown gets
    the answer view: [1]/[2] link to the step's numbered references, the relevance list is set against the gold
    ids (from the references' pids), and the four rewards are shown (format 1, EM 1 for 'Sable River')."""
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001"))
    for _ in range(2):
        view, sess = episode_handlers.step_episode(sess)
    assert "arena-view" not in view.breakdown
    text = ("<relevance>[1,2]</relevance><analysis>The river is named in [1] and confirmed by [2].</analysis>"
            "<answer>Sable River</answer>")
    sess.policy.policy = _ArenaAnswer(text)
    view, sess = episode_handlers.step_episode(sess)
    step = sess.record.steps[-1]
    arena = step.info["arena"]
    assert arena["format_ok"] and arena["relevance"] == [1, 2] and arena["selected"] == arena["references"][:2]
    assert sess.record.answer == "Sable River"
    assert 'id="arena-step-3"' in view.breakdown
    assert 'href="#arena-step-3-ref-1"' in view.breakdown and 'href="#arena-step-3-ref-2"' in view.breakdown
    gold = [i for i, pid in enumerate(arena["references"], 1) if pid in set(sess.record.gold_pids)]
    assert gold and f"gold: {', '.join(map(str, gold))}" in view.breakdown
    assert "<td>1</td><td>1</td>" in view.breakdown  # format 1, accuracy 1


def test_lm_step_starts_from_the_prefill_done_while_the_page_was_read(svc):
    """After Reset and after each Step the session prefills the next greedy decision in a background thread; the
    Step that follows runs at most a few prompt tokens of its own (the whole prompt when nothing was prepared:
    several hundred), and the episode proceeds exactly as usual."""
    pytest.importorskip("evorag_core.policy")
    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001", policy="lm:base"))
    backend = svc.policies._get_backend()
    for _ in range(2):
        assert sess.preparing is not None
        sess.preparing.join(120)
        before = backend.prompt_tokens
        view, sess = episode_handlers.step_episode(sess)
        assert backend.prompt_tokens - before <= 8
        if sess.done:
            break
    assert sess.record.steps and sess.record.steps[0].info["completion"].startswith("SEARCH")
    oracle_view, oracle = episode_handlers.start_episode(svc, _settings(question_id="demo-001"))
    assert oracle.preparing is None  # only LM policies prepare


def test_sibling_scoring_reports_progress_and_a_stop_keeps_no_branch_return(svc):
    """Two hand-made siblings at t = 1 of demo-001 (the oracle continues): progress hears (1, 2) then (2, 2) and
    both returns are written; with the Stop flag set, scoring ends before any policy step and nothing is written,
    and the environment is back at the branch point either way."""
    import threading

    from evorag_core.live.episode import Candidate
    from evorag_core.env.actions import Refuse, Search

    view, sess = episode_handlers.start_episode(svc, _settings(question_id="demo-001"))
    sess.set_candidates([Candidate(Search("Ansel Travine"), None), Candidate(Refuse(), None)])
    t_before = sess.env.view().t
    stop = threading.Event()
    stop.set()
    view, sess = episode_handlers.score_siblings(sess, 3, stop=stop)
    assert "Stopped: scoring was cancelled" in view.message
    assert all("branch_return" not in c for c in sess.candidates) and sess.env.view().t == t_before
    heard = []
    view, sess = episode_handlers.score_siblings(sess, 3, lambda done, total: heard.append((done, total)))
    assert heard == [(1, 2), (2, 2)] and all("branch_return" in c for c in sess.candidates)
    assert sess.candidates[1]["branch_steps"] == 1 and sess.env.view().t == t_before  # REFUSE ends its branch
