"""bench/suite_cpu.py on a real command: a Python process busy for 3 s of CPU; the sampler finds at least those
seconds under its kind and in the reaped total, and the command's exit code is kept. The sampler reads every process
on the machine, so under a parallel suite other processes add to the kinds: only lower bounds are checked."""
from __future__ import annotations

import json
import sys

from bench import suite_cpu

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 3: pass\nraise SystemExit(3)"


def test_the_cpu_of_a_child_is_found_under_its_kind(tmp_path):
    out = tmp_path / "cpu.json"
    code = suite_cpu.main(["--out", str(out), "--every", "0.2", "--reference-runs", "0", "--", sys.executable, "-c", BUSY])
    report = json.loads(out.read_text())
    assert code == report["exit_code"] == 3
    python = report["by_kind"]["other python (CLIs, benches)"]["cpu_s"]
    assert report["by_kind"]["other python (CLIs, benches)"]["processes"] >= 1  # the command itself
    assert python >= 2.5 and report["reaped_cpu_s"] >= 2.9 and report["wall_s"] >= 2.9
    assert 0 < report["cores_busy"] <= 1 and report["cpu_s"] >= python
