"""Memory of the studio and its worker during a DPO round: peak RSS per process, their sum, and per phase.

    flock /tmp/evorag-lm.lock python -m bench.memory --label before [--pairs 8] [--steps 2] [--cold]
        [--set SECTION.KEY=VALUE ...] [--out bench/results/memory.json] [--interval 0.2]

1. A temporary home; the embedded model's safetensors cache is made there first by a separate process (unmeasured:
   a user's home has it after the first start) unless `--cold`, which leaves the GGUF conversion to the measured
   processes.
2. `python -m evorag_core.cli.main studio` on a free 127.0.0.1 port with that home and a new SQLite database; the
   studio starts its own `evorag worker` subprocess and warms up in the background (retrieval index and the policy
   LM, in the studio process). The bench waits for the warm-up's log line.
3. `--pairs` preference pairs go into the studio's store: ChatML agent prompts as the policy renders them (system
   prompt, the demonstration episode, a demo question with two searches' passages), long enough that the round
   cuts them to train.max_length like rollout pairs; then a DPO round (`pairs`, `max_steps`) is queued, which the
   worker claims.
4. Every `--interval` s until the round has finished: RSS of the studio process and of the worker's process tree
   (psutil), and the worker's current phase, read from its log (`dpo phase NAME` lines written by training/objectives/dpo/trainer.py:
   load = base model loading and pair fitting, reference = TRL trainer setup (the frozen reference adapter, the
   tokenized dataset), train = optimiser steps, heldout, save, done = registered).
5. Writes `--out` (the run is stored under `runs.<label>`, other labels kept) with the peak RSS of each process, of
   their sum, per phase, the round's own metrics and what else was running on the machine (load average, the
   largest other processes).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil

from evorag_core.procs import free_port

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20
_PHASE = re.compile(r"dpo phase (\w+)")
_WARM_DONE = ("default data file and retrieval index ready", "warm-up failed")
TARGET_SUM_MB = 3584.0  # issue 44: studio + worker <= 3.5 GB peak together during a DPO round (issue 21: 4 GB)


def agent_pairs(n: int) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) x n: the policy's prompt layout (system prompt, the demonstration episode as chat
    turns, the current turn with two searches over a demo question's passages), ChatML as SmolLM2's template writes
    it; chosen/rejected alternate between a SEARCH and the gold ANSWER."""
    from evorag_core.policy.prompts import SYSTEM_PROMPT, demo_turns, render_user
    from evorag_core.env.state import AgentView, Hop
    from evorag_core.types import Passage

    rows = [json.loads(line) for line in (ROOT / "data" / "demo" / "demo.jsonl").open(encoding="utf-8")]

    def turn(role: str, text: str) -> str:
        return f"<|im_start|>{role}\n{text}<|im_end|>\n"

    out = []
    for i in range(n):
        row = rows[i % len(rows)]
        ps = [Passage(p["pid"], p["title"], p["text"]) for p in row["passages"]]
        hops = (Hop(row["question"][:60], tuple(ps[:5])), Hop(f"{row['answers'][0]} location", tuple(ps[5:10])))
        view = AgentView(row["question"], hops, (), 3, 20)
        prompt = turn("system", SYSTEM_PROMPT)
        for user, reply in demo_turns(300):
            prompt += turn("user", user) + turn("assistant", reply)
        prompt += turn("user", render_user(view, 300)) + "<|im_start|>assistant\n"
        good, bad = f"ANSWER: {row['answers'][0]}", f"SEARCH: {row['question'][:40]}"
        out.append((prompt, good, bad) if i % 2 == 0 else (prompt, bad, good))
    return out


def _tree_rss(proc: psutil.Process) -> float:
    """RSS of `proc` and its descendants, MiB (0 once it has exited)."""
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / MB


def _rss(proc: psutil.Process) -> float:
    try:
        return proc.memory_info().rss / MB
    except psutil.NoSuchProcess:
        return 0.0


def _worker_of(studio: psutil.Process, timeout: float = 120.0) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in studio.children(recursive=False):
            try:
                if "worker" in child.cmdline():
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.1)
    raise SystemExit("the studio started no worker process")


