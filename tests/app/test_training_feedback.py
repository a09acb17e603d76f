"""The Training tab's feedback (issue #24 item 5), through its handlers on a real SQLite store: launch checked
against the pairs/episodes available (capped with a message, refused when none), cancel from the studio, progress
in phases with elapsed time and an ETA from measured step times, whole-step chart ticks, the KL panel hidden for
DPO. No model is loaded: a stand-in worker makes the store calls the worker makes.
"""
from __future__ import annotations

import re
from datetime import timedelta

import plotly.graph_objects as go
import pytest

from tests.paths import DEMO
from app.common import round_progress
from app.common.services import Services
from app.tabs.training import handlers as th
from evorag_core.config import load_config
from evorag_core.store import NewPair



@pytest.fixture()
def svc(tmp_path):
    services = Services(load_config(), tmp_path, data_path=DEMO, db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    yield services
    services.close()


def _row(table: str, round_id: int) -> list[str]:
    """The cells of round `round_id`'s row in the rounds table (round, objective, status, pairs / episodes, ...)."""
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in table.split("<tr>")]
    return next(cells for cells in rows if cells and cells[0] == str(round_id))


def _pairs(svc, n: int, source: str = "human") -> None:
    svc.store().add_pairs([NewPair(f"state {i}", "SEARCH: a", "ANSWER: b", source=source) for i in range(n)])


def test_a_request_above_the_available_pairs_is_capped_and_the_rounds_table_shows_the_cap(svc):
    """6 human + 2 rollout pairs queued. 64 human pairs asked -> 6 (message says 64 asked, 6 available); the table
    row says 6. 5 of all sources -> not capped. The availability line counts with the filters."""
    _pairs(svc, 6)
    _pairs(svc, 2, source="rollout")
    assert th.available(svc, "dpo", "human", "all") == ("pairs", 6)
    assert th.available(svc, "dpo", "all", "all") == ("pairs", 8)
    assert '8 queued pairs available for DPO' in th.availability_text(svc, "dpo", "all", "all")
    assert 'data-n="6"' in th.availability_text(svc, "dpo", "human", "all")
    done = th.launch(svc, "dpo", 64, 1, 5e-5, "k3", "human", "all")
    assert done.capped and done.message.startswith("Capped: 64 pairs asked, only 6 available, so the round uses 6.")
    assert svc.store().get_round(done.round_id).config["pairs"] == 6
    assert _row(th.training_view(svc).rounds, done.round_id)[:4] == [str(done.round_id), "dpo", "queued", "6"]
    small = th.launch(svc, "dpo", 5, 1, 5e-5, "k3")
    assert not small.capped and "Capped" not in small.message and svc.store().get_round(small.round_id).config["pairs"] == 5


def test_nothing_available_refuses_the_launch_and_queues_nothing(svc):
    with pytest.raises(ValueError, match="Not launched: no queued pairs match"):
        th.launch(svc, "dpo", 8, 1, 5e-5, "k3")
    with pytest.raises(ValueError, match="Not launched: no finished episodes are stored"):
        th.launch(svc, "grpo", 8, 1, 5e-5, "k3", episodes=32)
    assert svc.store().list_rounds() == []
    assert th.available(svc, "ppo") == ("episodes", 0)


def test_cancel_from_the_studio_queued_then_running(svc):
    """A queued round: cancelled at once. A running one: "cancelling" until the worker confirms (stand-in)."""
    _pairs(svc, 4)
    first = th.launch(svc, "dpo", 2, 1, 5e-5, "k3").round_id
    second = th.launch(svc, "dpo", 2, 1, 5e-5, "k3").round_id
    assert [i for _, i in th.training_view(svc).cancellable] == [second, first]
    store = svc.store()
    assert store.claim_round("w", 60).id == first
    store.claim_pairs(first, 2)
    assert "cancelled before it started" in th.cancel_round(svc, second)
    assert "cancel requested" in th.cancel_round(svc, first)
    view = th.training_view(svc)
    assert [label for label, _ in view.cancellable] == [f"#{first} dpo · cancelling"]
    assert "cancelling" in view.rounds
    store.confirm_cancel(first, worker_id="w")
    view = th.training_view(svc)
    assert view.cancellable == [] and store.count_pairs("status") == {"queued": 4}
    with pytest.raises(ValueError, match="choose a queued or running round"):
        th.cancel_round(svc, None)


