"""Peak memory of `load_dataset` loading and rejecting a ~50 MB data file (issue #21).

    python -m bench.dataset_memory [--mb 50] [--repo PATH] [--label after] [--out bench/results/dataset_memory.json]

Writes seeded synthetic files to a temporary folder: JSON lines in the common schema (10 passages of ~300
characters per question) and a JSON list in HotpotQA's shape (10 paragraphs of 3 sentences). Each case runs
`load_dataset` in a fresh Python process importing the code of --repo (default: this checkout), which resets its peak
resident memory after the imports (/proc/self/clear_refs) and reports the peak during the load (VmHWM) and that peak
less the resident memory before it ("added"), with the seconds taken and the outcome. Linux only. Run it once with --repo pointing at an export of the previous commit (label "before") and once on this
checkout (label "after"): the same files, seed and sizes; each label's figures are kept in the --out file.

Cases: a valid file (loaded), the same file with its last record bad (rejected at the end) and with its second
record bad (rejected at once), for both formats; and JSON lines of many short fields (40 passages of 1-20
characters per question: the most Python objects per byte of file) with the last record bad.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from evorag_core.data.datasets import load_dataset
from evorag_core.errors import DatasetFormatError
status_kb = lambda key: int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1])
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current RSS: the imports' own peak does not hide the load's
base = status_kb("VmRSS:")
start = time.perf_counter()
try:
    outcome = f"loaded {len(load_dataset(sys.argv[1]).questions)} questions"
except DatasetFormatError as exc:
    outcome = "rejected: " + str(exc).split(": ", 1)[-1][:80] + f" (record {exc.record})"
print(json.dumps({"peak_mb": status_kb("VmHWM:") / 1024, "added_mb": (status_kb("VmHWM:") - base) / 1024,
                  "seconds": time.perf_counter() - start, "outcome": outcome}))
"""


def _words(rng: random.Random, vocab: list[str], n: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(n))


def common_record(rng: random.Random, vocab: list[str], i: int) -> dict:
    passages = [{"pid": f"syn:{i}:{j}", "title": _words(rng, vocab, 2), "text": _words(rng, vocab, 48),
                 "gold": j < 2} for j in range(10)]
    return {"id": f"q{i}", "dataset": "syn", "question": _words(rng, vocab, 12) + "?", "answers": [_words(rng, vocab, 2)],
            "type": "bridge", "passages": passages, "hops": 2}


def small_fields_record(rng: random.Random, i: int) -> dict:
    """Many short fields (40 passages of 1-20 characters): per byte of file, the most Python objects."""
    passages = [{"pid": f"s:{i}:{j}", "title": "t", "text": "x" * rng.randint(1, 20), "gold": j == 0} for j in range(40)]
    return {"id": f"s{i}", "dataset": "syn", "question": "q?", "answers": ["a"], "type": None, "hops": 1,
            "passages": passages}


def hotpot_record(rng: random.Random, vocab: list[str], i: int) -> dict:
    context = [[f"T{i}-{j} " + _words(rng, vocab, 2), [" " + _words(rng, vocab, 16) + "." for _ in range(3)]]
               for j in range(10)]
    return {"_id": f"h{i}", "question": _words(rng, vocab, 12) + "?", "answer": _words(rng, vocab, 2),
            "type": "bridge", "level": "hard", "context": context,
            "supporting_facts": [[context[0][0], 0], [context[1][0], 1]]}


def write_files(folder: Path, mb: float, seed: int) -> dict[str, Path]:
    """The files of the module docstring; returns name -> path."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(3000)]
    target = int(mb * 1024 * 1024)
    lines: list[str] = []
    size = 0
    while size < target:
        lines.append(json.dumps(common_record(rng, vocab, len(lines))) + "\n")
        size += len(lines[-1])
    items: list[str] = []
    size = 0
    while size < target:
        items.append(json.dumps(hotpot_record(rng, vocab, len(items))))
        size += len(items[-1]) + 2
    small: list[str] = []
    size = 0
    while size < target:
        small.append(json.dumps(small_fields_record(rng, len(small))) + "\n")
        size += len(small[-1])
    bad_line = json.dumps({**json.loads(lines[-1]), "answers": []}) + "\n"
    second_bad = json.dumps({**json.loads(lines[1]), "answers": []}) + "\n"
    bad_item = json.dumps({k: v for k, v in json.loads(items[-1]).items() if k != "answer"})
    files = {
        "jsonl_valid": "".join(lines),
        "jsonl_bad_last": "".join(lines[:-1]) + bad_line,
        "jsonl_bad_second": lines[0] + second_bad + "".join(lines[2:]),
        "jsonl_small_fields_bad_last": "".join(small[:-1]) + json.dumps({**json.loads(small[-1]), "answers": []}) + "\n",
        "json_list_valid": "[" + ",\n".join(items) + "]\n",
        "json_list_bad_last": "[" + ",\n".join(items[:-1] + [bad_item]) + "]\n",
    }
    out = {}
    for name, text in files.items():
        out[name] = folder / (name + (".jsonl" if name.startswith("jsonl") else ".json"))
        out[name].write_text(text, encoding="utf-8")
    return out


def measure(repo: Path, path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(repo))
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=900)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"rc {done.returncode}"}
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=50.0, help="size of each file in MiB (default 50)")
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose evorag_core is measured")
    ap.add_argument("--label", default="after")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--note", default="", help="what --repo holds (e.g. the commit it was exported from)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "dataset_memory.json")
    args = ap.parse_args(argv)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    with tempfile.TemporaryDirectory(prefix="dataset-memory-") as tmp:
        files = write_files(Path(tmp), args.mb, args.seed)
        cases = {}
        print(f"{args.label} ({args.repo}):")
        print(f"{'case':28} {'file MB':>8} {'peak MB':>8} {'added MB':>9} {'x file':>7} {'s':>6}  outcome")
        for name, path in files.items():
            file_mb = path.stat().st_size / 2**20
            row = {"file_mb": round(file_mb, 1), **measure(args.repo, path)}
            if "added_mb" in row:
                row["added_per_file_mb"] = round(row["added_mb"] / file_mb, 2)
                print(f"{name:28} {file_mb:8.1f} {row['peak_mb']:8.1f} {row['added_mb']:9.1f} "
                      f"{row['added_per_file_mb']:7.2f} {row['seconds']:6.2f}  {row['outcome']}")
            else:
                print(f"{name:28} {file_mb:8.1f}  failed: {row['error']}")
            cases[name] = row
    results[args.label] = {"repo": str(args.repo), "note": args.note, "mb": args.mb, "seed": args.seed, "python": platform.python_version(),
                           "load_average": os.getloadavg()[0], "cases": cases}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
