"""Saving a benchmark's plotly figure: HTML always (plotly alone), PNG through kaleido where it is installed and can
start a Chromium (`BROWSER_PATH`, default /usr/bin/chromium where that exists). A PNG that cannot be made is
reported (its error), not fatal: the HTML is the figure of record."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["save_figure"]

CHROMIUM = Path("/usr/bin/chromium")


def save_figure(fig: Any, stem: Path, *, width: int = 900, height: int = 500) -> dict[str, Any]:
    """Write `stem`.html and (if kaleido can) `stem`.png; returns {"html", "png", "png_error"} (paths as strings)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    html = stem.with_suffix(".html")
    fig.write_html(html, include_plotlyjs="cdn")
    out: dict[str, Any] = {"html": str(html), "png": None, "png_error": None}
    if "BROWSER_PATH" not in os.environ and CHROMIUM.exists():
        os.environ["BROWSER_PATH"] = str(CHROMIUM)
    png = stem.with_suffix(".png")
    try:
        fig.write_image(png, width=width, height=height)
        out["png"] = str(png)
    except Exception as exc:  # kaleido missing, or no browser it can start: the HTML stands alone
        out["png_error"] = f"{type(exc).__name__}: {exc}"[:500]
    return out