def _wait_for_line(path: Path, needles: tuple[str, ...], proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the studio exited with code {proc.returncode}; see {path}")
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        for needle in needles:
            if needle in text:
                return needle
        time.sleep(0.2)
    raise SystemExit(f"no {needles} in {path} within {timeout:.0f} s")


class _LogTail:
    """The latest `dpo phase NAME` in the worker's log (read incrementally)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.phase = path, 0, "idle"

    def poll(self) -> str:
        if self.path.exists():
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
            cut = chunk.rfind(b"\n") + 1  # only whole lines
            self.offset += cut
            for match in _PHASE.finditer(chunk[:cut].decode("utf-8", errors="replace")):
                self.phase = match.group(1)
        return self.phase


def _machine() -> dict:
    """What else runs here: load averages, memory, the largest processes not started by this bench."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))}
    others = []
    for p in psutil.process_iter(["pid", "name", "cmdline", "memory_info", "cpu_percent"]):
        if p.info["pid"] in mine or p.info["memory_info"] is None:
            continue
        others.append((p.info["memory_info"].rss, p.info["pid"], " ".join(p.info["cmdline"] or [p.info["name"]])[:120]))
    others.sort(reverse=True)
    vm = psutil.virtual_memory()
    return {"loadavg": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "mem_total_mb": round(vm.total / MB), "mem_available_mb": round(vm.available / MB),
            "largest_other_processes": [{"pid": pid, "rss_mb": round(rss / MB), "cmd": cmd}
                                        for rss, pid, cmd in others[:8]]}


def _peaks(samples: list[dict], key: str) -> dict:
    """Peak of `key` per phase, in order of first appearance."""
    out: dict[str, float] = {}
    for s in samples:
        out[s["phase"]] = round(max(out.get(s["phase"], 0.0), s[key]), 1)
    return out


def thin(samples: list[dict], seconds: float = 1.0) -> list[dict]:
    """The sample with the largest sum in each `seconds` window (the file stays small; peaks survive)."""
    best: dict[int, dict] = {}
    for s in samples:
        key = int(s["t"] // seconds)
        if key not in best or s["sum_mb"] > best[key]["sum_mb"]:
            best[key] = s
    return [{k: (round(v, 1) if isinstance(v, float) else v) for k, v in best[key].items()} for key in sorted(best)]


def _compare(adapter: Path, reference: Path | None) -> dict | None:
    """Largest absolute difference between this round's LoRA weights and `reference`'s (e.g. the same round
    trained before a change): the memory work must not change what a round trains."""
    if reference is None:
        return None
    from safetensors.torch import load_file

    new, old = (load_file(str(Path(d) / "adapter_model.safetensors")) for d in (adapter, reference))
    if new.keys() != old.keys():
        return {"reference": str(reference), "same_keys": False}
    diff = max(float((new[k] - old[k]).abs().max()) for k in new)
    scale = max(float(old[k].abs().max()) for k in old)
    return {"reference": str(reference), "same_keys": True, "max_abs_diff": diff, "max_abs_weight": scale,
            "allclose_rtol1e-4_atol1e-6": all(bool(new[k].allclose(old[k], rtol=1e-4, atol=1e-6)) for k in new)}


def measure(args: argparse.Namespace) -> dict:
    from evorag_core.store import NewPair, open_store

    tmp = Path(tempfile.mkdtemp(prefix="evorag-memory-"))
    print(f"temporary home and logs: {tmp} (kept)", file=sys.stderr)
    home = tmp / "home"
    home.mkdir()
    env = dict(os.environ, EVORAG_HOME=str(home), GRADIO_ANALYTICS_ENABLED="False",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not args.cold:
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                        "from evorag_core.lm.loading import resolve_model; resolve_model('embedded', Path(sys.argv[1]))",
                        str(home)], cwd=ROOT, env=env, check=True)
    db_url = f"sqlite:///{tmp / 'studio.db'}"
    env["EVORAG_DB_URL"] = db_url
    port = free_port()
    studio_log = tmp / "studio.log"
    cmd = [sys.executable, "-m", "evorag_core.cli.main", "studio", "--host", "127.0.0.1", "--port", str(port),
           "--home", str(home), "--db", db_url, *(a for kv in args.set for a in ("--set", kv))]
    machine_before = _machine()
    t0 = time.perf_counter()
    with studio_log.open("ab") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    studio = psutil.Process(proc.pid)
    samples: list[dict] = []
    stop = threading.Event()
    tail = _LogTail(home / "logs" / "worker.log")
    worker_box: list[psutil.Process] = []

    def sampler() -> None:
        while not stop.is_set():
            worker = worker_box[0] if worker_box else None
            s_rss = _rss(studio)
            w_rss = _tree_rss(worker) if worker is not None else 0.0
            samples.append({"t": round(time.perf_counter() - t0, 2), "phase": tail.poll(), "studio_mb": s_rss,
                            "worker_mb": w_rss, "sum_mb": s_rss + w_rss})
            stop.wait(args.interval)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        worker_box.append(_worker_of(studio))
        warm = _wait_for_line(studio_log, _WARM_DONE, proc, timeout=600)
        warm_s = time.perf_counter() - t0
        with open_store(db_url) as store:
            store.add_pairs([NewPair(p, c, r, source="human", annotator="bench", stage="discovery")
                             for p, c, r in agent_pairs(args.pairs)])
            round_id = store.enqueue_round("dpo", {"pairs": args.pairs, "max_steps": args.steps})
            queued_s = time.perf_counter() - t0
            deadline = time.monotonic() + args.timeout
            while True:
                row = store.get_round(round_id)
                if row.status in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        time.sleep(args.interval * 2)  # one more sample after the end
        finished_s = time.perf_counter() - t0
    finally:
        stop.set()
        thread.join()
        machine_after = _machine()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    round_samples = [s for s in samples if s["t"] >= queued_s]
    metrics = row.metrics or {}
    peak = max(round_samples, key=lambda s: s["sum_mb"])
    result = {
        "label": args.label,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip(),
        "command": " ".join(["python", "-m", "bench.memory", *sys.argv[1:]]),
        "cold_model_cache": args.cold,
        "adapter_vs_reference": _compare(home / "adapters" / str(round_id), args.reference_adapter),
        "round": {"id": round_id, "status": row.status, "error": row.error, "steps": metrics.get("steps"),
                  "n_train": metrics.get("n_train"), "truncated_prompts": metrics.get("truncated_prompts"),
                  "final_loss": metrics.get("final_loss"), "worker_reported_peak_rss_mb":
                  metrics.get("peak_rss_mb"), "adapter_checksum": metrics.get("checksum"),
                  "train_s": metrics.get("train_s"), "wall_s": metrics.get("wall_s")},
        "warm_up": {"line": warm, "seconds": round(warm_s, 1)},
        "seconds": {"warm_done": round(warm_s, 1), "round_queued": round(queued_s, 1),
                    "round_finished": round(finished_s, 1)},
        "before_round_mb": {"studio": round(max(s["studio_mb"] for s in samples if s["t"] < queued_s), 1),
                            "worker": round(max(s["worker_mb"] for s in samples if s["t"] < queued_s), 1)},
        "peak_mb": {"studio": round(max(s["studio_mb"] for s in round_samples), 1),
                    "worker": round(max(s["worker_mb"] for s in round_samples), 1),
                    "sum": round(peak["sum_mb"], 1), "sum_at_phase": peak["phase"]},
        "target_sum_mb": TARGET_SUM_MB,
        "meets_target": peak["sum_mb"] <= TARGET_SUM_MB,
        "phase_peak_mb": {"worker": _peaks(round_samples, "worker_mb"), "studio": _peaks(round_samples, "studio_mb"),
                          "sum": _peaks(round_samples, "sum_mb")},
        "n_samples": len(round_samples), "interval_s": args.interval,
        "machine_before": machine_before, "machine_after": machine_after,
        "samples_per_second": thin(samples),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", default="run", help="key of this run in the output's `runs` (e.g. before, after)")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--steps", type=int, default=2, help="the round's max_steps")
    p.add_argument("--interval", type=float, default=0.2, help="seconds between RSS samples")
    p.add_argument("--timeout", type=float, default=900, help="give up on the round after this many seconds")
    p.add_argument("--cold", action="store_true", help="no model cache in the home: the GGUF is converted in the run")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "memory.json")
    p.add_argument("--reference-adapter", type=Path, default=None,
                   help="adapter folder of an earlier run of this bench: report the largest weight difference")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="a studio setting (the worker gets it too), e.g. train.gradient_checkpointing=true")
    p.add_argument("--note", default="", help="free text stored with the run (e.g. what else was running)")
    args = p.parse_args(argv)
    result = measure(args)
    result["note"] = args.note
    out = {"runs": {}}
    if args.out.exists():
        out = json.loads(args.out.read_text(encoding="utf-8"))
    out.setdefault("runs", {})[args.label] = result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    brief = {k: result[k] for k in ("label", "adapter_vs_reference", "round", "before_round_mb", "peak_mb", "meets_target", "phase_peak_mb")}
    print(json.dumps(brief, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
