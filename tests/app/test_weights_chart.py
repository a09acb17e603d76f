"""The weight-schedule chart follows the run's weight table (#45's defect: after `tune-weights` it drew the paper's
table while the steps used the tuned one): an oracle episode in the studio's handlers with a tuned [weights] table,
its chart's lines from that table with the steps' own weights as markers on them; the same episode's stored trace
drawn against the paper's table says that the steps used other weights."""
from __future__ import annotations

import dataclasses

import pytest

from app.common import views
from app.common.services import Services
from app.common.session import EpisodeSettings
from app.common.trace_view import render_trace
from app.tabs.episode import handlers as episode_handlers
from evorag_core.config import WeightsConfig, apply_overrides, load_config
from evorag_core.env.scheduler import PAPER_TABLE, WeightTable
from tests.paths import DEMO

TUNED = {"weights.beta_start": 4.0, "weights.beta_mid": 3.0, "weights.kappa_start": 0.7}


def _line(fig, name_start: str):
    return next(t for t in fig.data if t.mode == "lines" and t.name.startswith(name_start))


def _markers(fig):
    return [t for t in fig.data if t.mode == "markers"]


@pytest.fixture()
def svc(session_home, tmp_path):
    services = Services(apply_overrides(load_config(), TUNED), session_home, data_path=DEMO,
                        db_url=f"sqlite:///{tmp_path / 'studio.db'}")
    yield services
    services.close()


def test_the_episode_chart_draws_the_tuned_table_and_the_steps_weights_on_it(svc):
    view, sess = episode_handlers.start_episode(svc, EpisodeSettings(policy="oracle", question_id="demo-001"))
    view, sess = episode_handlers.run_to_end(sess)
    fig = view.weights
    beta = _line(fig, "β")
    assert beta.y[0] == pytest.approx(4.0) and "(tuned weights)" in fig.layout.title.text
    steps = sess.record.steps
    marks = _markers(fig)
    assert len(marks) == 7 and all(len(m.x) == len(steps) for m in marks)
    beta_marks = next(m for m in marks if m.legendgroup == "ret")
    assert list(beta_marks.y) == pytest.approx([s.weights["beta"] for s in steps])
    assert not any("another weight table" in (a.text or "") for a in fig.layout.annotations)

    stored = svc.store().list_episodes(limit=1)[0]
    episode = svc.store().get_episode(stored.id)
    paper = render_trace(episode, [], by_pid=None, gold=["Sable River"])  # the paper's lines, the tuned steps
    assert _line(paper.weights, "β").y[0] == pytest.approx(2.0)
    assert any("another weight table" in (a.text or "") for a in paper.weights.layout.annotations)
    tuned = render_trace(episode, [], by_pid=None, gold=["Sable River"], weights=svc.cfg.weights)
    assert _line(tuned.weights, "β").y[0] == pytest.approx(4.0)
    assert not any("another weight table" in (a.text or "") for a in tuned.weights.layout.annotations)


def test_the_paper_table_is_the_default_and_untitled_as_tuned():
    fig = views.weights_figure("discovery", "time-dynamic", "full", 10, 3)
    assert _line(fig, "β").y[0] == pytest.approx(2.0) and "tuned" not in fig.layout.title.text
    assert WeightTable.from_config(WeightsConfig()) == PAPER_TABLE
    assert WeightTable.from_config(dataclasses.replace(WeightsConfig(), beta_start=4.0)) != PAPER_TABLE