def test_progress_reads_in_phases_with_elapsed_time_and_a_counting_down_eta(svc):
    """Step 4 of 10 after 8 s of training: 2 s/step, 6 steps left -> ETA 12 s at the heartbeat, 9 s three seconds
    later. Before the first step the phase is "loading model" and the ETA waits for a measured step."""
    _pairs(svc, 2)
    rid = th.launch(svc, "dpo", 2, 1, 5e-5, "k3").round_id
    store = svc.store()
    assert 'data-phase="queued"' in th.training_view(svc).progress
    assert "waiting for a worker" in th.training_view(svc).progress
    claimed = store.claim_round("w", 60)
    store.heartbeat(rid, "w", {"phase": "load", "step": 0, "total": None})
    beat = store.get_round(rid).heartbeat_at
    html = th.training_view(svc, now=claimed.started_at + timedelta(seconds=95)).progress
    assert "running · loading model" in html and "elapsed 1 min 35 s" in html and '<span class="evo-phase current" data-phase="load"' in html
    store.heartbeat(rid, "w", {"phase": "train", "step": 4, "total": 10, "loss": 0.6, "elapsed_s": 8.0})
    beat = store.get_round(rid).heartbeat_at
    html = th.training_view(svc, now=beat).progress
    assert "step 4/10" in html and "ETA 12 s (2 s/step)" in html
    assert '<span class="evo-phase done" data-phase="prepare"' in html
    assert '<span class="evo-phase current" data-phase="train"' in html
    assert "ETA 9 s" in th.training_view(svc, now=beat + timedelta(seconds=3)).progress
    assert round_progress.eta_seconds({"step": 4, "total": 10, "elapsed_s": 8.0}, beat, beat + timedelta(60)) == 0.0
    # the worker stamps each step report ("at"); heartbeats without a new step must not hold the ETA up
    step_at = beat - timedelta(seconds=5)
    later_beat = beat + timedelta(seconds=2)
    progress = {"step": 4, "total": 10, "elapsed_s": 8.0, "at": step_at.timestamp()}
    assert round_progress.eta_seconds(progress, later_beat, beat) == pytest.approx(12.0 - 5.0)
    assert round_progress.eta_seconds(progress, later_beat, beat + timedelta(seconds=4)) == pytest.approx(3.0)


def test_loss_ticks_are_whole_steps_and_the_kl_panel_is_hidden_for_dpo(svc):
    """3 steps -> ticks every step (dtick 1, integer format); 45 steps -> every 5th step."""
    _pairs(svc, 2)
    rid = th.launch(svc, "dpo", 2, 1, 5e-5, "k3").round_id
    store = svc.store()
    store.claim_round("w", 60)
    store.finish_round(rid, metrics={"loss_history": [[1, 0.7], [2, 0.6], [3, 0.5]]}, worker_id="w")
    view = th.training_view(svc)
    axis = view.loss.layout.xaxis
    assert (axis.tickmode, axis.dtick, axis.tickformat) == ("linear", 1, "d") and list(view.loss.data[0].x) == [1, 2, 3]
    assert not view.kl_visible
    long = round_progress.integer_steps(go.Figure(view.loss), 45)  # a copy: the view's figures are shared, read-only
    assert long.layout.xaxis.dtick == 5


def test_the_log_panel_follows_the_newest_round_and_rerenders_only_on_new_lines(svc):
    """The panel shows the newest round unless one is picked; its key changes only with a new line (or a new status),
    so an unchanged key returns no HTML (the timer sends nothing). Messages are escaped, levels and multi-line
    messages kept, a gap shown as the lines left out, and the newest LOG_LINES_SHOWN lines at most."""
    from evorag_core.store import NewLogLine

    store = svc.store()
    assert th.round_log(svc, th.log_round_id("newest", None)) == (
        (None,), '<div class="evo-log-empty">No training round yet.</div>')
    first, second = store.enqueue_round("dpo"), store.enqueue_round("grpo")
    view = th.training_view(svc)
    assert view.newest_id == second
    assert view.log_choices[:2] == [("newest round", "newest"), (f"#{second} grpo", str(second))]
    assert th.log_round_id("newest", view.newest_id) == second and th.log_round_id(str(first), second) == first
    key, html = th.round_log(svc, second)
    assert "waiting for a worker" in html and f'data-round="{second}"' in html
    assert th.round_log(svc, second, key) == (key, None)  # nothing new: nothing re-rendered
    store.claim_round("w", 60, objective="grpo")
    store.add_round_logs(second, [NewLogLine("INFO", "claimed <b>x</b>"),
                                  NewLogLine("ERROR", "failed:\nTraceback\nValueError: y")])
    key2, html = th.round_log(svc, second, key)
    assert key2 != key and 'data-last-seq="2"' in html and "claimed &lt;b&gt;x&lt;/b&gt;" in html
    assert 'class="evo-log-line error" data-seq="2"' in html and "Traceback\nValueError: y" in html
    assert html.index("claimed") < html.index("Traceback")  # newest at the bottom
    assert th.round_log(svc, second, key2) == (key2, None)
    store.add_round_logs(first, [NewLogLine("INFO", f"line {i}") for i in range(th.LOG_LINES_SHOWN + 5)])
    _, html = th.round_log(svc, first)
    assert html.count('class="evo-log-line ') == th.LOG_LINES_SHOWN
    assert "lines 1–5 not shown" in html and f"evorag rounds log {first}" in html


