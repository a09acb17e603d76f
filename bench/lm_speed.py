"""Speed of the policy LM backend on this machine; writes JSON (default bench/results/lm_speed.json).

    python -m bench.lm_speed [--runs 5] [--threads 0] [--dtype float32] [--half-decode-rows 4]
                             [--prefill-dtype auto] [--variants] [--out PATH]

Measures (medians over --runs): cached load time; for a ~600-token agent prompt: time to first token (cold cache),
prefill tok/s, decode tok/s at batch 1 and aggregate at batch 4/8 (HF `generate` at batch 1 for comparison); the
per-step cost of the agent's action scoring as an episode's prompt grows, with and without prefix reuse; and the cost
of K=4 sibling candidates vs one sampled decision. The default backend decodes with fp16 weight copies
(`policy.half_decode_rows`, evorag_core/lm/half_decode.py) and, where the CPU has native bf16 instructions,
prefills with bf16 copies (`policy.prefill_dtype` "auto"); `--half-decode-rows 0 --prefill-dtype float32` times the
exact fp32 path. The K = 4 cost is reported from blocks of runs and from back-to-back pairs (`k4_over_one_paired`).
`--variants` also times decode/prefill for exact fp32, fp32 with fp16 decode copies, the same with bf16 prefill
copies, and bfloat16 weights, x 1/2 threads. The load average is recorded because the machine may be shared: on a busy
machine compare the `*_cpu` figures (rates from process CPU time; with --threads 1 they approximate an idle machine).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from evorag_core.config import PREFILL_DTYPES, PolicyConfig, home_dir
from evorag_core.policy.agent import LMPolicy
from evorag_core.lm.hf_backend import TransformersBackend
from evorag_core.lm.half_decode import cpu_model, resolve_prefill_dtype
from evorag_core.policy.prompts import LABELS
from evorag_core.env.state import AgentView, Hop
from evorag_core.types import Passage

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT.parent / "shared" / "benchmarks" / "hotpotqa_dev300.jsonl"
TARGETS = {"decode_batch1_tok_s": 30.0, "cached_load_s": 3.0, "k4_over_one": 2.0}


def _median_time(fn, runs: int) -> tuple[float, float]:
    """Medians of wall-clock and of process CPU seconds over `runs` calls. With one torch thread the CPU seconds
    approximate the wall time on an idle machine (the machine may be shared; see the module docstring)."""
    walls, cpus = [], []
    for _ in range(runs):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _question() -> tuple[str, list[Passage]]:
    """The first HotpotQA question and its passages when shared/benchmarks is present, else a synthetic one."""
    if BENCHMARKS.is_file():
        record = json.loads(BENCHMARKS.read_text(encoding="utf-8").splitlines()[0])
        passages = [Passage(p["pid"], p["title"], p["text"]) for p in record["passages"]]
        return record["question"], passages
    text = "The river flows through the old town, past the cathedral and the market square, to the sea. " * 4
    return "Which town does the river flow through?", [Passage(f"s{i}", f"Town {i}", text) for i in range(10)]


def _views(question: str, passages: list[Passage], hops: int, per_hop: int = 3) -> list[AgentView]:
    chain = tuple(Hop(f"search {i + 1} for {question[:40]}", tuple(passages[i * per_hop:(i + 1) * per_hop]))
                  for i in range(hops))
    return [AgentView(question, chain[:t], (), t + 1, 20) for t in range(hops + 1)]


def bench_load(cfg: PolicyConfig, home: Path, runs: int) -> dict:
    TransformersBackend(cfg, home)  # converts the GGUF on the very first run
    loads = [TransformersBackend(cfg, home).load_seconds for _ in range(runs)]
    return {"cached_load_s": statistics.median(loads), "all_s": loads}


def bench_decode(backend: TransformersBackend, prompt: str, runs: int, tokens: int) -> dict:
    """Cold time to first token (prefill), then decode rates from (time of `tokens` tokens - time of 1 token) with
    the prompt already cached; `*_cpu` figures use process CPU time instead of wall time."""
    def cold_first_token():
        backend.reset_cache()
        backend.generate(prompt, 1)

    prompt_len = len(backend.encode(prompt))
    ttft, ttft_cpu = _median_time(cold_first_token, runs)
    out = {"prompt_tokens": prompt_len, "ttft_cold_s": ttft, "prefill_tok_s": prompt_len / ttft,
           "prefill_tok_s_cpu": prompt_len / ttft_cpu}
    for n in (1, 4, 8):
        temperature = 0.0 if n == 1 else 1.0
        backend.generate(prompt, 2, temperature=temperature, n=n, seed=0)  # warm: prompt cached
        one = _median_time(lambda: backend.generate(prompt, 1, temperature=temperature, n=n, seed=0), runs)
        full = _median_time(lambda: backend.generate(prompt, tokens, temperature=temperature, n=n, seed=0,
                                                     ignore_eos=True), runs)
        out[f"decode_batch{n}_tok_s"] = n * (tokens - 1) / (full[0] - one[0])
        out[f"decode_batch{n}_tok_s_cpu"] = n * (tokens - 1) / (full[1] - one[1])
        out[f"decode_batch{n}_step_ms"] = 1000 * (full[0] - one[0]) / (tokens - 1)
    ids = torch.tensor([backend.encode(prompt)])
    with torch.inference_mode():
        backend.model.generate(ids, max_new_tokens=4, do_sample=False)
        gen, gen_cpu = _median_time(lambda: backend.model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens,
                                                                   do_sample=False), max(2, runs // 2))
    out["hf_generate_batch1_tok_s"] = tokens / (gen - ttft)  # its prefill is about our cold TTFT
    out["hf_generate_batch1_tok_s_cpu"] = tokens / (gen_cpu - ttft_cpu)
    return out


def bench_prefix_reuse(backend: TransformersBackend, policy: LMPolicy, views: list[AgentView], runs: int) -> list:
    labels = list(LABELS.values())
    prompts = [policy.prompt(v) for v in views]
    lengths = [len(backend.encode(p)) for p in prompts]
    with_reuse: list[list[tuple[float, float]]] = [[] for _ in prompts]
    without: list[list[tuple[float, float]]] = [[] for _ in prompts]
    for _ in range(runs):
        backend.reset_cache()
        for i, p in enumerate(prompts):  # an episode: each step's prompt extends the previous one
            with_reuse[i].append(_median_time(lambda: backend.score_choices(p, labels), 1))
        for i, p in enumerate(prompts):
            backend.reset_cache()
            without[i].append(_median_time(lambda: backend.score_choices(p, labels), 1))
    rows = []
    for i, p in enumerate(prompts):
        new = lengths[i] - (_common(backend.encode(prompts[i - 1]), backend.encode(p)) if i else 0)
        rows.append({"step": i + 1, "prompt_tokens": lengths[i], "new_tokens": new,
                     "with_reuse_s": statistics.median(w for w, _ in with_reuse[i]),
                     "without_reuse_s": statistics.median(w for w, _ in without[i]),
                     "with_reuse_cpu_s": statistics.median(c for _, c in with_reuse[i]),
                     "without_reuse_cpu_s": statistics.median(c for _, c in without[i])})
    return rows


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def bench_siblings(backend: TransformersBackend, policy: LMPolicy, view: AgentView, runs: int,
                   tokens: int = 24) -> dict:
    """K = 4 siblings against one, at equal work per candidate: the action scoring pass plus an argument of exactly
    `tokens` sampled tokens (end tokens ignored), once for one candidate, once for four decoded as one batch, and
    once for four decoded one after the other. The policy-level figures (`policy.act(sample=True)` vs
    `policy.candidates(k=4)`) are kept too; they differ in work as well as in batching (a sampled single decision may
    be BACKTRACK/REFUSE with no argument to generate, four draws almost always include SEARCH/ANSWER)."""
    policy.act(view)  # the prompt is in the prefix cache, as within an episode
    prompt = policy.prompt(view) + LABELS["SEARCH"]
    seeds = iter(range(10_000))

    def decide(k: int, batched: bool) -> None:
        backend.score_choices(policy.prompt(view), list(LABELS.values()))
        if batched:
            backend.generate_batch([prompt] * k, tokens, temperature=1.0, seed=next(seeds), ignore_eos=True)
        else:
            for _ in range(k):
                backend.generate_batch([prompt], tokens, temperature=1.0, seed=next(seeds), ignore_eos=True)

    one = _median_time(lambda: decide(1, True), runs)
    k4 = _median_time(lambda: decide(4, True), runs)
    k4_seq = _median_time(lambda: decide(4, False), runs)
    p_one = _median_time(lambda: policy.act(view, sample=True, seed=next(seeds)), runs)
    p_k4 = _median_time(lambda: policy.candidates(view, k=4, seed=next(seeds)), runs)
    # the same ratio from back-to-back pairs (one, then four), so that a drift of the machine's speed between the
    # blocks above does not enter it; each pair's ratio is kept
    paired = []
    for _ in range(runs):
        t_one = _median_time(lambda: decide(1, True), 1)[0]
        paired.append(_median_time(lambda: decide(4, True), 1)[0] / t_one)
    return {"argument_tokens": tokens, "one_s": one[0], "k4_s": k4[0], "k4_sequential_s": k4_seq[0],
            "k4_over_one": k4[0] / one[0], "k4_over_one_cpu": k4[1] / one[1],
            "k4_sequential_over_one": k4_seq[0] / one[0],
            "k4_over_one_paired_median": statistics.median(paired), "k4_over_one_paired": paired,
            "policy_act_sampled_s": p_one[0], "policy_candidates_k4_s": p_k4[0]}


VARIANTS = (  # (dtype, half_decode_rows, prefill_dtype)
    ("float32", 0, "float32"), ("float32", 4, "float32"), ("float32", 4, "bfloat16"), ("bfloat16", 0, "float32"),
)


def bench_variants(home: Path, prompt: str, runs: int, tokens: int, threads_list: list[int]) -> list:
    rows = []
    for dtype, half_rows, prefill in VARIANTS:
        backend = TransformersBackend(
            PolicyConfig(device="cpu", dtype=dtype, half_decode_rows=half_rows, prefill_dtype=prefill), home
        )
        for threads in threads_list:
            torch.set_num_threads(threads)
            d = bench_decode(backend, prompt, runs, tokens)
            rows.append({"dtype": dtype, "half_decode_rows": half_rows, "prefill_dtype": prefill,
                         "threads": threads,
                         "prefill_tok_s": d["prefill_tok_s"],
                         "decode_batch1_tok_s": d["decode_batch1_tok_s"], "decode_batch4_tok_s": d["decode_batch4_tok_s"],
                         "decode_batch1_tok_s_cpu": d["decode_batch1_tok_s_cpu"],
                         "hf_generate_batch1_tok_s": d["hf_generate_batch1_tok_s"]})
            print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "lm_speed.json")
    ap.add_argument("--home", type=Path, default=None, help="EVORAG_HOME (holds the converted model)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32, help="decode tokens per timing")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--half-decode-rows", type=int, default=PolicyConfig().half_decode_rows,
                    help="decode with fp16 weight copies up to this many rows (0: exact fp32)")
    ap.add_argument("--prefill-dtype", default=PolicyConfig().prefill_dtype, choices=PREFILL_DTYPES,
                    help="prompt forwards through bf16 weight copies (auto: where the CPU has native bf16)")
    ap.add_argument("--variants", action="store_true", help="also time float32/bfloat16 x --variant-threads")
    ap.add_argument("--variant-threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args(argv)
    home = args.home or home_dir()
    cfg = PolicyConfig(device="cpu", dtype=args.dtype, threads=args.threads, half_decode_rows=args.half_decode_rows,
                       prefill_dtype=args.prefill_dtype)
    load_start = os.getloadavg()

    result: dict = {}

    def save() -> None:  # after every section, so that an interrupted run keeps what it measured
        result["machine"] = {
            "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "dtype": args.dtype,
            "half_decode_rows": args.half_decode_rows, "prefill_dtype": args.prefill_dtype,
            "prefill_dtype_resolved": resolve_prefill_dtype(args.prefill_dtype), "cpu_model": cpu_model(),
            "torch": torch.__version__, "python": platform.python_version(), "runs": args.runs,
            "loadavg_start": load_start, "loadavg_now": os.getloadavg(),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    result["load"] = bench_load(cfg, home, args.runs)
    backend = TransformersBackend(cfg, home)
    policy = LMPolicy(backend, cfg)
    question, passages = _question()
    views = _views(question, passages, hops=3)
    prompt = policy.prompt(views[1])  # question + one hop: ~700 tokens with the demonstration
    result["decode"] = bench_decode(backend, prompt, args.runs, args.tokens)
    save()
    result["prefix_reuse"] = bench_prefix_reuse(backend, policy, views, args.runs)
    save()
    result["siblings"] = bench_siblings(backend, policy, views[1], args.runs)
    result["targets"] = {
        "decode_batch1_tok_s": [TARGETS["decode_batch1_tok_s"], result["decode"]["decode_batch1_tok_s"]],
        "cached_load_s": [TARGETS["cached_load_s"], result["load"]["cached_load_s"]],
        "k4_over_one": [TARGETS["k4_over_one"], result["siblings"]["k4_over_one"]],
    }
    save()
    if args.variants:
        result["variants"] = bench_variants(home, prompt, args.runs, args.tokens, args.variant_threads)
        save()
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
