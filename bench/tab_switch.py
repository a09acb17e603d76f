"""How long a tab switch takes in the studio: seconds from the click on a tab to its content being ready. Writes JSON.

    python -m bench.tab_switch [--repeats 3] [--cpu-throttle 1] [--home DIR] [--note TEXT]
        [--out bench/results/tab_switch.json]

`evorag studio` (embedded defaults, a new SQLite database, its background warm-up finished first) and headless
Chromium (Playwright, Debian's /usr/bin/chromium). Each repeat opens a fresh page and walks the admin's tabs in
order (Pairs, Training, Compare, Evaluate, R²AG tree, DynaKrag, ARENA, Traces, then back to Episode), so each switch
is the tab's first in that page, as in a person's walk. A tab is ready when what its `select` event fills is on the
page (its `READY` predicate: the pairs count, the Training availability line and loss chart, the DynaKrag question
and scores chart, ...). Reported per tab: the median and every value over `--repeats`, with the load average before
each repeat (the machine may be shared). `--cpu-throttle N` slows the page's main thread N times (Chrome's CPU
throttling), the browser side of a loaded machine, without loading the machine. Target (issue #46 item 8): each
switch <= 2 s.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.studio import CHROMIUM, CHROMIUM_ARGS, ROOT, start_studio, stop

TARGET_S = 2.0


def _visible(selector: str) -> str:
    return f"(() => {{ const e = document.querySelector({selector!r}); return !!e && e.offsetParent !== null; }})()"


def _filled(selector: str) -> str:
    return f"!!(document.querySelector({selector!r}) || {{value: ''}}).value"


# tab label -> a JS expression, true once what the tab's select event fills is shown
READY: dict[str, str] = {
    "Pairs": _visible("#evo-pair-total"),
    "Training": f"{_visible('#evo-available')} && {_visible('#evo-loss .main-svg')}",
    "Compare": f"{_visible('#evo-cmp-a')} && {_filled('#evo-cmp-question input')}",
    "Evaluate": (f"{_visible('#evo-eval-summary-box')} && !document.querySelector('#evo-eval-summary-box')"
                 ".innerText.includes('Reading the stored runs')"),
    "R²AG tree": f"{_visible('#evo-r2ag-figure .main-svg')} && {_filled('#evo-r2ag-question input')}",
    "DynaKrag": f"{_visible('#evo-dk-scores .main-svg')} && {_filled('#evo-dk-question input')}",
    "ARENA": f"{_visible('#evo-arena-run')} && {_filled('#evo-arena-question input')}",
    "Traces": f"{_visible('#evo-traces-summary')} && !!document.querySelector('#evo-traces-summary').innerText.trim()",
    "Episode": _visible("#evo-reset"),
}


def _open_page(browser, url: str, throttle: float):
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.set_default_timeout(120_000)
    page.goto(url)
    page.wait_for_selector("#evo-reset")
    page.wait_for_function("document.querySelector('#evo-live-adapter') && !document.querySelector('#evo-warming')")
    if throttle > 1:
        page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": throttle})
    page.wait_for_timeout(2000)  # the page load's own events
    return page


def _walk(page) -> dict[str, float]:
    """Seconds from each tab's click to its READY predicate, in READY's order."""
    took = {}
    for label, ready in READY.items():
        page.wait_for_timeout(1000)
        start = time.perf_counter()
        page.get_by_role("tab", name=label, exact=True).click()
        page.wait_for_function(ready, polling=50)
        took[label] = round(time.perf_counter() - start, 3)
        print(f"  {label}: {took[label]:.2f} s", file=sys.stderr, flush=True)
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cpu-throttle", type=float, default=1.0, help="slow the page's main thread N times")
    p.add_argument("--home", type=Path, default=Path(os.environ.get("EVORAG_HOME", ROOT / ".evorag")))
    p.add_argument("--note", default="", help="what else ran on the machine; which code was measured")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tab_switch.json")
    args = p.parse_args(argv)
    if not CHROMIUM.exists():
        p.error(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    db_dir = Path(tempfile.mkdtemp(prefix="evorag-tab-switch-"))
    proc, url, _, _ = start_studio(args.home, db_dir, db_dir / "studio.log", ())
    walks, loads = [], []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            for i in range(args.repeats):
                page = _open_page(browser, url, args.cpu_throttle)
                loads.append([round(x, 2) for x in os.getloadavg()])
                print(f"repeat {i + 1}, load average {loads[-1]}", file=sys.stderr, flush=True)
                walks.append(_walk(page))
                page.close()
            browser.close()
    finally:
        stop(proc)
    tabs = {label: {"median_s": round(statistics.median(w[label] for w in walks), 3),
                    "runs_s": [w[label] for w in walks]} for label in READY}
    report = {"command": " ".join(["python", "-m", "bench.tab_switch", *sys.argv[1:]]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "note": args.note, "cpus": os.cpu_count(),
              "cpu_throttle": args.cpu_throttle, "target_s": TARGET_S, "loadavg_per_repeat": loads,
              "max_median_s": max(t["median_s"] for t in tabs.values()), "tabs": tabs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v["median_s"] for k, v in tabs.items()}), f"-> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
