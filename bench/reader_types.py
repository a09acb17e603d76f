"""The span reader on the questions' gold passages: yes/no from the evidence, no yes/no span for other questions,
answer-type agreement (issue 42, item 4).

    python -m bench.reader_types --split tune|heldout [--sets hotpot 2wiki] [--passages gold|all]
                                 [--variant NAME:KEY=VALUE,...]... [--before FILE]... [--record FILE]
                                 [--ranker-path PATH] [--threads 1] [--without SET:A:B]... [--out FILE]
    python -m bench.reader_types --split heldout --merge PART.json... --before FILE... --out FILE

Every question is read from exactly its gold passages (the benchmark's supporting paragraphs, in file order), so the
figures measure the reader, not retrieval; `--passages all`: from all of the question's own paragraphs (gold and the
benchmark's distractors, 10 per question, in file order), closer to what an agent's reader sees. Splits, declared before any held-out run: `tune` = HotpotQA dev 0:100 and
2Wiki dev 0:50 (rules designed on these only), `heldout` = HotpotQA dev 100:300 and 2Wiki dev 50:182 (reported).

Each variant is an `[answer]` override set (e.g. `model:yes_no=model`, or `sft:adapter=DIR` for a reader adapter) of
the embedded SmolLM2-135M span reader; all variants share one LM cache (the same prompt and span under the same
weights are scored once). `--record FILE` writes the first variant's
per-question answers (the reader at the commit it ran on: the "before" reader); `--before FILE` reads such a record
and compares every variant with it, paired by question (`metrics.paired_bootstrap`). Per variant: EM, F1, yes/no
accuracy on the questions whose gold is yes/no, the yes/no answers given to the other questions, how often "yes" was
said. Results: `--out` (default bench/results/reader_types[_tune][_all][_<set>].json: the held-out split, gold
passages, is the report, bench/results/reader_types.json). A long run can be cut by
set (`--sets hotpot`, then `--sets 2wiki`) and reported together with `--merge` (no LM).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from evorag_core.config import AnswerConfig, PolicyConfig, home_dir, load_config
from evorag_core.data.datasets import load_dataset
from evorag_core.metrics import exact_match, f1_score, normalize_answer, paired_bootstrap

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT.parent / "shared" / "benchmarks"
FILES = {"hotpot": "hotpotqa_dev300.jsonl", "2wiki": "2wiki_dev182.jsonl"}
SPLITS = {"tune": (("hotpot", 0, 100), ("2wiki", 0, 50)), "heldout": (("hotpot", 100, 300), ("2wiki", 50, 182))}
DEV_RANKER = ROOT / "bench" / "results" / "ranker_dev.json"
PASSAGES = {"gold": "gold passages only", "all": "all the question's paragraphs (gold and distractors)"}


class CachedScores:
    """A backend whose `score_choices` remembers each (active adapter, prompt, choice) score, so variants reading the
    same prompt with the same weights pay for a span once; everything else is the wrapped backend's."""

    def __init__(self, backend: Any) -> None:
        self._backend, self._memo = backend, {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def score_choices(self, prompt: str, choices: Sequence[str]) -> list[float]:
        weights = getattr(self._backend, "active_adapter", None)
        missing = list(dict.fromkeys(c for c in choices if (weights, prompt, c) not in self._memo))
        if missing:
            for c, s in zip(missing, self._backend.score_choices(prompt, missing)):
                self._memo[(weights, prompt, c)] = s
        return [self._memo[(weights, prompt, c)] for c in choices]


def _variant(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition(":")
    return name, dict(kv.split("=", 1) for kv in rest.split(",") if kv)


def _answer_cfg(overrides: dict[str, str], ranker_path: str) -> AnswerConfig:
    return load_config(None, {"answer.ranker_path": ranker_path,
                              **{f"answer.{k}": v for k, v in overrides.items()}}).answer


def _is_yes_no(text: str) -> bool:
    return normalize_answer(text) in ("yes", "no")


def _questions(split: str, limit: int) -> list[tuple[str, Any]]:
    out = []
    for key, start, end in SPLITS[split]:
        qs = load_dataset(BENCH / FILES[key]).questions[start:end]
        out += [(key, q) for q in qs[:limit or None]]
    return out


def _row(key: str, q: Any, ans: Any) -> dict[str, Any]:
    return {"set": key, "id": q.id, "question": q.question, "answers": list(q.answers), "pred": ans.text,
            "kind": ans.kind, "em": exact_match(ans.text, q.answers), "f1": f1_score(ans.text, q.answers),
            "gold_yes_no": any(_is_yes_no(a) for a in q.answers)}


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """EM / F1 and the yes/no figures of one variant's per-question rows."""
    yn = [r for r in rows if r["gold_yes_no"]]
    other = [r for r in rows if not r["gold_yes_no"]]
    out: dict[str, Any] = {"n": len(rows), "em": _mean(r["em"] for r in rows), "f1": _mean(r["f1"] for r in rows),
                           "yes_no_n": len(yn), "yes_no_acc": _mean(r["em"] for r in yn),
                           "yes_said": sum(normalize_answer(r["pred"]) == "yes" for r in yn),
                           "yes_gold": sum(any(normalize_answer(a) == "yes" for a in r["answers"]) for r in yn),
                           "yes_no_to_other": sum(_is_yes_no(r["pred"]) for r in other),
                           "other_n": len(other), "other_em": _mean(r["em"] for r in other),
                           "other_f1": _mean(r["f1"] for r in other)}
    for key in sorted({r["set"] for r in rows}):
        part = [r for r in rows if r["set"] == key]
        out[key] = {"n": len(part), "em": _mean(r["em"] for r in part), "f1": _mean(r["f1"] for r in part)}
    return out


def _mean(values: Any) -> float:
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0


def compare(rows: Sequence[dict[str, Any]], before: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """Paired bootstrap of this variant minus the recorded reader, EM and F1, over the questions both answered."""
    pairs = [(r, before[(r["set"], r["id"])]) for r in rows if (r["set"], r["id"]) in before]
    out: dict[str, Any] = {"n": len(pairs)}
    for metric in ("em", "f1"):
        b = paired_bootstrap([r[metric] for r, _ in pairs], [o[metric] for _, o in pairs])
        out[metric] = {"after": b.mean_a, "before": b.mean_b, "diff": b.diff, "ci": [b.ci_low, b.ci_high],
                       "p": b.p_value}
    out["changed"] = sum(normalize_answer(r["pred"]) != normalize_answer(o["pred"]) for r, o in pairs)
    return out


def _backend(threads: int) -> Any:
    import torch

    from evorag_core.lm.hf_backend import TransformersBackend

    torch.set_num_threads(threads)
    return CachedScores(TransformersBackend(PolicyConfig(device="cpu"), home_dir()))


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _run(args: argparse.Namespace, variants: list[tuple[str, dict[str, str]]]) -> tuple[dict, float]:
    """Every variant's rows over the split's questions (only the sets in `args.sets`, if given)."""
    from evorag_core.reader.answers import Reader

    backend = _backend(args.threads)
    chars = load_config(None, {}).policy.passage_chars
    # the Reader (not the bare SpanReader): a variant's `adapter=PATH` then reads with that reader adapter
    readers = [(name, Reader(backend, _answer_cfg(ov, args.ranker_path), chars)) for name, ov in variants]
    questions = [(k, q) for k, q in _questions(args.split, args.limit) if not args.sets or k in args.sets]
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in readers}
    start = time.perf_counter()
    for k, (key, q) in enumerate(questions):
        passages = [ps for ps in q.passages if args.passages == "all" or ps.pid in q.gold_pids]
        for name, reader in readers:
            rows[name].append(_row(key, q, reader.read(q.question, passages)[0]))
        if (k + 1) % 25 == 0:
            print(f"{k + 1}/{len(questions)} questions, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return rows, time.perf_counter() - start


def _merged(paths: Sequence[Path]) -> tuple[dict, float, list[tuple[str, dict[str, str]]]]:
    """The rows, seconds and variants of earlier results (parts of one split, e.g. one set each), concatenated."""
    rows: dict[str, list[dict[str, Any]]] = {}
    variants: dict[str, dict[str, str]] = {}
    seconds = 0.0
    for path in paths:
        part = json.loads(path.read_text())
        seconds += part["seconds"]
        for name, entry in part["variants"].items():
            variants.setdefault(name, entry["overrides"])
            rows.setdefault(name, []).extend(part["rows"][name])
    return rows, seconds, list(variants.items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", choices=sorted(SPLITS), default="tune")
    p.add_argument("--sets", nargs="*", default=[], help="only these sets of the split (hotpot, 2wiki)")
    p.add_argument("--passages", choices=("gold", "all"), default="gold")
    p.add_argument("--variant", action="append", default=[])
    p.add_argument("--ranker-path", default=str(DEV_RANKER), help="the ranker's weights ('' = the packaged ones)")
    p.add_argument("--limit", type=int, default=0, help="first N questions of each set (0 = all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--record", type=Path, default=None)
    p.add_argument("--before", type=Path, action="append", default=[], help="recorded reader(s) to compare with")
    p.add_argument("--merge", type=Path, nargs="*", default=[], help="report these results' rows together, no run")
    p.add_argument("--without", action="append", default=[], metavar="SET:A:B",
                   help="also compare without these questions (by position in the set's file), e.g. 2wiki:100:182")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.without and not args.before:
        p.error("--without repeats the comparison with --before: give the recorded reader")
    if args.merge:
        rows, seconds, variants = _merged(args.merge)
    else:
        variants = [_variant(v) for v in (args.variant or ["default:"])]
        rows, seconds = _run(args, variants)
    before = {(r["set"], r["id"]): r for path in args.before for r in json.loads(path.read_text())["rows"]}
    result: dict[str, Any] = {"split": args.split, "sets": [list(s) for s in SPLITS[args.split]
                                                            if not args.sets or s[0] in args.sets],
                              "passages": PASSAGES[args.passages], "ranker_path": args.ranker_path,
                              "commit": _commit(), "threads": args.threads, "seconds": round(seconds, 1),
                              "before": [str(b) for b in args.before], "merged": [str(m) for m in args.merge],
                              "variants": {}}
    for name, ov in variants:
        entry: dict[str, Any] = {"overrides": ov, "summary": summary(rows[name])}
        if before:
            entry["vs_before"] = compare(rows[name], before)
            if args.without:
                kept = _without(rows[name], args.without)
                entry["vs_before_without"] = {"without": args.without, **compare(kept, before)}
        result["variants"][name] = entry
    if before:
        result["before_summary"] = summary([before[(r["set"], r["id"])] for r in rows[variants[0][0]]
                                            if (r["set"], r["id"]) in before])
    _print(result)
    if args.record:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps({"commit": result["commit"], "split": args.split, "passages": args.passages,
                                           "ranker_path": args.ranker_path, "rows": rows[variants[0][0]]}, indent=1))
    suffix = ("" if args.split == "heldout" else f"_{args.split}") + ("" if args.passages == "gold" else "_all") \
        + "".join(f"_{k}" for k in args.sets)
    out = args.out or ROOT / "bench" / "results" / f"reader_types{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result["rows"] = rows
    out.write_text(json.dumps(result, indent=1))
    return 0


def _without(rows: Sequence[dict[str, Any]], parts: Sequence[str]) -> list[dict[str, Any]]:
    """`rows` less the questions at positions A:B of each SET:A:B's file."""
    out = set()
    for part in parts:
        key, a, b = part.split(":")
        out |= {(key, q.id) for q in load_dataset(BENCH / FILES[key]).questions[int(a):int(b)]}
    return [r for r in rows if (r["set"], r["id"]) not in out]


def _print(result: dict[str, Any]) -> None:
    print(f"split {result['split']} ({result['passages']}), {result['seconds']} s, ranker {result['ranker_path']}")
    if "before_summary" in result:
        _print_summary("before", result["before_summary"])
    for name, entry in result["variants"].items():
        _print_summary(name, entry["summary"])
        if "vs_before" in entry:
            v = entry["vs_before"]
            print(f"    vs before (n {v['n']}, {v['changed']} answers changed): "
                  + "  ".join(f"{m.upper()} {v[m]['diff']:+.3f} [{v[m]['ci'][0]:+.3f}, {v[m]['ci'][1]:+.3f}] "
                              f"p {v[m]['p']:.3g}" for m in ("em", "f1")))
        if "vs_before_without" in entry:
            v = entry["vs_before_without"]
            print(f"    without {', '.join(v['without'])} (n {v['n']}): "
                  + "  ".join(f"{m.upper()} {v[m]['before']:.3f} -> {v[m]['after']:.3f} {v[m]['diff']:+.3f} "
                              f"[{v[m]['ci'][0]:+.3f}, {v[m]['ci'][1]:+.3f}] p {v[m]['p']:.3g}" for m in ("em", "f1")))


def _print_summary(name: str, s: dict[str, Any]) -> None:
    sets = "  ".join(f"{k} {s[k]['em']:.3f}/{s[k]['f1']:.3f}" for k in ("hotpot", "2wiki") if k in s)
    print(f"  {name:<14} n {s['n']}  EM {s['em']:.3f}  F1 {s['f1']:.3f}  ({sets})  yes/no {s['yes_no_acc']:.3f} "
          f"of {s['yes_no_n']} ('yes' {s['yes_said']}, gold yes {s['yes_gold']})  yes/no to other "
          f"{s['yes_no_to_other']} of {s['other_n']}  other EM/F1 {s['other_em']:.3f}/{s['other_f1']:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
