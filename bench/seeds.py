"""Several training seeds of one `bench.learning` reader round, reported together.

    python -m bench.seeds --homes HOME_S0,HOME_S1,HOME_S2,HOME_S3 [--base-home HOME_S0] [--objective dpo] \
        [--dump fixedk.jsonl] --out bench/results/learning_reader_random_seeds.json

Each home is a finished `bench.learning --reader-dumps ...` run that differs only in `--seed`. Its phase 6 wrote the
reader's answer to every evaluation question, per policy: `learning_reader_base.jsonl` and
`learning_reader_<objective>.jsonl`. The question asked of the *recipe*, not of one adapter: is the seed-mean adapter
better than the base? Per question, the mean F1 (and EM) of the seeds' adapters against the base's, paired bootstrap
over the questions; beside it each seed's own difference and p. The base is the same greedy model on the same
passages in every run, so its answers must agree across homes: a mismatch is an error (the runs are not comparable),
named question by question.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Sequence

from evorag_core.metrics import BootstrapResult, paired_bootstrap

METRICS = ("em", "f1")


@dataclass(frozen=True)
class Answer:
    prediction: str
    em: float
    f1: float


@dataclass(frozen=True)
class SeedRow:
    name: str
    em: float
    f1: float
    changed: int  # answers that differ from the base's
    vs_base: dict[str, BootstrapResult]


@dataclass(frozen=True)
class SeedsResult:
    n: int
    base: dict[str, float]
    seeds: list[SeedRow]
    seed_mean: dict[str, BootstrapResult]  # per question, the seeds' mean score against the base's
    every_seed_positive: bool  # every seed's F1 difference > 0
    target_met: bool  # seed-mean F1 above the base with p < 0.05 and every seed positive


def read_answers(path: Path, dump: str | None = None) -> dict[str, Answer]:
    """question id -> the answer a `learning_reader_<name>.jsonl` file holds (rows of `dump` only, if named)."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: is this a finished bench.learning run with --reader-dumps?")
    out: dict[str, Answer] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if dump is None or row["dump"] == dump:
                out[row["question_id"]] = Answer(row["prediction"], float(row["em"]), float(row["f1"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: not a reader row ({exc})") from exc
    return out


def base_mismatches(bases: Mapping[str, Mapping[str, Answer]]) -> list[str]:
    """Lines naming every question whose base answer differs between runs (or is missing from one)."""
    (first_name, first), *rest = bases.items()
    out = []
    for name, other in rest:
        for qid in sorted(set(first) | set(other)):
            a, b = first.get(qid), other.get(qid)
            if a is None or b is None or a.prediction != b.prediction:
                out.append(f"{qid}: {first_name} {a.prediction if a else '(missing)'!r} vs "
                           f"{name} {b.prediction if b else '(missing)'!r}")
    return out


def combine(base: Mapping[str, Answer], seeds: Mapping[str, Mapping[str, Answer]], resamples: int = 10_000,
            seed: int = 0, order: Sequence[str] | None = None) -> SeedsResult:
    """The seeds' adapters against the base on the questions every one of them answered. The bootstrap resamples
    positions, so its figures depend on the questions' order: sorted ids, or `order` (e.g. a results file's, to
    match `evaluation.compare_results` on the same files)."""
    if not seeds:
        raise ValueError("no seed runs to combine")
    shared = set(base).intersection(*seeds.values())
    ids = [i for i in order if i in shared] if order is not None else sorted(shared)
    if not ids:
        raise ValueError("the base and the seeds share no question")

    def score(answers: Mapping[str, Answer], metric: str) -> list[float]:
        return [getattr(answers[i], metric) for i in ids]

    rows = [SeedRow(name, sum(score(ans, "em")) / len(ids), sum(score(ans, "f1")) / len(ids),
                    sum(ans[i].prediction != base[i].prediction for i in ids),
                    {m: paired_bootstrap(score(ans, m), score(base, m), resamples, seed) for m in METRICS})
             for name, ans in seeds.items()]
    seed_mean = {m: paired_bootstrap([sum(getattr(ans[i], m) for ans in seeds.values()) / len(seeds) for i in ids],
                                     score(base, m), resamples, seed) for m in METRICS}
    positive = all(r.vs_base["f1"].diff > 0 for r in rows)
    return SeedsResult(len(ids), {m: sum(score(base, m)) / len(ids) for m in METRICS}, rows, seed_mean, positive,
                       positive and seed_mean["f1"].diff > 0 and seed_mean["f1"].p_value < 0.05)


def load_runs(homes: Sequence[Path], base_home: Path, objective: str, dump: str | None) -> tuple[dict, dict]:
    """(base answers, {home name: adapter answers}); raises if the homes' base answers differ."""
    bases = {str(h): read_answers(h / "learning_reader_base.jsonl", dump) for h in dict.fromkeys([base_home, *homes])}
    wrong = base_mismatches(bases)
    if wrong:
        raise ValueError(f"the base's answers differ between runs ({len(wrong)} questions), so they are not the same "
                         "evaluation:\n  " + "\n  ".join(wrong[:10]))
    names = [h.parent.name if h.name == "learn" else h.name for h in homes]  # .../s2/learn -> "s2"
    if len(set(names)) != len(names):
        names = [str(h) for h in homes]
    seeds = {name: read_answers(h / f"learning_reader_{objective}.jsonl", dump) for name, h in zip(names, homes)}
    return bases[str(base_home)], seeds


def report(result: SeedsResult) -> str:
    lines = [f"{result.n} questions; base EM {result.base['em']:.3f} F1 {result.base['f1']:.3f}",
             "| run | EM | F1 | F1 diff (95 % CI) | p | changed |", "|---|---|---|---|---|---|"]
    for r in result.seeds:
        f = r.vs_base["f1"]
        lines.append(f"| {r.name} | {r.em:.3f} | {r.f1:.3f} | {f.diff:+.3f} ({f.ci_low:+.3f}, {f.ci_high:+.3f}) | "
                     f"{f.p_value:.3f} | {r.changed} |")
    f, e = result.seed_mean["f1"], result.seed_mean["em"]
    lines.append(f"| seed mean | {e.mean_a:.3f} | {f.mean_a:.3f} | {f.diff:+.3f} ({f.ci_low:+.3f}, {f.ci_high:+.3f}) | "
                 f"{f.p_value:.3f} | |")
    lines.append(f"every seed positive: {result.every_seed_positive}; target met (seed mean p < 0.05 and every seed "
                 f"positive): {result.target_met}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--homes", required=True, help="comma-separated bench.learning homes, one per seed")
    ap.add_argument("--base-home", help="the home whose base answers are the reference (default: the first)")
    ap.add_argument("--objective", default="dpo", help="the trained policy's name in the homes (default dpo)")
    ap.add_argument("--dump", help="only the rows of this dump file name (default: every row)")
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--out", type=Path, help="write the result as JSON here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    homes = [Path(h) for h in args.homes.split(",") if h]
    base, seeds = load_runs(homes, Path(args.base_home) if args.base_home else homes[0], args.objective, args.dump)
    result = combine(base, seeds, args.resamples)
    print(report(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"homes": [str(h) for h in homes], "objective": args.objective,
                                        "dump": args.dump, **asdict(result)}, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
