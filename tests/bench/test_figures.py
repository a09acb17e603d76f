"""bench/figures.py: the HTML is always written; the PNG export is tried again when kaleido loses its context race
(a JavaScript error on a loaded machine) and its last error is reported when every try failed."""
from __future__ import annotations

import plotly.graph_objects as go

from bench import figures


class _Flaky(go.Figure):
    """A real plotly figure whose PNG export fails `failures` times as kaleido's race does, then writes a file."""

    def __init__(self, failures: int):
        super().__init__(go.Scatter(x=[1, 2], y=[3, 4]))
        self._failures, self._calls = failures, 0

    def write_image(self, path, **kw):
        self._calls += 1
        if self._calls <= self._failures:
            raise RuntimeError("JavascriptError: ReferenceError: kaleido_scopes is not defined")
        path.write_bytes(b"\x89PNG\r\n\x1a\n")


def test_a_png_export_that_loses_the_race_is_tried_again(tmp_path):
    fig = _Flaky(failures=figures.PNG_TRIES - 1)
    out = figures.save_figure(fig, tmp_path / "curve")
    assert out == {"html": str(tmp_path / "curve.html"), "png": str(tmp_path / "curve.png"), "png_error": None}
    assert fig._calls == figures.PNG_TRIES and "plotly" in (tmp_path / "curve.html").read_text()


def test_the_last_error_is_reported_when_every_try_failed(tmp_path):
    fig = _Flaky(failures=figures.PNG_TRIES)
    out = figures.save_figure(fig, tmp_path / "curve")
    assert out["png"] is None and out["png_error"].startswith("RuntimeError: JavascriptError: ReferenceError")
    assert fig._calls == figures.PNG_TRIES and (tmp_path / "curve.html").is_file()