def test_an_evaluation_job_reads_as_evaluating_its_side_and_counts_questions(svc):
    """Gated promotion's job in the progress box: phases "loading" then "evaluating <side>", questions i/N with an
    ETA from the measured seconds per question, no training chips; in the rounds table, what it evaluates and,
    once done, the verdict."""
    store = svc.store()
    rid = store.enqueue_round("evaluate", {"objective": "evaluate", "adapter": "r1-dpo", "against": "live"})
    assert "evaluate r1-dpo vs live" in th.training_view(svc).rounds
    store.claim_round("w", 60)
    store.heartbeat(rid, "w", {"phase": "evaluate r1-dpo", "step": 5, "total": 20, "elapsed_s": 10.0})
    html = th.training_view(svc, now=store.get_round(rid).heartbeat_at).progress
    assert "running · evaluating r1-dpo" in html and "question 5/20" in html and "ETA 30 s (2 s/step)" in html
    assert 'data-phase="evaluate"' in html and 'data-phase="train"' not in html
    view = th.training_view(svc)
    assert not view.loss_visible and not view.kl_visible  # an evaluation trains nothing
    store.finish_round(rid, metrics={"evaluated": "r1-dpo", "verdict": "not shown better: F1 +0.010", "activated": False},
                       worker_id="w")
    assert "r1-dpo: not shown better: F1 +0.010" in th.training_view(svc).rounds


def test_a_training_round_reads_training_from_its_first_step_on(tmp_path):
    """The loop objectives' step log and DPO's callback report phase "train" when training begins, so the page
    stops saying "preparing data" during the (minutes-long) first step."""
    from training.objectives.dpo.trainer import _Progress
    from training.loop import StepLog

    seen: list[dict] = []
    StepLog(10, seen.append)
    assert seen == [{"phase": "train"}]
    seen.clear()
    _Progress(seen.append).on_train_begin(None, None, None)
    assert seen == [{"phase": "train"}]


def test_each_page_keeps_its_own_chart_points(svc):
    """#45 item 4: a running round reports only its latest step, so each page keeps the points it has seen, in its
    own gr.State (a copy per page, Gradio's SessionState), not on the Services object every page shares. Page A
    ticks at steps 1 and 2, page B opens at step 2: A's loss points are steps 1-2, B's only step 2; a view without
    page state draws the latest step alone."""
    import gradio as gr
    from gradio.helpers import special_args
    from gradio.state_holder import SessionState

    from app.shell.ui import build_ui

    assert not any(hasattr(svc, name) for name in ("loss_history", "kl_history", "step_history"))
    demo = build_ui(svc)
    tick = next(fn for fn in demo.fns.values() if fn.targets and fn.targets[0][1] == "tick"
                and any(b.elem_id == "evo-loss" for b in fn.outputs))
    history = next(b for b in tick.inputs if isinstance(b, gr.State) and isinstance(b.value, th.ChartHistory))
    page_a, page_b = SessionState(demo), SessionState(demo)

    def run_tick(page: SessionState) -> None:
        values = [page[b._id] if b.stateful else b.value for b in tick.inputs]
        args, _, _, _ = special_args(tick.fn, values, request=gr.Request(username=None))
        for block, value in zip(tick.outputs, tick.fn(*args)):
            if block.stateful:
                page[block._id] = value

    _pairs(svc, 2)
    rid = th.launch(svc, "dpo", 2, 1, 5e-5, "k3").round_id
    store = svc.store()
    store.claim_round("w", 60)
    store.heartbeat(rid, "w", {"phase": "train", "step": 1, "total": 4, "loss": 0.7, "elapsed_s": 1.0})
    run_tick(page_a)
    store.heartbeat(rid, "w", {"phase": "train", "step": 2, "total": 4, "loss": 0.6, "elapsed_s": 2.0})
    run_tick(page_a)
    run_tick(page_b)
    assert page_a[history._id] is not page_b[history._id]
    assert page_a[history._id].losses == [(1.0, 0.7), (2.0, 0.6)]
    assert page_b[history._id].losses == [(2.0, 0.6)]
    assert list(th.training_view(svc).loss.data[0].x) == [2.0]


def test_a_page_keeps_a_bounded_number_of_chart_points():
    """Past MAX_CHART_POINTS every second point is dropped, the newest kept: the curve keeps its shape and its end."""
    seen = th.ChartHistory().follow(7)
    seen.losses.extend((float(i), 1.0 / i) for i in range(1, th.MAX_CHART_POINTS + 2))
    seen.bound()
    assert len(seen.losses) <= th.MAX_CHART_POINTS
    assert seen.losses[0][0] == 1.0 and seen.losses[-1][0] == th.MAX_CHART_POINTS + 1
    assert seen.follow(8).losses == [] and seen.round_id == 8  # another round: its own points
