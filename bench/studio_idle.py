"""What a studio page left open costs, over time: the browser's and the server's CPU and memory while nobody acts.

    python -m bench.studio_idle [--minutes 10 | --phase-minutes V,H,E] [--sample-s 30] [--tab Training] [--home DIR]
        [--out bench/results/studio_idle.json]

`evorag studio` (embedded defaults, a new SQLite database; its idle worker process is not counted) and one headless
Chromium page (Playwright, Debian's /usr/bin/chromium) on it. Three phases of `--minutes` each (or `--phase-minutes` 60,10,20: an hour visible), nothing clicked within a phase:
1. `visible`: the page on `--tab` (Training: the tab with the most live parts: header, progress, rounds, charts);
2. `hidden`: the page reports itself hidden (`visibilitychange` with `document.visibilityState = "hidden"`, what a
   background browser tab sends; app/common/page_timers.py then stops the page's timers);
3. `episode`: shown again, on the Episode tab (only the header's timer runs there).
Every `--sample-s` s: the CPU seconds and RSS of the studio process and of Chromium's process tree (psutil), and the
number of requests the page sent since the last sample. Reported per phase: CPU % of one core (server, browser),
RSS at the start and end and its growth per hour (the least-squares slope over the samples), requests per minute; with the load average (the machine may be
shared). Targets (issue #46): the server and the browser flat over time - no RSS growth - and no requests from a
hidden page.
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

import psutil

from bench.studio import CHROMIUM, CHROMIUM_ARGS, ROOT, start_studio, stop

HIDE_JS = ("(s) => { Object.defineProperty(document, 'visibilityState', {value: s, configurable: true});"
           " document.dispatchEvent(new Event('visibilitychange')); }")


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _usage(procs: list[psutil.Process]) -> tuple[float, float]:
    """(CPU seconds, RSS MB) summed over `procs` (those that exited are skipped)."""
    cpu = rss = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            rss += p.memory_info().rss / 2**20
        except psutil.NoSuchProcess:
            continue
    return cpu, rss


def _phase(name: str, page, minutes: float, sample_s: float, server: psutil.Process, browser_pid: int,
           requests: list[float]) -> dict:
    samples = []
    end = time.monotonic() + minutes * 60
    while True:
        now = time.monotonic()
        s_cpu, s_rss = _usage([server])
        b_cpu, b_rss = _usage(_tree(psutil.Process(browser_pid)))
        samples.append({"t": now, "server_cpu_s": s_cpu, "server_rss_mb": s_rss, "browser_cpu_s": b_cpu,
                        "browser_rss_mb": b_rss, "requests": sum(1 for r in requests if r <= now)})
        if now >= end:
            break
        # Playwright's sync API delivers the page's request events only while a call of it runs: wait through it
        page.wait_for_timeout(1000 * min(sample_s, max(end - now, 0.0)))
    first, last = samples[0], samples[-1]
    span = max(last["t"] - first["t"], 1e-9)
    hours_at = [(x["t"] - first["t"]) / 3600 for x in samples]

    def growth(key: str) -> float:  # MB per hour, least squares (one noisy end sample does not decide it)
        if len(samples) < 3:
            return (last[key] - first[key]) / (span / 3600)
        return statistics.linear_regression(hours_at, [x[key] for x in samples]).slope
    out = {
        "phase": name, "seconds": round(span, 1), "samples": len(samples),
        "server_cpu_pct": round(100 * (last["server_cpu_s"] - first["server_cpu_s"]) / span, 2),
        "browser_cpu_pct": round(100 * (last["browser_cpu_s"] - first["browser_cpu_s"]) / span, 2),
        "server_rss_mb": [round(first["server_rss_mb"], 1), round(last["server_rss_mb"], 1)],
        "browser_rss_mb": [round(first["browser_rss_mb"], 1), round(last["browser_rss_mb"], 1)],
        "server_rss_max_mb": round(max(x["server_rss_mb"] for x in samples), 1),
        "browser_rss_max_mb": round(max(x["browser_rss_mb"] for x in samples), 1),
        "server_rss_growth_mb_per_h": round(growth("server_rss_mb"), 1),
        "browser_rss_growth_mb_per_h": round(growth("browser_rss_mb"), 1),
        "requests_per_min": round((last["requests"] - first["requests"]) / span * 60, 2),
        "loadavg": list(os.getloadavg()),
    }
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0, help="length of each of the three phases")
    p.add_argument("--phase-minutes", default=None, help="V,H,E: the visible, hidden and episode phases' lengths")
    p.add_argument("--sample-s", type=float, default=30.0)
    p.add_argument("--tab", default="Training")
    p.add_argument("--home", type=Path, default=Path(os.environ.get("EVORAG_HOME", ROOT / ".evorag")))
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "studio_idle.json")
    args = p.parse_args(argv)
    minutes = [args.minutes] * 3
    if args.phase_minutes:
        try:
            minutes = [float(m) for m in args.phase_minutes.split(",")]
        except ValueError:
            minutes = []
        if len(minutes) != 3 or min(minutes) <= 0:
            p.error(f"--phase-minutes wants three positive numbers V,H,E, got {args.phase_minutes!r}")
    if not CHROMIUM.exists():
        p.error(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    db_dir = Path(tempfile.mkdtemp(prefix="evorag-studio-idle-"))
    proc, url, _, _ = start_studio(args.home, db_dir, db_dir / "studio.log", ())
    report: dict = {"command": " ".join(["python", "-m", "bench.studio_idle", *sys.argv[1:]]),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "minutes_per_phase": minutes,
                    "tab": args.tab, "note": args.note, "cpus": os.cpu_count()}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            browser_pid = next(c.pid for c in psutil.Process(os.getpid()).children(recursive=True)
                               if "chrom" in c.name().lower())
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.set_default_timeout(300_000)
            requests: list[float] = []
            page.on("request", lambda r: requests.append(time.monotonic()))
            page.goto(url)
            page.wait_for_selector("#evo-reset")
            page.wait_for_function("document.querySelector('#evo-live-adapter') && "
                                   "!document.querySelector('#evo-warming')")
            page.get_by_role("tab", name=args.tab).click()
            page.wait_for_timeout(5000)  # the tab's first refresh
            server = psutil.Process(proc.pid)
            phases = report["phases"] = []

            def run_phase(name: str, mins: float) -> None:  # the JSON is rewritten after each phase
                phases.append(_phase(name, page, mins, args.sample_s, server, browser_pid, requests))
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")

            run_phase("visible", minutes[0])
            page.evaluate(HIDE_JS, "hidden")
            page.wait_for_timeout(3000)
            run_phase("hidden", minutes[1])
            page.evaluate(HIDE_JS, "visible")
            page.get_by_role("tab", name="Episode").click()
            page.wait_for_timeout(3000)
            run_phase("episode", minutes[2])
            browser.close()
    finally:
        stop(proc)
    print(f"-> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
