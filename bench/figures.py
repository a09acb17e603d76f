"""Saving a benchmark's plotly figure: HTML always (plotly alone), PNG through kaleido where it is installed and can
start a Chromium (`BROWSER_PATH`, default /usr/bin/chromium where that exists). A PNG that cannot be made is
reported (its error), not fatal: the HTML is the figure of record.

kaleido (1.x) can lose a race on a loaded machine: it takes the first JavaScript context Chromium announces after
navigating, which can be the blank page's, so its call then fails with "ReferenceError: kaleido_scopes is not
defined". The export is tried PNG_TRIES times before its error is reported."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["save_figure"]

CHROMIUM = Path("/usr/bin/chromium")
PNG_TRIES = 3


def save_figure(fig: Any, stem: Path, *, width: int = 900, height: int = 500) -> dict[str, Any]:
    """Write `stem`.html and (if kaleido can) `stem`.png; returns {"html", "png", "png_error"} (paths as strings)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    html = stem.with_suffix(".html")
    fig.write_html(html, include_plotlyjs="cdn")
    out: dict[str, Any] = {"html": str(html), "png": None, "png_error": None}
    if "BROWSER_PATH" not in os.environ and CHROMIUM.exists():
        os.environ["BROWSER_PATH"] = str(CHROMIUM)
    png = stem.with_suffix(".png")
    for _ in range(PNG_TRIES):
        try:
            fig.write_image(png, width=width, height=height)
        except Exception as exc:  # kaleido missing, no browser it can start, or its context race: the HTML stands
            out["png_error"] = f"{type(exc).__name__}: {exc}"[:500]
        else:
            out["png"], out["png_error"] = str(png), None
            break
    return out
