"""The served policy (`policy.backend = "openai"`) through llama.cpp's server beside the in-process transformers
backend, on this machine: agent step time and decode tokens/s. Prints and writes JSON (default
bench/results/served.json).

    python -m bench.served [--engine llama-cpp-python | llama.cpp] [--questions 6] [--threads 1] [--tokens 64]
                           [--out PATH]

Both backends serve the embedded SmolLM2-135M-Instruct: a llama.cpp server (`--engine`: "llama-cpp-python", the
`[served-python]` extra, which the figures in docs/serving.md were measured with; or "llama.cpp", its C++ server from
the `[served]` wheel) the Q4_1 GGUF itself, in process its fp32 de-quantization with the default fast paths (fp16
decode copies, bf16 prefill where the CPU has it). Both get `--threads` threads.

- agent steps: greedy episodes of the first `--questions` demo questions with each backend (`env.t_max` 4, top-3
  passages of 200 characters); seconds per decision (label scoring, the argument, the reader's answer), and whether
  the two backends chose the same actions. Both run `policy.query_mode = "free"` and `answer.mode = "free"`: the
  grounded queries and the span reader score dozens of candidates per step, which through llama-cpp-python's
  server costs a request (~1 s of its Python log-prob code) per candidate token (docs/serving.md).
- decode: one greedy generation of `--tokens` tokens (ignore_eos) after an agent prompt, three runs, median; for the
  server both as the backend asks (`logprobs=1`: llama-cpp-python then sorts the vocabulary in Python for every
  token) and as a plain completion without log-probs (llama.cpp's own decode speed).
The load average is recorded: on the shared 2-core machine other jobs run beside this one.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from evorag_core.config import Config, apply_overrides, home_dir
from evorag_core.data.datasets import load_dataset
from evorag_core.env.actions import action_name
from evorag_core.lm.hf_backend import TransformersBackend
from evorag_core.lm.llama_server import ENGINES, LlamaServer
from evorag_core.lm.loading import embedded_gguf_path
from evorag_core.lm.openai_backend import OpenAIBackend
from evorag_core.methods.base import run_episode
from evorag_core.policy.agent import LMPolicy
from evorag_core.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo" / "demo.jsonl"


class Timed:
    """Episode policy: greedy decisions of `lm`, each timed."""

    name = "lm"

    def __init__(self, lm: LMPolicy) -> None:
        self.lm, self.seconds, self.actions = lm, [], []

    def begin(self, question) -> None:
        self.actions.append([])

    def act(self, view):
        start = time.perf_counter()
        decision = self.lm.act(view)
        self.seconds.append(time.perf_counter() - start)
        self.actions[-1].append(action_name(decision.action))
        return decision.action, {"logprob": decision.logprob, "completion": decision.completion}


def episodes(backend, runtime: Runtime, questions) -> dict[str, Any]:
    policy = Timed(LMPolicy(backend, runtime.cfg.policy, runtime.cfg.answer))
    answers = []
    start = time.perf_counter()
    for q in questions:
        answers.append(run_episode(runtime.make_env(q), policy, q).answer)
    s = policy.seconds
    return {"steps": len(s), "step_s_mean": round(statistics.mean(s), 3), "step_s_median": round(statistics.median(s), 3),
            "total_s": round(time.perf_counter() - start, 2), "actions": policy.actions, "answers": answers}


def decode(generate, tokens: int, runs: int = 3) -> float:
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        n = generate()
        rates.append(n / (time.perf_counter() - start))
    return round(statistics.median(rates), 2)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=list(ENGINES), default="llama-cpp-python")
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "served.json")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    home = home_dir()
    cfg = apply_overrides(Config(), {"env.t_max": 4, "env.top_k": 3, "policy.max_answer_tokens": 12,
                                     "policy.max_query_tokens": 16, "policy.passage_chars": 200,
                                     "policy.threads": args.threads, "policy.query_mode": "free",
                                     "answer.mode": "free"})
    runtime = Runtime(cfg, home, load_dataset(DEMO))
    questions = runtime.dataset.questions[: args.questions]
    out: dict[str, Any] = {"questions": [q.id for q in questions], "threads": args.threads,
                           "load_average_start": os.getloadavg(),
                           "note": "shared 2-core machine: other jobs (a benchmark, other helpers) ran beside this one"}
    local = TransformersBackend(cfg.policy, home)
    out["engine"] = args.engine
    with LlamaServer(embedded_gguf_path(), threads=args.threads, engine=args.engine) as server:
        served = OpenAIBackend(dataclasses.replace(cfg.policy, backend="openai", base_url=server.base_url), home)
        out["in_process"] = episodes(local, runtime, questions)
        out["served"] = episodes(served, runtime, questions)
        pairs = list(zip(out["in_process"]["actions"], out["served"]["actions"]))
        out["same_actions_questions"] = sum(a == b for a, b in pairs)
        out["served"].update(requests=served.requests, boundary_merges=served.boundary_merges,
                             rescored_generations=served.rescored_generations, protocol=served.protocol)
        env = runtime.make_env(questions[0])
        env.reset(questions[0])
        prompt = LMPolicy(local, cfg.policy).prompt(env.view())
        out["decode_prompt_tokens"] = len(local.encode(prompt))
        out["decode_tok_s"] = {
            "in_process": decode(lambda: len(local.generate(prompt, args.tokens, ignore_eos=True)[0].token_ids),
                                 args.tokens),
            "served_backend_logprobs": decode(
                lambda: len(served.generate(prompt, args.tokens, ignore_eos=True)[0].token_ids), args.tokens),
            "served_plain": decode(lambda: _plain(server.base_url, prompt, args.tokens), args.tokens),
        }
        served.close()
    out["load_average_end"] = os.getloadavg()
    text = json.dumps(out, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return out


def _plain(base_url: str, prompt: str, tokens: int) -> int:
    """One completion without log-probs; the number of tokens the server generated."""
    reply = httpx.post(f"{base_url}/completions", json={"model": "policy", "prompt": prompt, "max_tokens": tokens,
                                                        "min_tokens": tokens, "temperature": 0.0}, timeout=600)
    reply.raise_for_status()
    return int(reply.json()["usage"]["completion_tokens"])


if __name__ == "__main__":
    main()
