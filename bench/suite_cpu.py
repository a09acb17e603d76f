"""Where a command's CPU time goes, by kind of process: run it (the whole suite: `make test`) while every process on
the machine is sampled, and write the CPU seconds per kind (and how many processes of each kind started), the wall
time and how busy the cores were.

    python -m bench.suite_cpu --out bench/results/suite_cpu.json -- make test

The suite is CPU-bound on 2 cores: its wall time is its CPU time over the cores, so a cut is a cut in CPU seconds,
and this says in which processes they are spent: the pytest workers themselves (in-process tests), the processes
the tests start (studios, training workers, `accelerate launch`, CLIs, pools), Chromium, the rest. A process is
sampled every `--every` seconds (psutil); one that starts and ends between two samples is missed, one first seen as a
zombie keeps its name only ("exited before sampled"). Processes that ran before the command started count from the
first sample. `reaped_cpu_s` is what /usr/bin/time would say: the CPU of the descendants that were waited for (a
browser or server killed without being reaped by its parent is missing there, not in `cpu_s`).

This host's speed moves between runs by more than a change to the suite does (the same test 25-30 % slower on the
same day), so a run records a reference reading before and after the command: the CPU seconds of a fresh process
that imports the model stack (`REFERENCE`, what ~130 of the suite's processes each do), the median of three. It
ranged 8.4-13.1 CPU-s within one hour here: a hint of the host's state, too noisy to normalise by; compare two
commits by running them back to back.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import psutil

REFERENCE = "import torch, transformers.modeling_utils, peft, sentence_transformers"

# (kind, a test on the command line); the first that matches names the process
KINDS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("pytest workers (in-process tests)", lambda c: "exec(eval(sys.stdin.readline()))" in c),
    ("pytest (main)", lambda c: " -m pytest" in c),
    ("chromium", lambda c: "chrom" in c),
    ("playwright driver (node)", lambda c: "playwright" in c or c.startswith("node")),
    ("studio", lambda c: " studio " in c),
    ("training worker", lambda c: "training.worker" in c or " worker " in c),
    ("accelerate launcher", lambda c: "accelerate.commands.launch" in c),
    ("process pools (spawned)", lambda c: "multiprocessing" in c or c.startswith("ray::")),
    ("llama.cpp servers", lambda c: "serve_gguf" in c or "llama" in c),
    ("postgres", lambda c: "postgres" in c),
    ("other python (CLIs, benches)", lambda c: "python" in c.split(" ")[0]),
)


def kind_of(proc: psutil.Process) -> str:
    try:
        cmd = " ".join(proc.cmdline())
        if not cmd:
            return f"exited before sampled ({proc.name()})"
    except psutil.Error:
        return "unreadable"
    for kind, test in KINDS:
        if test(cmd):
            return kind
    return f"other ({proc.name()})"


def sample(seen: dict[tuple[int, float], list], total: Counter, me: int) -> None:
    """Add every process's CPU since its last sample to its kind."""
    for proc in psutil.process_iter():
        try:
            if proc.pid == me:
                continue
            key = (proc.pid, proc.create_time())
            times = proc.cpu_times()
        except psutil.Error:
            continue
        cpu = times.user + times.system
        if key not in seen:
            seen[key] = [kind_of(proc), 0.0]
        kind, last = seen[key]
        total[kind] += cpu - last
        seen[key][1] = cpu


def reference_cpu_s(runs: int = 3) -> float:
    """Median CPU seconds of a fresh interpreter running `REFERENCE` (the host's speed now); 0.0 for no runs."""
    if runs < 1:
        return 0.0
    readings = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", REFERENCE], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        readings.append((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime))
    return round(sorted(readings)[len(readings) // 2], 2)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: python -m bench.suite_cpu [--out F] [--every S] -- COMMAND ...")
    cut = argv.index("--")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("bench/results/suite_cpu.json"))
    p.add_argument("--every", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument("--reference-runs", type=int, default=3, help="reference readings before and after (0: none)")
    args = p.parse_args(argv[:cut])
    command = argv[cut + 1:]
    ref_before = reference_cpu_s(args.reference_runs)
    seen: dict[tuple[int, float], list] = {}
    total: Counter = Counter()
    me = os.getpid()
    sample(seen, total, me)
    total.clear()  # what ran before the command: counted from here on
    before = set(seen)  # processes not running now count as started by the command
    cores0, start = psutil.cpu_times(), time.monotonic()
    reaped0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        sample(seen, total, me)
        time.sleep(args.every)
    sample(seen, total, me)
    wall = time.monotonic() - start
    cores1 = psutil.cpu_times()
    busy = sum(cores1) - sum(cores0)
    busy_frac = 1 - ((cores1.idle + getattr(cores1, "iowait", 0)) - (cores0.idle + getattr(cores0, "iowait", 0))) / busy
    cpu = sum(total.values())
    started = Counter(kind for key, (kind, _) in seen.items() if key not in before)
    reaped1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (reaped1.ru_utime + reaped1.ru_stime) - (reaped0.ru_utime + reaped0.ru_stime)
    reference = [ref_before, reference_cpu_s(args.reference_runs)]
    report = {
        "command": " ".join(command), "exit_code": proc.returncode, "wall_s": round(wall, 1),
        "minutes": round(wall / 60, 2), "cores": psutil.cpu_count(), "cores_busy": round(busy_frac, 3),
        "cpu_s": round(cpu, 1), "reaped_cpu_s": round(reaped, 1),
        "reference_cpu_s": {"before": reference[0], "after": reference[1], "what": REFERENCE},
        "machine": f"{platform.processor() or platform.machine()}, {psutil.cpu_count()} cores",
        "note": args.note, "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "by_kind": {k: {"cpu_s": round(v, 1), "share": round(v / cpu, 3), "processes": started[k]}
                    for k, v in total.most_common() if v >= 0.05},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{report['minutes']} min, {cpu:.0f} CPU-s, cores busy {busy_frac:.0%}, exit {proc.returncode}; "
          f"reference {reference[0]} / {reference[1]} CPU-s (before / after)")
    for k, v in report["by_kind"].items():
        print(f"  {v['cpu_s']:8.1f} s  {v['share']:6.1%}  {v['processes']:5d} started  {k}")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
