"""Studio speed in a real browser: cold start, UI step time, responsiveness while the LM works. Writes JSON.

    python bench/studio.py [--starts 3] [--steps 8] [--think 0,3] [--home DIR] [--out bench/results/studio.json]

1. Cold start (`--starts` times): `evorag studio` as a fresh subprocess (embedded defaults, the given home with its
   caches warm: the safetensors model cache, embeddings and indexes; a new SQLite database each time) until `/`
   answers 200; then, on the last start, until the page reports its background warm-up (LM and index) finished.
2. UI step: headless Chromium (Playwright, Debian's /usr/bin/chromium) clicks Step on the LM policy (base model) and
   on the oracle policy until `--steps` steps are timed, resetting the episode when it ends; click to the new row
   in the steps table (the whole round trip: browser, Gradio queue, policy, environment, re-render).
   `--think S,...`: the LM steps are timed once per value, with S seconds between seeing a step and clicking the
   next one (a person reading the step; the session prefills the next decision meanwhile). 0 = clicking as fast as
   the page allows, the worst case; the target is read on it.
3. Responsiveness: while an LM step runs, GET /config is timed from another thread (another user's request).
Targets (issue 6): cold start <= 20 s, median LM UI step <= 2 s, another request <= 1 s. The load average is
recorded, since the machine may be shared.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TARGETS = {"cold_start_s": 20.0, "ui_step_lm_median_s": 2.0, "request_while_busy_max_s": 1.0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_seconds(url: str) -> float:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as resp:
        resp.read()
    return time.perf_counter() - start


def start_studio(home: Path, db_dir: Path, log: Path, overrides: Sequence[str] = ()
                 ) -> tuple[subprocess.Popen, str, float]:
    """Start the studio (`overrides`: its `--set KEY=VALUE`s); return (process, url, seconds until / answered 200)."""
    port = _free_port()
    db_url = f"sqlite:///{db_dir / f'studio-{port}.db'}"
    env = dict(os.environ, EVORAG_HOME=str(home), EVORAG_DB_URL=db_url, GRADIO_ANALYTICS_ENABLED="False")
    cmd = [sys.executable, "-m", "evorag_core.cli", "studio", "--host", "127.0.0.1", "--port", str(port),
           "--home", str(home), "--db", db_url, *(a for o in overrides for a in ("--set", o))]
    start = time.perf_counter()
    with log.open("ab") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the studio exited with code {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return proc, url, time.perf_counter() - start
        except OSError:
            pass
        if time.perf_counter() - start > 180:
            proc.kill()
            raise SystemExit(f"the studio did not serve {url} within 180 s; see {log}")
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _choose(page, elem_id: str, text: str) -> None:
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(text)
    page.locator("[role=option]", has_text=text).first.click()


def time_steps(page, url: str, policy: str, n: int, probe: bool, think: float = 0.0) -> dict:
    """Median seconds from clicking Step to the new row, over `n` steps (episodes reset when done), waiting `think`
    seconds before each click; with `probe`, GET /config latencies measured from another thread while the steps
    run."""
    _choose(page, "evo-policy", policy)
    times: list[float] = []
    actions: list[str] = []  # the action each timed step took (SEARCH, ANSWER, ...)
    latencies: list[float] = []
    busy = threading.Event()
    finished = threading.Event()

    def prober() -> None:
        while not finished.is_set():
            if busy.is_set():
                latencies.append(_get_seconds(url + "config"))
            time.sleep(0.25)

    thread = threading.Thread(target=prober, daemon=True)
    if probe:
        thread.start()
    while len(times) < n:
        page.click("#evo-reset")
        page.wait_for_function("document.querySelector('#evo-status') && "
                               "document.querySelectorAll('#evo-steps tbody tr').length === 0", timeout=300_000)
        for i in range(1, 100):
            time.sleep(think)
            t0 = time.perf_counter()
            busy.set()
            page.click("#evo-step")
            page.wait_for_function(f"document.querySelectorAll('#evo-steps tbody tr').length === {i}",
                                   timeout=300_000)
            busy.clear()
            times.append(time.perf_counter() - t0)
            actions.append(page.evaluate(f"document.querySelectorAll('#evo-steps tbody tr')[{i - 1}]"
                                         ".querySelector('.act').textContent"))
            if len(times) >= n or "done" in page.locator("#evo-status").inner_text():
                break
    finished.set()
    out = {"n": len(times), "think_s": think, "median_s": round(statistics.median(times), 3),
           "median_s_by_action": {a: round(statistics.median(t for t, b in zip(times, actions) if b == a), 3)
                                  for a in sorted(set(actions))},
           "all_s": [round(t, 3) for t in times], "actions": actions}
    if probe:
        thread.join(timeout=5)
        out["request_while_stepping"] = ({"n": len(latencies), "max_s": round(max(latencies), 3),
                                          "median_s": round(statistics.median(latencies), 3)} if latencies else None)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--starts", type=int, default=3)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--home", type=Path, default=Path(os.environ.get("EVORAG_HOME", ROOT / ".evorag")))
    p.add_argument("--think", default="0,3", help="seconds between seeing an LM step and the next click, per run")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for the studio (e.g. studio.prepare_next=false)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "studio.json")
    args = p.parse_args(argv)
    thinks = [float(x) for x in args.think.split(",") if x.strip()] or [0.0]
    if not CHROMIUM.exists():
        p.error(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    report: dict = {"machine": {"cpus": os.cpu_count(), "loadavg_start": list(os.getloadavg())}, "targets": TARGETS,
                    "overrides": args.overrides}
    db_dir = Path(tempfile.mkdtemp(prefix="evorag-studio-bench-"))
    log = db_dir / "studio.log"
    starts = []
    for _ in range(args.starts - 1):
        proc, _, seconds = start_studio(args.home, db_dir, log, args.overrides)
        starts.append(seconds)
        stop(proc)
    proc, url, seconds = start_studio(args.home, db_dir, log, args.overrides)
    starts.append(seconds)
    report["cold_start_s"] = {"median": round(statistics.median(starts), 2), "all": [round(s, 2) for s in starts]}
    print(f"cold start to a served page: {report['cold_start_s']}", file=sys.stderr)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.set_default_timeout(120_000)
            t0 = time.perf_counter()
            page.goto(url)
            page.wait_for_selector("#evo-reset")
            page.wait_for_function("document.querySelector('#evo-live-adapter') && "
                                   "!document.querySelector('#evo-warming')", timeout=300_000)
            report["page_ready_after_served_s"] = round(time.perf_counter() - t0, 2)
            report["ui_step_oracle"] = time_steps(page, url, "oracle", args.steps, probe=False)
            print(f"oracle step: {report['ui_step_oracle']}", file=sys.stderr)
            report["ui_step_lm"] = time_steps(page, url, "LM · base model", args.steps, probe=True, think=thinks[0])
            print(f"LM step: {report['ui_step_lm']}", file=sys.stderr)
            for think in thinks[1:]:
                report[f"ui_step_lm_think_{think:g}s"] = time_steps(page, url, "LM · base model", args.steps,
                                                                    probe=False, think=think)
                print(f"LM step, {think:g} s between steps: {report[f'ui_step_lm_think_{think:g}s']}", file=sys.stderr)
            browser.close()
    finally:
        stop(proc)
    report["machine"]["loadavg_end"] = list(os.getloadavg())
    lm = report["ui_step_lm"]
    report["targets_met"] = {
        "cold_start_s": report["cold_start_s"]["median"] <= TARGETS["cold_start_s"],
        "ui_step_lm_median_s": lm["median_s"] <= TARGETS["ui_step_lm_median_s"],
        "request_while_busy_max_s": bool(lm.get("request_while_stepping"))
        and lm["request_while_stepping"]["max_s"] <= TARGETS["request_while_busy_max_s"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
